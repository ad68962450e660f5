"""The gRPC adapter: a downstream that implements countersign.v1.ToolBackendService.

A call is NOT_SENT only when the channel could not connect before the call started; once the
call is on the wire, UNAVAILABLE, DEADLINE_EXCEEDED and the like are UNKNOWN. The same answer rules
as over HTTP (docs/design.md §8): an OK that lacks a declared receipt field, or whose result_json is not JSON,
or that is larger than the cap (MAX_ANSWER_BYTES, or less), is UNKNOWN RECEIPT_INVALID for a write; the prepared version
travels as metadata ``if-match`` and ABORTED (or any refusal whose ErrorInfo reason is
RESOURCE_VERSION_CONFLICT) answers it as a version conflict. The connection wait counts against the
tool's deadline, so one call never outlives it.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from typing import Any

import grpc
from grpc_status import rpc_status

from countersign.adapters.base import (
    MAX_ANSWER_BYTES,
    UPPER_SNAKE,
    CallMeta,
    Kind,
    Lookup,
    LookupKind,
    NotSendable,
    Outcome,
    Prepared,
    PrepareRefused,
    PrepareUnavailable,
    deadline,
)
from countersign.canonical import not_json
from countersign.reasons import Reason
from countersign.registry import Tool
from countersign.v1 import backend_pb2, backend_pb2_grpc

# Answers that mean "the downstream looked at it and said no": nothing was applied.
REFUSALS = frozenset(
    {
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.ALREADY_EXISTS,
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.UNAUTHENTICATED,
        grpc.StatusCode.ABORTED,
        grpc.StatusCode.OUT_OF_RANGE,
        grpc.StatusCode.UNIMPLEMENTED,
    }
)


class GrpcAdapter:
    """One channel per downstream target."""

    def __init__(
        self, *, max_answer_bytes: int = MAX_ANSWER_BYTES, credentials: grpc.ChannelCredentials | None = None
    ) -> None:
        self.max_answer_bytes = max_answer_bytes
        # tools with tls: true: this CA bundle and client certificate (--downstream-ca, --downstream-cert)
        self.credentials = credentials or grpc.ssl_channel_credentials()
        self._channels: dict[tuple[str, bool], grpc.aio.Channel] = {}

    def _stub(self, tool: Tool) -> tuple[grpc.aio.Channel, backend_pb2_grpc.ToolBackendServiceStub]:
        target, tls = tool.adapter.target, tool.adapter.tls
        channel = self._channels.get((target, tls))
        if channel is None:
            # an answer over the cap fails on receipt (RESOURCE_EXHAUSTED), as an oversize HTTP answer does
            options = [("grpc.max_receive_message_length", self.max_answer_bytes)]
            channel = (
                grpc.aio.secure_channel(target, self.credentials, options=options)
                if tls
                else grpc.aio.insecure_channel(target, options=options)
            )
            self._channels[(target, tls)] = channel
        return channel, backend_pb2_grpc.ToolBackendServiceStub(channel)  # type: ignore[no-untyped-call]

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close(None)

    @staticmethod
    def _metadata(meta: CallMeta) -> tuple[tuple[str, str | bytes], ...]:
        """The HTTP headers as metadata; the key and the version bare (no structured-field quotes). A value gRPC
        may not carry as text (anything beyond printable ASCII: an actor id "张三") travels as its UTF-8 bytes
        under the key's ``-bin`` form, gRPC's way for such values; grpc refuses the call otherwise, after the
        claim (an INTERNAL to the caller and a write that never settles). The same ids are in the request's
        BackendContext."""
        out: list[tuple[str, str | bytes]] = []
        for k, v in meta.wire_headers().items():
            key, value = k.lower(), v.strip('"') if k in ("Idempotency-Key", "If-Match") else v
            if value.isascii() and value.isprintable():
                out.append((key, value))
            else:
                out.append((key + "-bin", value.encode("utf-8", "surrogatepass")))
        return tuple(out)

    @staticmethod
    def _context(meta: CallMeta) -> backend_pb2.BackendContext:
        return backend_pb2.BackendContext(
            tenant_id=meta.tenant_id, actor_id=meta.actor_id, subject_id=meta.subject_id, locale=meta.locale
        )

    async def _connected(self, channel: grpc.aio.Channel, timeout: float) -> bool:
        try:
            await asyncio.wait_for(channel.channel_ready(), timeout)
            return True
        except (TimeoutError, grpc.aio.AioRpcError):
            return False

    async def prepare(self, tool: Tool, arguments: Mapping[str, Any], meta: CallMeta, timeout: float) -> Prepared:
        if not tool.adapter.grpc_prepare:
            return Prepared(dict(arguments))
        _, stub = self._stub(tool)
        request = backend_pb2.PrepareRequest(
            tool_name=tool.name, arguments_json=json.dumps(arguments), context=self._context(meta)
        )
        try:
            answer = await stub.Prepare(request, timeout=deadline(tool, timeout), metadata=self._metadata(meta))
        except grpc.aio.AioRpcError as exc:
            if exc.code() in REFUSALS:
                raise PrepareRefused(*_reason(exc)) from exc
            raise PrepareUnavailable(
                f"prepare for {tool.name!r} at {tool.adapter.target} failed: {exc.code().name}"
            ) from exc
        try:
            args = json.loads(answer.arguments_json, parse_constant=not_json)
        except (ValueError, RecursionError) as exc:
            raise PrepareUnavailable(
                f"prepare for {tool.name!r} at {tool.adapter.target} answered invalid JSON"
            ) from exc
        if not isinstance(args, dict):
            raise PrepareUnavailable(
                f"prepare for {tool.name!r} at {tool.adapter.target} answered arguments that are not an object"
            )
        preview = None
        if answer.HasField("preview"):
            preview = {"title": answer.preview.title, "target": answer.preview.target, "impact": answer.preview.impact}
        return Prepared(args, answer.resource_version, preview)

    async def execute(self, tool: Tool, arguments: Mapping[str, Any], meta: CallMeta, timeout: float) -> Outcome:
        until = time.monotonic() + deadline(tool, timeout)
        try:
            metadata = self._metadata(meta)
        except NotSendable as exc:
            return Outcome(Kind.FAILED, exc.reason, exc.message)
        channel, stub = self._stub(tool)
        if not await self._connected(channel, min(until - time.monotonic(), 2.0)):
            return Outcome(Kind.FAILED, Reason.NOT_SENT, f"could not connect to {tool.adapter.target}", retryable=True)
        request = backend_pb2.ExecuteRequest(
            tool_name=tool.name, arguments_json=json.dumps(arguments), context=self._context(meta)
        )
        try:
            answer = await stub.Execute(request, timeout=max(until - time.monotonic(), 0.001), metadata=metadata)
        except grpc.aio.AioRpcError as exc:
            reason, message = _reason(exc)
            if _oversize(exc):
                return _unusable(tool, f"the answer is larger than {self.max_answer_bytes} bytes", "OK")
            if exc.code() == grpc.StatusCode.ABORTED and meta.if_match and reason == "ABORTED":
                reason = Reason.RESOURCE_VERSION_CONFLICT  # ABORTED to an if-match: the version moved on
            if exc.code() in REFUSALS:
                return Outcome(Kind.FAILED, reason, message, status=exc.code().name)
            return Outcome(Kind.UNKNOWN, f"DOWNSTREAM_{exc.code().name}", message, status=exc.code().name)
        return _applied(tool, answer.resource_id, answer.resource_version, answer.result_json)

    async def lookup(self, tool: Tool, meta: CallMeta, fence: bool, timeout: float) -> Lookup:
        if not tool.adapter.grpc_lookup:
            return Lookup(LookupKind.UNREACHABLE, message="no lookup declared")
        _, stub = self._stub(tool)
        request = backend_pb2.LookupRequest(tool_name=tool.name, idempotency_key=meta.idempotency_key, fence=fence)
        try:
            answer = await stub.Lookup(request, timeout=timeout, metadata=self._metadata(meta))
        except grpc.aio.AioRpcError as exc:
            if _oversize(exc):
                return Lookup(LookupKind.UNREADABLE, message=f"the answer is larger than {self.max_answer_bytes} bytes")
            return Lookup(LookupKind.UNREACHABLE, message=exc.code().name)
        if answer.result == backend_pb2.LOOKUP_RESULT_APPLIED:
            outcome = _applied(tool, answer.resource_id, answer.resource_version, answer.result_json)
            if outcome.kind is not Kind.SUCCEEDED:
                return Lookup(LookupKind.UNREADABLE, message=f"{outcome.reason}: {outcome.message}")
            return Lookup(LookupKind.APPLIED, outcome)
        if answer.result == backend_pb2.LOOKUP_RESULT_ABSENT_FENCED:
            return Lookup(LookupKind.ABSENT_FENCED)
        return Lookup(LookupKind.ABSENT_UNFENCED)


def _applied(tool: Tool, resource_id: str, version: str, result_json: str) -> Outcome:
    """An OK answer: SUCCEEDED when it carries every receipt field the tool declares and readable JSON."""
    try:
        body = json.loads(result_json, parse_constant=not_json) if result_json else None
    except (ValueError, RecursionError):
        return _unusable(tool, "its result_json is not JSON", "OK")
    for name, value in (("resource_id", resource_id), ("resource_version", version)):
        if tool.is_write and name in tool.receipt.declared and not value:
            return _unusable(tool, f"the answer lacks the receipt field {name!r}", "OK")
    return Outcome(Kind.SUCCEEDED, status="OK", body=body, resource_id=resource_id, resource_version=version)


def _unusable(tool: Tool, problem: str, status: str) -> Outcome:
    if tool.is_write:
        return Outcome(
            Kind.UNKNOWN,
            Reason.RECEIPT_INVALID,
            f"the downstream answered {status} but {problem}; the "
            "write may have been applied: reconciliation will ask by idempotency key",
            status=status,
        )
    return Outcome(
        Kind.FAILED, Reason.DOWNSTREAM_ANSWER_INVALID, f"the downstream answered {status} but {problem}", status=status
    )


def _oversize(exc: grpc.aio.AioRpcError) -> bool:
    """This client refused an answer over its receive limit (the call itself may have been applied)."""
    return exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "larger than max" in (exc.details() or "")


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
