"""Admission over gRPC against the real sidecar: Health.Watch streams are not load, and one caller holding every
slot with slow reads never starves another (the gate's own arithmetic: tests/unit/test_admission.py)."""

from __future__ import annotations

import time
import uuid
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from countersign.testing.calls import ctx, error_info
from countersign.testing.stack import Stack
from countersign.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc


def _flood_slow_reads(stub: gateway_pb2_grpc.ToolGatewayServiceStub, calls: int, **context: str) -> list[Any]:
    return [
        stub.Invoke.future(
            gateway_pb2.InvokeRequest(
                context=ctx(request_id=uuid.uuid4().hex, **context), tool_name="list_todos", arguments_json="{}"
            ),
            timeout=20,
        )
        for _ in range(calls)
    ]


def test_health_watch_streams_are_not_load(stack: Stack) -> None:
    """Watchers hold a stream open for as long as they like; they must not push the sidecar into shedding."""
    sidecar = stack.start_sidecar(flags=["--max-in-flight", "2"])
    channel = grpc.insecure_channel(sidecar.info["grpc"])
    try:
        health = health_pb2_grpc.HealthStub(channel)
        watches = [health.Watch(health_pb2.HealthCheckRequest(service="")) for _ in range(4)]
        for w in watches:
            assert next(w).status == health_pb2.HealthCheckResponse.SERVING
        stub = stack.stub(sidecar.info["grpc"])
        for i in range(3):
            time.sleep(0.01)  # past the gate's channelz refresh
            card = stack.card(stub, request_id=uuid.uuid4().hex, title=f"看护 {i}")
            done = stub.Confirm(gateway_pb2.ConfirmRequest(context=ctx(), token=card.token), timeout=10)
            assert done.action.state == common_pb2.ACTION_STATE_SUCCEEDED
        for w in watches:
            w.cancel()
    finally:
        channel.close()
        sidecar.stop()


def _wait_for_reads(stack: Stack, count: int) -> None:
    deadline = time.monotonic() + 10
    while len([e for e in stack.todo.requests(path="/todos") if e["method"] == "GET"]) < count:
        assert time.monotonic() < deadline, "the slow reads never reached the downstream"
        time.sleep(0.02)


def test_one_caller_holding_every_slot_with_slow_reads_never_starves_another_caller(stack: Stack) -> None:
    """Caller A fills --max-in-flight with reads the downstream answers slowly; caller B (another actor) can still
    ask where its action stands and propose a write, while A's own next slow call is shed."""
    sidecar = stack.start_sidecar(flags=["--max-in-flight", "4"])
    bee = {"actor_id": "bee", "subject_id": "bee"}
    flooder = {"actor_id": "flooder", "subject_id": "flooder"}
    try:
        stub = stack.stub(sidecar.info["grpc"])
        mine = stack.card(stub, request_id=uuid.uuid4().hex, title="B 的待办", **bee)
        before = len([e for e in stack.todo.requests(path="/todos") if e["method"] == "GET"])
        stack.todo.fault(path="/todos", method="GET", mode="hang_before_commit", seconds=4.0, times=100)
        slow = _flood_slow_reads(stub, 4, **flooder)
        _wait_for_reads(stack, before + 4)  # A holds every slot, each waiting on the downstream
        with pytest.raises(grpc.RpcError) as shed:
            _flood_slow_reads(stub, 1, **flooder)[0].result()
        assert error_info(shed.value).reason == "OVERLOADED", "A's own next slow call is shed"
        status = stub.GetAction(
            gateway_pb2.GetActionRequest(context=ctx(**bee), action_id=mine.action_id), timeout=5
        ).action
        assert status.state == common_pb2.ACTION_STATE_READY
        reject = stub.Reject(gateway_pb2.RejectRequest(context=ctx(**bee), token=mine.token), timeout=5).action
        assert reject.state == common_pb2.ACTION_STATE_REJECTED
        card = stack.card(stub, request_id=uuid.uuid4().hex, title="B 的第二个", **bee)
        assert card.action_id and not any(f.done() for f in slow), "B was served while A's reads still held on"
        for f in slow:
            assert f.result().result.tool_name == "list_todos"
    finally:
        stack.todo.clear_faults()
        sidecar.stop()
