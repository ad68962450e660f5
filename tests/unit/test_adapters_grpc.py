"""The gRPC adapter against a real ToolBackendService (the HTTP adapter's rules, where gRPC has them).

An OK that lacks a declared receipt field, carries a result_json that is not JSON, or is larger than the
cap is UNKNOWN RECEIPT_INVALID for a write, never SUCCEEDED with empty fields; an APPLIED lookup like it
is no verdict. The prepared version travels as metadata ``if-match``; ABORTED answers it as a version
conflict. A tool's own timeout_ms bounds the whole call, the wait for the connection included.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from countersign import registry
from countersign.adapters.base import MAX_ANSWER_BYTES, CallMeta, Kind, LookupKind, PrepareUnavailable
from countersign.adapters.grpc import GrpcAdapter
from countersign.registry import Tool
from countersign.v1 import backend_pb2, backend_pb2_grpc

KEY = "b" * 32


@dataclass
class Backend(backend_pb2_grpc.ToolBackendServiceServicer):
    """Answers as the test says; records the metadata of every call."""

    execute: Callable[[], Any] = lambda: backend_pb2.ExecuteResponse(
        resource_id="r_1", resource_version="1", result_json="{}"
    )
    lookup: Callable[[], Any] = lambda: backend_pb2.LookupResponse(result=backend_pb2.LOOKUP_RESULT_ABSENT_UNFENCED)
    prepare: Callable[[], Any] = lambda: backend_pb2.PrepareResponse(arguments_json="{}")
    pause: float = 0.0
    metadata: list[dict[str, str]] = field(default_factory=list)

    async def _answer(self, context: Any, make: Callable[[], Any]) -> Any:
        self.metadata.append({k: v for k, v in context.invocation_metadata() or () if isinstance(v, str)})
        await asyncio.sleep(self.pause)
        got = make()
        if isinstance(got, status_pb2.Status):
            await context.abort_with_status(rpc_status.to_status(got))
        return got

    async def Execute(self, request: Any, context: Any) -> Any:
        return await self._answer(context, self.execute)

    async def Lookup(self, request: Any, context: Any) -> Any:
        return await self._answer(context, self.lookup)

    async def Prepare(self, request: Any, context: Any) -> Any:
        return await self._answer(context, self.prepare)


@pytest.fixture
async def backend() -> AsyncIterator[tuple[Backend, str]]:
    servicer = Backend()
    server = grpc.aio.server(options=[("grpc.max_send_message_length", 8 * MAX_ANSWER_BYTES)])
    backend_pb2_grpc.add_ToolBackendServiceServicer_to_server(servicer, server)  # type: ignore[no-untyped-call]
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    yield servicer, f"127.0.0.1:{port}"
    await server.stop(0)


@pytest.fixture
async def adapter() -> AsyncIterator[GrpcAdapter]:
    a = GrpcAdapter()
    yield a
    await a.close()


def tool(target: str, *, is_write: bool = True, timeout_ms: int = 0) -> Tool:
    adapter = {"kind": "grpc", "target": target, "prepare": True, "lookup": True, "timeout_ms": timeout_ms}
    spec: dict[str, Any] = {
        "name": "make",
        "is_write": is_write,
        "roles": ["user"],
        "adapter": adapter,
        "schema": {"type": "object", "additionalProperties": False, "properties": {}},
    }
    if is_write:
        spec |= {"capability": "make", "receipt": {"resource_id": "id", "resource_version": "version"}}
    caps = [{"id": "make", "status": "enabled", "tool": "make", "risk": "low"}] if is_write else []
    return registry.build({"policy_version": "g.1", "capabilities": caps, "tools": [spec]}).tools["make"]


def status(code: grpc.StatusCode, reason: str = "") -> status_pb2.Status:
    out = status_pb2.Status(code=code.value[0], message="refused")
    if reason:
        detail = any_pb2.Any()
        detail.Pack(error_details_pb2.ErrorInfo(reason=reason, domain="test"))
        out.details.append(detail)
    return out


UNUSABLE: dict[str, Callable[[], Any]] = {
    "no resource_id": lambda: backend_pb2.ExecuteResponse(resource_version="1", result_json="{}"),
    "no resource_version": lambda: backend_pb2.ExecuteResponse(resource_id="r_1", result_json="{}"),
    "result_json not JSON": lambda: backend_pb2.ExecuteResponse(
        resource_id="r_1", resource_version="1", result_json="<ok/>"
    ),
    "oversize": lambda: backend_pb2.ExecuteResponse(
        resource_id="r_1", resource_version="1", result_json='"' + "x" * (2 * MAX_ANSWER_BYTES) + '"'
    ),
}


@pytest.mark.parametrize("how", list(UNUSABLE))
async def test_an_unusable_ok_to_a_write_is_unknown_receipt_invalid(
    backend: tuple[Backend, str], adapter: GrpcAdapter, how: str
) -> None:
    servicer, target = backend
    servicer.execute = UNUSABLE[how]
    outcome = await adapter.execute(tool(target), {}, CallMeta(idempotency_key=KEY), 2.0)
    assert (outcome.kind, outcome.reason) == (Kind.UNKNOWN, "RECEIPT_INVALID"), outcome
    assert outcome.resource_id == ""


async def test_a_read_needs_no_receipt_but_readable_json(backend: tuple[Backend, str], adapter: GrpcAdapter) -> None:
    servicer, target = backend
    servicer.execute = lambda: backend_pb2.ExecuteResponse(result_json='{"items": []}')
    assert (await adapter.execute(tool(target, is_write=False), {}, CallMeta(), 2.0)).kind is Kind.SUCCEEDED
    servicer.execute = UNUSABLE["result_json not JSON"]
    outcome = await adapter.execute(tool(target, is_write=False), {}, CallMeta(), 2.0)
    assert (outcome.kind, outcome.reason) == (Kind.FAILED, "DOWNSTREAM_ANSWER_INVALID")


async def test_an_applied_lookup_without_the_receipt_fields_is_no_verdict(
    backend: tuple[Backend, str], adapter: GrpcAdapter
) -> None:
    servicer, target = backend
    servicer.lookup = lambda: backend_pb2.LookupResponse(result=backend_pb2.LOOKUP_RESULT_APPLIED, result_json="{}")
    found = await adapter.lookup(tool(target), CallMeta(idempotency_key=KEY), False, 2.0)
    assert found.kind is LookupKind.UNREADABLE, found
    servicer.lookup = lambda: backend_pb2.LookupResponse(
        result=backend_pb2.LOOKUP_RESULT_APPLIED, resource_id="r_2", resource_version="3", result_json="{}"
    )
    found = await adapter.lookup(tool(target), CallMeta(idempotency_key=KEY), False, 2.0)
    assert found.kind is LookupKind.APPLIED and found.outcome is not None
    assert (found.outcome.resource_id, found.outcome.resource_version) == ("r_2", "3")


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (status(grpc.StatusCode.ABORTED), "RESOURCE_VERSION_CONFLICT"),
        (status(grpc.StatusCode.ABORTED, "RESOURCE_VERSION_CONFLICT"), "RESOURCE_VERSION_CONFLICT"),
        (status(grpc.StatusCode.FAILED_PRECONDITION, "RESOURCE_VERSION_CONFLICT"), "RESOURCE_VERSION_CONFLICT"),
        (status(grpc.StatusCode.FAILED_PRECONDITION), "FAILED_PRECONDITION"),
    ],
)
async def test_the_version_travels_as_if_match_and_aborted_is_a_conflict(
    backend: tuple[Backend, str], adapter: GrpcAdapter, answer: status_pb2.Status, reason: str
) -> None:
    servicer, target = backend
    servicer.execute = lambda: answer
    outcome = await adapter.execute(tool(target), {}, CallMeta(idempotency_key=KEY, if_match="7"), 2.0)
    assert (outcome.kind, outcome.reason, outcome.retryable) == (Kind.FAILED, reason, False)
    assert [(m["idempotency-key"], m["if-match"]) for m in servicer.metadata] == [(KEY, "7")]


async def test_a_version_that_cannot_be_sent_is_never_sent(backend: tuple[Backend, str], adapter: GrpcAdapter) -> None:
    servicer, target = backend
    outcome = await adapter.execute(tool(target), {}, CallMeta(idempotency_key=KEY, if_match="a\nb"), 2.0)
    assert (outcome.kind, outcome.reason) == (Kind.FAILED, "RESOURCE_VERSION_INVALID")
    assert servicer.metadata == []


async def test_the_tools_own_timeout_bounds_the_call(backend: tuple[Backend, str], adapter: GrpcAdapter) -> None:
    servicer, target = backend
    servicer.pause = 2.0
    outcome = await adapter.execute(tool(target, timeout_ms=300), {}, CallMeta(idempotency_key=KEY), 10.0)
    assert (outcome.kind, outcome.reason) == (Kind.UNKNOWN, "DOWNSTREAM_DEADLINE_EXCEEDED"), outcome


async def test_prepared_arguments_that_are_not_an_object_issue_no_card(
    backend: tuple[Backend, str], adapter: GrpcAdapter
) -> None:
    servicer, target = backend
    for text in ("[1, 2]", '"x"', "[" * 100_000):
        servicer.prepare = lambda text=text: backend_pb2.PrepareResponse(arguments_json=text)
        with pytest.raises(PrepareUnavailable):
            await adapter.prepare(tool(target), {}, CallMeta(), 2.0)
