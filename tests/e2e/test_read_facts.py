"""A continuation never misses a read fact of its turn, whichever replica ran the read (issue 17, the read Invoke).

The read's answer waits for its fact to be acknowledged by Redis (one round trip, the only one on a read's way);
a continuation claimed on another sidecar on the same Redis right after the answer sees it. Any change that takes
the fact off the caller's wait must keep this passing (notes/lean-cpu.md says how it could, and what it cost).
Real redis-server, real gRPC, the real todo service.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import grpc
import pytest

from countersign.testing.calls import ctx
from countersign.testing.stack import Stack
from countersign.v1 import common_pb2, continuation_pb2, continuation_pb2_grpc, gateway_pb2

C = continuation_pb2
SNAPSHOT = C.ContinuationSnapshot(question="帮我建一个待办", locale="zh-CN", lead_in="好的，")


@pytest.fixture(scope="module")
def other(stack: Stack) -> Iterator[str]:
    """A second sidecar on the same Redis (another replica of the same pod's service)."""
    proc = stack.start_sidecar()
    try:
        yield str(proc.info["grpc"])
    finally:
        proc.stop()


def conts(address: str) -> continuation_pb2_grpc.ContinuationServiceStub:
    return continuation_pb2_grpc.ContinuationServiceStub(grpc.insecure_channel(address))  # type: ignore[no-untyped-call]


def read(stack: Stack, rid: str, address: str | None = None) -> gateway_pb2.InvokeResponse:
    return stack.stub(address).Invoke(
        gateway_pb2.InvokeRequest(context=ctx(request_id=rid), tool_name="list_todos", arguments_json="{}")
    )


def claimed_after_a_write(stack: Stack, rid: str, address: str) -> C.Continuation:
    """A card in the turn, its continuation opened on `address`, the card confirmed, the continuation claimed there."""
    card = stack.card(request_id=rid, title="事实")
    stub = conts(address)
    cont = stub.OpenContinuation(
        C.OpenContinuationRequest(context=ctx(request_id=rid), action_id=card.action_id, snapshot=SNAPSHOT)
    ).continuation
    action = stack.stub().Confirm(gateway_pb2.ConfirmRequest(context=ctx(), token=card.token)).action
    assert action.state == common_pb2.ACTION_STATE_SUCCEEDED
    got = stub.ClaimContinuation(C.ClaimContinuationRequest(context=ctx(request_id=rid), token=cont.token))
    assert got.continuation.state == C.CONTINUATION_STATE_RUNNING
    return got.continuation


def test_a_continuation_claimed_on_another_replica_right_after_the_read_has_its_fact(stack: Stack, other: str) -> None:
    for _ in range(5):
        rid = uuid.uuid4().hex
        assert read(stack, rid).WhichOneof("outcome") == "result"
        got = claimed_after_a_write(stack, rid, other)
        assert [(f.tool_name, f.status) for f in got.facts] == [("list_todos", "succeeded")]
