"""The gRPC adapter: a downstream that implements countersign.v1.ToolBackendService.

A call is NOT_SENT only when the channel could not connect before the call started; once the
call is on the wire, UNAVAILABLE, DEADLINE_EXCEEDED and the like are UNKNOWN.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any

import grpc
from grpc_status import rpc_status

from countersign.adapters.base import (
    UPPER_SNAKE,
    CallMeta,
    Kind,
    Lookup,
    LookupKind,
    Outcome,
    Prepared,
    PrepareRefused,
    PrepareUnavailable,
)
from countersign.sidecar.registry import Tool
from countersign.v1 import backend_pb2, backend_pb2_grpc

# Answers that mean "the downstream looked at it and said no": nothing was applied.
REFUSALS = frozenset({
    grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.ALREADY_EXISTS,
    grpc.StatusCode.NOT_FOUND, grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED,
    grpc.StatusCode.ABORTED, grpc.StatusCode.OUT_OF_RANGE, grpc.StatusCode.UNIMPLEMENTED,
})


class GrpcAdapter:
    """One channel per downstream target."""

    def __init__(self) -> None:
        self._channels: dict[str, grpc.aio.Channel] = {}

    def _stub(self, target: str) -> tuple[grpc.aio.Channel, backend_pb2_grpc.ToolBackendServiceStub]:
        channel = self._channels.get(target)
        if channel is None:
            channel = grpc.aio.insecure_channel(target)
            self._channels[target] = channel
        return channel, backend_pb2_grpc.ToolBackendServiceStub(channel)  # type: ignore[no-untyped-call]

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close(None)

    @staticmethod
    def _metadata(meta: CallMeta) -> tuple[tuple[str, str], ...]:
        return tuple((k.lower(), v.strip('"') if k == "Idempotency-Key" else v)
                     for k, v in meta.wire_headers().items())

    @staticmethod
    def _context(meta: CallMeta) -> backend_pb2.BackendContext:
        return backend_pb2.BackendContext(tenant_id=meta.tenant_id, actor_id=meta.actor_id,
                                          subject_id=meta.subject_id, locale=meta.locale)

    async def _connected(self, channel: grpc.aio.Channel, timeout: float) -> bool:
        try:
            await asyncio.wait_for(channel.channel_ready(), timeout)
            return True
        except (TimeoutError, grpc.aio.AioRpcError):
            return False

    async def prepare(
        self, tool: Tool, arguments: Mapping[str, Any], meta: CallMeta, timeout: float
    ) -> Prepared:
        if not tool.adapter.grpc_prepare:
            return Prepared(dict(arguments))
        _, stub = self._stub(tool.adapter.target)
        request = backend_pb2.PrepareRequest(tool_name=tool.name, arguments_json=json.dumps(arguments),
                                             context=self._context(meta))
        try:
            answer = await stub.Prepare(request, timeout=timeout, metadata=self._metadata(meta))
        except grpc.aio.AioRpcError as exc:
            if exc.code() in REFUSALS:
                raise PrepareRefused(*_reason(exc)) from exc
            raise PrepareUnavailable(f"prepare for {tool.name!r} at {tool.adapter.target} failed: "
                                     f"{exc.code().name}") from exc
        try:
            args = json.loads(answer.arguments_json)
        except ValueError as exc:
            raise PrepareUnavailable(f"prepare for {tool.name!r} at {tool.adapter.target} answered invalid "
                                     "JSON") from exc
        preview = None
        if answer.HasField("preview"):
            preview = {"title": answer.preview.title, "target": answer.preview.target,
                       "impact": answer.preview.impact}
        return Prepared(args if isinstance(args, dict) else {}, answer.resource_version, preview)

    async def execute(
        self, tool: Tool, arguments: Mapping[str, Any], meta: CallMeta, timeout: float
    ) -> Outcome:
        channel, stub = self._stub(tool.adapter.target)
        if not await self._connected(channel, min(timeout, 2.0)):
            return Outcome(Kind.FAILED, "NOT_SENT", f"could not connect to {tool.adapter.target}",
                           retryable=True)
        request = backend_pb2.ExecuteRequest(tool_name=tool.name, arguments_json=json.dumps(arguments),
                                             context=self._context(meta))
        try:
            answer = await stub.Execute(request, timeout=timeout, metadata=self._metadata(meta))
        except grpc.aio.AioRpcError as exc:
            reason, message = _reason(exc)
            if exc.code() in REFUSALS:
                return Outcome(Kind.FAILED, reason, message, status=exc.code().name)
            return Outcome(Kind.UNKNOWN, f"DOWNSTREAM_{exc.code().name}", message, status=exc.code().name)
        return _applied(answer.resource_id, answer.resource_version, answer.result_json)

    async def lookup(self, tool: Tool, meta: CallMeta, fence: bool, timeout: float) -> Lookup:
        if not tool.adapter.grpc_lookup:
            return Lookup(LookupKind.UNREACHABLE, message="no lookup declared")
        _, stub = self._stub(tool.adapter.target)
        request = backend_pb2.LookupRequest(tool_name=tool.name, idempotency_key=meta.idempotency_key,
                                            fence=fence)
        try:
            answer = await stub.Lookup(request, timeout=timeout, metadata=self._metadata(meta))
        except grpc.aio.AioRpcError as exc:
            return Lookup(LookupKind.UNREACHABLE, message=exc.code().name)
        if answer.result == backend_pb2.LOOKUP_RESULT_APPLIED:
            return Lookup(LookupKind.APPLIED, _applied(answer.resource_id, answer.resource_version,
                                                       answer.result_json))
        if answer.result == backend_pb2.LOOKUP_RESULT_ABSENT_FENCED:
            return Lookup(LookupKind.ABSENT_FENCED)
        return Lookup(LookupKind.ABSENT_UNFENCED)


def _applied(resource_id: str, version: str, result_json: str) -> Outcome:
    try:
        body = json.loads(result_json) if result_json else None
    except ValueError:
        body = {"text": result_json[:200]}
    return Outcome(Kind.SUCCEEDED, status="OK", body=body, resource_id=resource_id, resource_version=version)


def _reason(exc: grpc.aio.AioRpcError) -> tuple[str, str]:
    """The downstream's ErrorInfo reason when it sent one, else the status code's name."""
    reason = exc.code().name
    try:
        status = rpc_status.from_call(exc)  # type: ignore[arg-type]
    except Exception:  # a malformed status detail must not turn a refusal into a crash
        status = None
    if status is not None:
        from google.rpc import error_details_pb2

        for detail in status.details:
            info = error_details_pb2.ErrorInfo()
            if detail.Unpack(info) and UPPER_SNAKE.match(info.reason):
                reason = info.reason
                break
    return reason, (exc.details() or "")[:500]
