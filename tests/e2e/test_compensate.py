"""Compensation under approval (issue 13, item 7): Compensate proposes the declared inverse as a card of its own,
which executes only when confirmed like any card, exactly once."""

from __future__ import annotations

import asyncio
import json
import time
import uuid

import grpc
import pytest
import redis

from countersign.keyring import Keyring
from countersign.path.inverse import MAX_PROPOSALS, inverse_id
from countersign.testing.calls import ctx, error_info
from countersign.testing.stack import Stack
from countersign.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc

S = common_pb2


def created(stack: Stack, title: str) -> tuple[gateway_pb2.ConfirmationCard, common_pb2.Action]:
    card = stack.card(request_id=uuid.uuid4().hex, title=title)
    action = stack.stub().Confirm(gateway_pb2.ConfirmRequest(context=ctx(), token=card.token)).action
    assert action.state == S.ACTION_STATE_SUCCEEDED
    return card, action


def compensate(stack: Stack, action_id: str, **context: object) -> gateway_pb2.CompensateResponse:
    response: gateway_pb2.CompensateResponse = stack.stub().Compensate(
        gateway_pb2.CompensateRequest(context=ctx(**context), action_id=action_id)
    )
    return response


def state_of(stack: Stack, action_id: str) -> int:
    return int(stack.stub().GetAction(gateway_pb2.GetActionRequest(context=ctx(), action_id=action_id)).action.state)


def comp_id(stack: Stack, action_id: str) -> str:
    return inverse_id(Keyring.from_file(str(stack.keys)), action_id)


def test_compensate_returns_the_inverses_card_and_the_downstream_sees_nothing(stack: Stack) -> None:
    card, action = created(stack, "先不删")
    proposed = compensate(stack, card.action_id)
    inverse = proposed.confirmation
    assert proposed.HasField("confirmation") and inverse.token, proposed
    assert (inverse.tool_name, inverse.action_id) == ("delete_todo", comp_id(stack, card.action_id))
    assert json.loads(inverse.prepared_arguments_json) == {"id": action.receipt.resource_id}
    assert inverse.risk == S.RISK_LEVEL_MEDIUM and inverse.preview.title == "删除待办"
    assert proposed.action.state == S.ACTION_STATE_COMPENSATING and not proposed.action.replayed
    assert stack.todo.writes(inverse.action_id) == [], "the inverse ran without a confirmation"
    assert stack.todo.get(f"/todos/{action.receipt.resource_id}")["title"] == "先不删"
    assert state_of(stack, card.action_id) == S.ACTION_STATE_COMPENSATING
    again = compensate(stack, card.action_id)
    assert again.confirmation == inverse and again.action.replayed, "a second Compensate returns the same card"


def test_the_inverse_runs_only_when_confirmed_and_two_confirms_run_it_once(stack: Stack) -> None:
    card, action = created(stack, "要撤销的")

    async def twice(call: str, request: object) -> list[object]:
        async with grpc.aio.insecure_channel(stack.address) as channel:
            stub = gateway_pb2_grpc.ToolGatewayServiceStub(channel)
            return list(await asyncio.gather(*(getattr(stub, call)(request) for _ in range(2))))

    proposals = asyncio.run(twice("Compensate", gateway_pb2.CompensateRequest(context=ctx(), action_id=card.action_id)))
    tokens = {p.confirmation.token for p in proposals}  # type: ignore[attr-defined]
    assert len(tokens) == 1 and "" not in tokens, "two concurrent Compensates propose one inverse"
    inverse = proposals[0].confirmation  # type: ignore[attr-defined]
    assert stack.todo.writes(inverse.action_id) == []
    confirms = asyncio.run(
        twice("Confirm", gateway_pb2.ConfirmRequest(context=ctx(), token=inverse.token, wait_ms=3000))
    )
    assert {c.action.state for c in confirms} == {S.ACTION_STATE_SUCCEEDED}  # type: ignore[attr-defined]
    assert sorted(c.action.replayed for c in confirms) == [False, True]  # type: ignore[attr-defined]
    deletes = stack.todo.writes(inverse.action_id)
    assert len(deletes) == 1 and deletes[0]["method"] == "DELETE"
    assert deletes[0]["path"] == f"/todos/{action.receipt.resource_id}"
    assert stack.todo.get(f"/todos/{action.receipt.resource_id}")["reason"] == "TODO_NOT_FOUND"
    settled = compensate(stack, card.action_id)
    assert not settled.HasField("confirmation"), "once settled, Compensate answers the outcome, not a card"
    assert settled.action.state == S.ACTION_STATE_COMPENSATED and settled.action.replayed
    got = stack.stub().GetAction(gateway_pb2.GetActionRequest(context=ctx(), action_id=card.action_id)).action
    assert got.state == S.ACTION_STATE_COMPENSATED and got.receipt == action.receipt
    assert len(stack.todo.writes(inverse.action_id)) == 1


