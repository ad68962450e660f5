"""Continuations and the reply guard over real gRPC, real Redis and the real todo service (issue 3)."""

from __future__ import annotations

import asyncio
import json
import time
import uuid

import grpc
import pytest

from countersign.testing.calls import ctx, error_info
from countersign.testing.stack import Stack
from countersign.v1 import (
    common_pb2,
    continuation_pb2,
    continuation_pb2_grpc,
    gateway_pb2,
    guard_pb2,
    guard_pb2_grpc,
)

C = continuation_pb2
SNAPSHOT = C.ContinuationSnapshot(question="帮我建一个买牛奶的待办", locale="zh-CN", lead_in="好的，")


def conts(stack: Stack) -> continuation_pb2_grpc.ContinuationServiceStub:
    return continuation_pb2_grpc.ContinuationServiceStub(grpc.insecure_channel(stack.address))


def guard(stack: Stack) -> guard_pb2_grpc.ReplyGuardServiceStub:
    return guard_pb2_grpc.ReplyGuardServiceStub(grpc.insecure_channel(stack.address))


def turn() -> str:
    return uuid.uuid4().hex


def open_for(stack: Stack, action_id: str, **context: object) -> C.Continuation:
    return (
        conts(stack)
        .OpenContinuation(C.OpenContinuationRequest(context=ctx(**context), action_id=action_id, snapshot=SNAPSHOT))
        .continuation
    )


def claim(stack: Stack, token: str, **context: object) -> C.Continuation:
    return conts(stack).ClaimContinuation(C.ClaimContinuationRequest(context=ctx(**context), token=token)).continuation


def settle(stack: Stack, token: str, text: str, claim_id: str = "", **context: object) -> C.Continuation:
    return (
        conts(stack)
        .SettleContinuation(
            C.SettleContinuationRequest(context=ctx(**context), token=token, reply_text=text, claim_id=claim_id)
        )
        .continuation
    )


def release(stack: Stack, token: str, claim_id: str = "", **context: object) -> C.Continuation:
    return (
        conts(stack)
        .ReleaseContinuation(
            C.ReleaseContinuationRequest(context=ctx(**context), token=token, reason="model timeout", claim_id=claim_id)
        )
        .continuation
    )


def confirmed(stack: Stack, title: str = "买牛奶", request_id: str | None = None) -> gateway_pb2.ConfirmationCard:
    card = stack.card(request_id=request_id or turn(), title=title)
    action = stack.stub().Confirm(gateway_pb2.ConfirmRequest(context=ctx(), token=card.token)).action
    assert action.state == common_pb2.ACTION_STATE_SUCCEEDED
    return card


def test_no_succeeded_receipt_no_claim_and_another_actions_receipt_never_activates_it(stack: Stack) -> None:
    card = stack.card(request_id=turn(), title="还没确认")
    cont = open_for(stack, card.action_id)
    assert cont.state == C.CONTINUATION_STATE_PENDING and cont.token != card.token
    with pytest.raises(grpc.RpcError) as info:
        claim(stack, cont.token)
    assert (info.value.code(), error_info(info.value).reason) == (
        grpc.StatusCode.FAILED_PRECONDITION,
        "CONTINUATION_NOT_READY",
    )
    assert "not been confirmed" in (info.value.details() or "")
    confirmed(stack, title="别的动作")  # another action succeeds: this one stays pending
    with pytest.raises(grpc.RpcError) as info:
        claim(stack, cont.token)
    assert error_info(info.value).reason == "CONTINUATION_NOT_READY"
    # a confirmation token is not a continuation token, and the reverse
    with pytest.raises(grpc.RpcError) as info:
        claim(stack, card.token)
    assert error_info(info.value).reason == "CONTINUATION_TOKEN_INVALID"


def test_a_failed_action_never_activates_its_continuation(stack: Stack) -> None:
    created = confirmed(stack, title="会冲突")
    receipt = stack.stub().GetAction(gateway_pb2.GetActionRequest(context=ctx(), action_id=created.action_id))
    todo_id = receipt.action.receipt.resource_id
    stack.todo.post(f"/todos/{todo_id}/status", {"status": "done", "version": 1}, key=uuid.uuid4().hex)
    card = (
        stack.stub()
        .Invoke(
            gateway_pb2.InvokeRequest(
                context=ctx(request_id=turn()),
                tool_name="set_todo_status",
                arguments_json=json.dumps({"id": todo_id, "status": "open", "version": 1}),
            )
        )
        .confirmation
    )
    cont = open_for(stack, card.action_id)
    failed = stack.stub().Confirm(gateway_pb2.ConfirmRequest(context=ctx(), token=card.token)).action
    assert failed.state == common_pb2.ACTION_STATE_FAILED
    with pytest.raises(grpc.RpcError) as info:
        claim(stack, cont.token)
    assert error_info(info.value).reason == "CONTINUATION_NOT_READY"
    assert "TODO_VERSION_CONFLICT" in (info.value.details() or "")


