"""Compensation by the declared inverse, exactly once (issue 4, part)."""

from __future__ import annotations

import asyncio
import json
import time
import uuid

import grpc
import pytest
import redis

from countersign.keyring import Keyring
from countersign.path.inverse import inverse_id
from countersign.testing.calls import ctx, error_info
from countersign.testing.stack import Stack
from countersign.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc


def created(stack: Stack, title: str) -> tuple[gateway_pb2.ConfirmationCard, common_pb2.Action]:
    card = stack.card(request_id=uuid.uuid4().hex, title=title)
    action = stack.stub().Confirm(gateway_pb2.ConfirmRequest(context=ctx(), token=card.token)).action
    assert action.state == common_pb2.ACTION_STATE_SUCCEEDED
    return card, action


def test_compensate_twice_concurrently_runs_the_inverse_once(stack: Stack) -> None:
    card, action = created(stack, "要撤销的")

    async def twice() -> list[common_pb2.Action]:
        async with grpc.aio.insecure_channel(stack.address) as channel:
            stub = gateway_pb2_grpc.ToolGatewayServiceStub(channel)
            calls = [
                stub.Compensate(gateway_pb2.CompensateRequest(context=ctx(), action_id=card.action_id))
                for _ in range(2)
            ]
            return [r.action for r in await asyncio.gather(*calls)]

    results = asyncio.run(twice())
    assert {r.state for r in results} <= {common_pb2.ACTION_STATE_COMPENSATED, common_pb2.ACTION_STATE_COMPENSATING}
    assert sorted(r.replayed for r in results) == [False, True]
    comp = inverse_id(Keyring.from_file(str(stack.keys)), card.action_id)
    deletes = stack.todo.writes(comp)
    assert len(deletes) == 1 and deletes[0]["method"] == "DELETE"
    assert deletes[0]["path"] == f"/todos/{action.receipt.resource_id}"
    assert stack.todo.get(f"/todos/{action.receipt.resource_id}")["reason"] == "TODO_NOT_FOUND"
    again = stack.stub().Compensate(gateway_pb2.CompensateRequest(context=ctx(), action_id=card.action_id)).action
    assert again.state == common_pb2.ACTION_STATE_COMPENSATED and again.replayed
    got = stack.stub().GetAction(gateway_pb2.GetActionRequest(context=ctx(), action_id=card.action_id)).action
    assert got.state == common_pb2.ACTION_STATE_COMPENSATED and got.receipt == action.receipt
    assert len(stack.todo.writes(comp)) == 1


def test_a_failing_inverse_is_compensation_failed_with_its_reason_and_never_retried(stack: Stack) -> None:
    card, action = created(stack, "已被别人删除")
    stack.todo._call("DELETE", f"/todos/{action.receipt.resource_id}", None, {"Idempotency-Key": uuid.uuid4().hex})
    result = stack.stub().Compensate(gateway_pb2.CompensateRequest(context=ctx(), action_id=card.action_id)).action
    assert result.state == common_pb2.ACTION_STATE_COMPENSATION_FAILED
    assert result.error.reason == "TODO_NOT_FOUND"
    comp = inverse_id(Keyring.from_file(str(stack.keys)), card.action_id)
    for _ in range(3):
        again = stack.stub().Compensate(gateway_pb2.CompensateRequest(context=ctx(), action_id=card.action_id))
        assert again.action.state == common_pb2.ACTION_STATE_COMPENSATION_FAILED and again.action.replayed
    assert len(stack.todo.writes(comp)) == 1, "never retried in a loop"
    r = redis.Redis(unix_socket_path=stack.redis.info["socket"])
    deadline = time.monotonic() + 5
    events: list[dict[str, object]] = []
    while time.monotonic() < deadline and not any(e["t"] == "compensated" for e in events):
        events = [json.loads(f[b"e"]) for _, f in r.xrange(f"cs:{{{card.action_id}}}:events")]
        time.sleep(0.05)
    failed = [e for e in events if e["t"] == "compensated"]
    assert failed and failed[0]["f"]["outcome"] == "failed" and failed[0]["f"]["reason"] == "TODO_NOT_FOUND"


def test_only_a_succeeded_action_with_a_declared_inverse_can_be_compensated(stack: Stack) -> None:
    pending = stack.card(request_id=uuid.uuid4().hex, title="还没确认")
    with pytest.raises(grpc.RpcError) as info:
        stack.stub().Compensate(gateway_pb2.CompensateRequest(context=ctx(), action_id=pending.action_id))
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
    assert done.state == common_pb2.ACTION_STATE_SUCCEEDED
    with pytest.raises(grpc.RpcError) as info:
        stack.stub().Compensate(gateway_pb2.CompensateRequest(context=ctx(), action_id=card.action_id))
    assert error_info(info.value).reason == "NO_COMPENSATION"


def test_the_caller_must_be_allowed_to_run_the_inverse(stack: Stack) -> None:
    card, _ = created(stack, "只读会话")
    with pytest.raises(grpc.RpcError) as info:
        stack.stub().Compensate(
            gateway_pb2.CompensateRequest(
                context=ctx(session_mode=common_pb2.SESSION_MODE_READ_ONLY), action_id=card.action_id
            )
        )
    assert error_info(info.value).reason == "SESSION_MODE_FORBIDS"
    with pytest.raises(grpc.RpcError) as info:
        stack.stub().Compensate(
            gateway_pb2.CompensateRequest(
                context=ctx(actor_id="mallory", subject_id="mallory"), action_id=card.action_id
            )
        )
    assert error_info(info.value).reason == "CONFIRMATION_BINDING_MISMATCH"