def test_a_declined_inverse_leaves_the_action_succeeded_and_a_new_proposal_can_follow(stack: Stack) -> None:
    card, action = created(stack, "留着吧")
    first = compensate(stack, card.action_id).confirmation
    declined = stack.stub().Reject(gateway_pb2.RejectRequest(context=ctx(), token=first.token)).action
    assert declined.state == S.ACTION_STATE_REJECTED
    assert state_of(stack, card.action_id) == S.ACTION_STATE_SUCCEEDED
    assert stack.todo.writes(first.action_id) == []
    assert stack.todo.get(f"/todos/{action.receipt.resource_id}")["title"] == "留着吧"
    # the user changes their mind again: a fresh card (the declined one stays declined)
    second = compensate(stack, card.action_id)
    assert second.confirmation.token and second.confirmation.action_id != first.action_id
    assert second.action.state == S.ACTION_STATE_COMPENSATING
    late = stack.stub().Confirm(gateway_pb2.ConfirmRequest(context=ctx(), token=first.token)).action
    assert late.state == S.ACTION_STATE_REJECTED and late.replayed, "the declined card never runs"
    assert stack.stub().Confirm(
        gateway_pb2.ConfirmRequest(context=ctx(), token=second.confirmation.token)
    ).action.state == (S.ACTION_STATE_SUCCEEDED)
    assert state_of(stack, card.action_id) == S.ACTION_STATE_COMPENSATED
    deletes = [r for r in stack.todo.requests(path=f"/todos/{action.receipt.resource_id}") if r["method"] == "DELETE"]
    assert len(deletes) == 1 and deletes[0]["idempotency_key"] == second.confirmation.action_id


def test_a_failing_inverse_is_compensation_failed_with_its_reason_and_never_retried(stack: Stack) -> None:
    card, action = created(stack, "已被别人删除")
    stack.todo._call("DELETE", f"/todos/{action.receipt.resource_id}", None, {"Idempotency-Key": uuid.uuid4().hex})
    inverse = compensate(stack, card.action_id).confirmation
    result = stack.stub().Confirm(gateway_pb2.ConfirmRequest(context=ctx(), token=inverse.token)).action
    assert result.state == S.ACTION_STATE_FAILED and result.error.reason == "TODO_NOT_FOUND"
    for _ in range(3):
        again = compensate(stack, card.action_id)
        assert not again.HasField("confirmation")
        assert again.action.state == S.ACTION_STATE_COMPENSATION_FAILED and again.action.replayed
        assert again.action.error.reason == "TODO_NOT_FOUND"
    assert len(stack.todo.writes(inverse.action_id)) == 1, "never retried in a loop"
    r = redis.Redis(unix_socket_path=stack.redis.info["socket"])
    deadline = time.monotonic() + 5
    events: list[dict[str, object]] = []
    while time.monotonic() < deadline and not any(e["t"] == "compensated" for e in events):
        events = [json.loads(f[b"e"]) for _, f in r.xrange(f"cs:{{{card.action_id}}}:events")]
        time.sleep(0.05)
    failed = [e for e in events if e["t"] == "compensated"]
    assert failed and failed[0]["f"]["outcome"] == "failed" and failed[0]["f"]["reason"] == "TODO_NOT_FOUND"
    assert failed[0]["f"]["inverse"] == inverse.action_id


def test_only_a_succeeded_action_with_a_declared_inverse_can_be_compensated(stack: Stack) -> None:
    pending = stack.card(request_id=uuid.uuid4().hex, title="还没确认")
    with pytest.raises(grpc.RpcError) as info:
        compensate(stack, pending.action_id)
    assert (info.value.code(), error_info(info.value).reason) == (
        grpc.StatusCode.FAILED_PRECONDITION,
        "NOT_COMPENSABLE",
    )
    _, action = created(stack, "状态")
    card = (
        stack.stub()
        .Invoke(
            gateway_pb2.InvokeRequest(
                context=ctx(request_id=uuid.uuid4().hex),
                tool_name="set_todo_status",
                arguments_json=json.dumps({"id": action.receipt.resource_id, "status": "done"}),
            )
        )
        .confirmation
    )
    done = stack.stub().Confirm(gateway_pb2.ConfirmRequest(context=ctx(), token=card.token)).action
    assert done.state == S.ACTION_STATE_SUCCEEDED
    with pytest.raises(grpc.RpcError) as info:
        compensate(stack, card.action_id)
    assert error_info(info.value).reason == "NO_COMPENSATION"