def test_settle_wakes_the_continuation_and_claim_returns_snapshot_facts_and_receipt(stack: Stack) -> None:
    rid = turn()
    stack.stub().Invoke(
        gateway_pb2.InvokeRequest(context=ctx(request_id=rid), tool_name="list_todos", arguments_json="{}")
    )
    card = stack.card(request_id=rid, title="快照")
    cont = open_for(stack, card.action_id, request_id=rid)
    assert open_for(stack, card.action_id, request_id=rid).token == cont.token, "opening twice: the same one"
    stack.stub().Confirm(gateway_pb2.ConfirmRequest(context=ctx(), token=card.token))
    got = claim(stack, cont.token)
    assert got.state == C.CONTINUATION_STATE_RUNNING
    assert got.snapshot.question == SNAPSHOT.question
    assert [f.tool_name for f in got.facts] == ["list_todos"] and got.facts[0].status == "succeeded"
    assert got.receipt.status == common_pb2.RECEIPT_STATUS_SUCCEEDED and got.receipt.action_id == card.action_id
    done = settle(stack, cont.token, "好的，待办「快照」已经帮你创建好了。", got.claim_id)
    assert done.state == C.CONTINUATION_STATE_SETTLED and done.reply_text.endswith("创建好了。")


def test_opened_after_success_it_is_ready_at_once(stack: Stack) -> None:
    card = confirmed(stack, title="先确认后开")
    assert open_for(stack, card.action_id).state == C.CONTINUATION_STATE_READY


def test_another_owner_cannot_open_or_claim(stack: Stack) -> None:
    card = confirmed(stack, title="别人的")
    with pytest.raises(grpc.RpcError) as info:
        open_for(stack, card.action_id, actor_id="mallory", subject_id="mallory")
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
    cont = open_for(stack, card.action_id)
    with pytest.raises(grpc.RpcError) as info:
        claim(stack, cont.token, session_id="other")
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED


def test_50_concurrent_claims_exactly_one_running(stack: Stack) -> None:
    card = confirmed(stack, title="五十个生成器")
    cont = open_for(stack, card.action_id)

    async def race() -> list[C.Continuation]:
        async with grpc.aio.insecure_channel(stack.address) as channel:
            stub = continuation_pb2_grpc.ContinuationServiceStub(channel)
            calls = [
                stub.ClaimContinuation(C.ClaimContinuationRequest(context=ctx(), token=cont.token)) for _ in range(50)
            ]
            return [r.continuation for r in await asyncio.gather(*calls)]

    results = asyncio.run(race())
    winners = [r for r in results if r.state == C.CONTINUATION_STATE_RUNNING and not r.replayed]
    assert len(winners) == 1
    assert all(r.replayed for r in results if r is not winners[0])


def test_release_makes_it_claimable_again_and_settled_replays_the_same_reply(stack: Stack) -> None:
    card = confirmed(stack, title="重试生成")
    cont = open_for(stack, card.action_id)
    first_claim = claim(stack, cont.token)
    assert first_claim.state == C.CONTINUATION_STATE_RUNNING and first_claim.claim_id
    assert claim(stack, cont.token).replayed, "a second claim while running gets RUNNING"
    released = release(stack, cont.token, first_claim.claim_id)
    assert released.state == C.CONTINUATION_STATE_READY
    second_claim = claim(stack, cont.token)
    assert second_claim.state == C.CONTINUATION_STATE_RUNNING and second_claim.claim_id != first_claim.claim_id
    first = settle(stack, cont.token, "待办「重试生成」已创建。", second_claim.claim_id)
    for again in (settle(stack, cont.token, "另一个回复", second_claim.claim_id), claim(stack, cont.token)):
        assert again.state == C.CONTINUATION_STATE_SETTLED and again.replayed
        assert again.reply_text == first.reply_text
    assert len(stack.todo.writes(card.action_id)) == 1, "no continuation path ran the write again"


def test_settle_without_claim_is_refused(stack: Stack) -> None:
    card = confirmed(stack, title="没认领")
    cont = open_for(stack, card.action_id)
    with pytest.raises(grpc.RpcError) as info:
        settle(stack, cont.token, "好了")
    assert error_info(info.value).reason == "CONTINUATION_NOT_CLAIMED"


def _lease_lost(call: object) -> None:
    with pytest.raises(grpc.RpcError) as info:
        call()  # type: ignore[operator]
    assert (info.value.code(), error_info(info.value).reason) == (
        grpc.StatusCode.FAILED_PRECONDITION,
        "CONTINUATION_LEASE_LOST",
    ), info.value


def test_a_second_generator_cannot_settle_or_release_the_first_ones_claim(stack: Stack) -> None:
    card = confirmed(stack, title="两个生成器")
    cont = open_for(stack, card.action_id)
    first = claim(stack, cont.token)
    second = claim(stack, cont.token)
    assert second.state == C.CONTINUATION_STATE_RUNNING and second.replayed and not second.claim_id
    for claim_id in ("", "0" * 24, second.claim_id):
        _lease_lost(lambda claim_id=claim_id: settle(stack, cont.token, "第二个生成器的回复", claim_id))
        _lease_lost(lambda claim_id=claim_id: release(stack, cont.token, claim_id))
    done = settle(stack, cont.token, "待办「两个生成器」已创建。", first.claim_id)
    assert done.state == C.CONTINUATION_STATE_SETTLED and done.reply_text == "待办「两个生成器」已创建。"
    _lease_lost(lambda: settle(stack, cont.token, "晚到的回复", "0" * 24))
    assert claim(stack, cont.token).reply_text == "待办「两个生成器」已创建。"


def test_a_continuation_reclaimed_after_its_lease_lapsed_stores_only_the_new_generators_reply(stack: Stack) -> None:
    sidecar = stack.start_sidecar(flags=["--continuation-lease", "1s"])
    short = continuation_pb2_grpc.ContinuationServiceStub(grpc.insecure_channel(sidecar.info["grpc"]))

    def claim_short() -> C.Continuation:
        return short.ClaimContinuation(C.ClaimContinuationRequest(context=ctx(), token=cont.token)).continuation

    def settle_short(text: str, claim_id: str) -> C.Continuation:
        return short.SettleContinuation(
            C.SettleContinuationRequest(context=ctx(), token=cont.token, reply_text=text, claim_id=claim_id)
        ).continuation

    try:
        card = confirmed(stack, title="租约过期")
        cont = open_for(stack, card.action_id)
        slow = claim_short()
        time.sleep(1.2)  # the first generator's lease lapses
        fresh = claim_short()
        assert fresh.state == C.CONTINUATION_STATE_RUNNING and not fresh.replayed
        assert fresh.claim_id and fresh.claim_id != slow.claim_id
        _lease_lost(lambda: settle_short("慢的回复", slow.claim_id))
        _lease_lost(
            lambda: short.ReleaseContinuation(
                C.ReleaseContinuationRequest(context=ctx(), token=cont.token, claim_id=slow.claim_id)
            )
        )
        done = settle_short("待办「租约过期」已创建。", fresh.claim_id)
        assert done.state == C.CONTINUATION_STATE_SETTLED and not done.replayed
        _lease_lost(lambda: settle_short("慢的回复", slow.claim_id))
        replay = claim_short()
        assert replay.replayed and replay.reply_text == "待办「租约过期」已创建。"
    finally:
        sidecar.stop()


def test_the_guard_on_settle_replaces_a_claim_the_receipt_contradicts(stack: Stack) -> None:
    card = confirmed(stack, title="创建不是删除")
    cont = open_for(stack, card.action_id)
    done = settle(stack, cont.token, "笔记已经删除了。", claim(stack, cont.token).claim_id)
    assert "已经删除" not in done.reply_text
    assert len(stack.todo.writes(card.action_id)) == 1


def check(
    stack: Stack, text: str, action_ids: list[str] | None = None, **context: object
) -> guard_pb2.CheckReplyResponse:
    return guard(stack).CheckReply(
        guard_pb2.CheckReplyRequest(context=ctx(**context), reply_text=text, action_ids=action_ids or [])
    )


def test_guard_blocks_a_claim_with_no_receipt(stack: Stack) -> None:
    verdict = check(stack, "已经帮你创建好了待办「买牛奶」！", request_id=turn())
    assert verdict.verdict == guard_pb2.GUARD_VERDICT_REPLACED
    assert verdict.reply_text == "该操作尚未执行：服务端没有生成可核验的确认或成功回执。"
    assert verdict.matched_claims and "NO_SUCCEEDED_RECEIPT" in verdict.reason


def test_guard_lets_a_read_only_answer_pass(stack: Stack) -> None:
    verdict = check(stack, "你有 3 条待办，其中 1 条今天到期。", request_id=turn())
    assert verdict.verdict == guard_pb2.GUARD_VERDICT_PASSED
    assert verdict.reply_text == "你有 3 条待办，其中 1 条今天到期。"


def test_guard_allows_the_success_sentence_when_a_succeeded_receipt_backs_it(stack: Stack) -> None:
    rid = turn()
    card = confirmed(stack, title="有回执", request_id=rid)
    text = "好的，已经帮你创建了待办「有回执」。"
    assert check(stack, text, [card.action_id], request_id=turn()).verdict == guard_pb2.GUARD_VERDICT_PASSED
    # the same request's action backs it too, without naming it
    assert check(stack, text, request_id=rid).verdict == guard_pb2.GUARD_VERDICT_PASSED
    assert (
        check(stack, "Done! I've created it.", [card.action_id], locale="en").verdict == guard_pb2.GUARD_VERDICT_PASSED
    )


def test_guard_replaces_a_claim_that_contradicts_its_receipt(stack: Stack) -> None:
    card = confirmed(stack, title="矛盾")
    verdict = check(stack, "The note has been deleted.", [card.action_id], locale="en")
    assert verdict.verdict == guard_pb2.GUARD_VERDICT_REPLACED
    assert "CLAIM_CONTRADICTS_RECEIPT" in verdict.reason


def test_guard_refuses_to_use_another_owners_receipt(stack: Stack) -> None:
    card = confirmed(stack, title="别人的回执")
    with pytest.raises(grpc.RpcError) as info:
        check(stack, "已经帮你创建好了。", [card.action_id], actor_id="mallory", subject_id="mallory")
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