def test_another_owner_can_neither_propose_nor_confirm_the_inverse(stack: Stack) -> None:
    card, _ = created(stack, "只读会话")
    with pytest.raises(grpc.RpcError) as info:
        compensate(stack, card.action_id, session_mode=S.SESSION_MODE_READ_ONLY)
    assert error_info(info.value).reason == "SESSION_MODE_FORBIDS"
    mallory = {"actor_id": "mallory", "subject_id": "mallory"}
    with pytest.raises(grpc.RpcError) as info:
        compensate(stack, card.action_id, **mallory)
    assert (info.value.code(), error_info(info.value).reason) == (
        grpc.StatusCode.PERMISSION_DENIED,
        "CONFIRMATION_BINDING_MISMATCH",
    )
    assert state_of(stack, card.action_id) == S.ACTION_STATE_SUCCEEDED, "a refused Compensate proposes nothing"
    inverse = compensate(stack, card.action_id).confirmation
    with pytest.raises(grpc.RpcError) as info:
        stack.stub().Confirm(gateway_pb2.ConfirmRequest(context=ctx(**mallory), token=inverse.token))
    assert error_info(info.value).reason == "CONFIRMATION_BINDING_MISMATCH"
    assert stack.todo.writes(inverse.action_id) == []
    assert state_of(stack, card.action_id) == S.ACTION_STATE_COMPENSATING


def test_an_undo_declined_again_and_again_is_not_proposed_forever(stack: Stack) -> None:
    card, _ = created(stack, "一直拒绝")
    seen = set()
    for _ in range(MAX_PROPOSALS):
        inverse = compensate(stack, card.action_id).confirmation
        seen.add(inverse.action_id)
        stack.stub().Reject(gateway_pb2.RejectRequest(context=ctx(), token=inverse.token))
    assert len(seen) == MAX_PROPOSALS
    with pytest.raises(grpc.RpcError) as info:
        compensate(stack, card.action_id)
    assert error_info(info.value).reason == "NOT_COMPENSABLE" and "declined" in (info.value.details() or "")
    assert state_of(stack, card.action_id) == S.ACTION_STATE_SUCCEEDED
    assert all(stack.todo.writes(a) == [] for a in seen)


def test_an_undone_action_backs_no_success_claim_and_every_rpc_says_compensated(stack: Stack) -> None:
    """After its undo ran, "I've created it" is no longer true: CheckReply reads the action through its inverse, as
    GetAction does (I5), and Reconcile answers COMPENSATED, not SUCCEEDED. Before the undo runs (COMPENSATING) the
    original still stands and still backs the claim."""
    from countersign.v1 import guard_pb2, guard_pb2_grpc

    card, action = created(stack, "撤销后")

    def check(reply: str) -> guard_pb2.CheckReplyResponse:
        with grpc.insecure_channel(stack.address) as channel:
            answer: guard_pb2.CheckReplyResponse = guard_pb2_grpc.ReplyGuardServiceStub(channel).CheckReply(
                guard_pb2.CheckReplyRequest(context=ctx(), reply_text=reply, action_ids=[card.action_id])
            )
        return answer

    replies = ["已经帮你创建了待办「撤销后」。", "I've created the to-do for you."]
    passed = guard_pb2.GUARD_VERDICT_PASSED
    assert all(check(r).verdict == passed for r in replies), "a succeeded action backs its claim"
    inverse = compensate(stack, card.action_id).confirmation
    assert all(check(r).verdict == passed for r in replies), "a proposed undo has not run: the create stands"
    undone = stack.stub().Confirm(gateway_pb2.ConfirmRequest(context=ctx(), token=inverse.token, wait_ms=3000))
    assert undone.action.state == S.ACTION_STATE_SUCCEEDED
    for reply in replies:
        answer = check(reply)
        assert answer.verdict == guard_pb2.GUARD_VERDICT_REPLACED and answer.reply_text != reply, (reply, answer.reason)
        assert not answer.reason.startswith("BACKED_BY_RECEIPT"), answer.reason
    reconciled = stack.stub().Reconcile(gateway_pb2.ReconcileRequest(context=ctx(), action_id=card.action_id)).action
    assert reconciled.state == S.ACTION_STATE_COMPENSATED and reconciled.receipt == action.receipt
