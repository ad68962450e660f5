"""countersign.v1.ToolBackendService for grpc.aio over the same :class:`TodoStore` as the HTTP app.

Tools: create_todo, set_todo_status, delete_todo. The idempotency key comes from metadata
``idempotency-key`` (Lookup: ``request.idempotency_key``, falling back to the metadata), the owner from
``x-countersign-subject`` (falling back to ``context.subject_id``), the expected version from ``if-match``
(a stale one is ABORTED, reason RESOURCE_VERSION_CONFLICT). A refusal is a gRPC status whose
message is ``"REASON: message"`` with a ``google.rpc.ErrorInfo(reason, domain="todo.example")`` detail.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any, NoReturn, TypeVar, cast

import grpc
import grpc.aio
from google.protobuf import any_pb2, json_format
from google.protobuf.message import Message
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from countersign.v1 import backend_pb2, backend_pb2_grpc

from .app import ServiceControls, recorded_headers
from .store import DEFAULT_OWNER, Answer, KeyState, TodoStore, refusal

ERROR_DOMAIN = "todo.example"
SERVICE_NAME = "countersign.v1.ToolBackendService"

_T = TypeVar("_T")
Context = grpc.aio.ServicerContext[Any, Any]


_CODE_BY_REASON = {
    "TODO_NOT_FOUND": grpc.StatusCode.NOT_FOUND,
    "TODO_VERSION_CONFLICT": grpc.StatusCode.FAILED_PRECONDITION,
    "RESOURCE_VERSION_CONFLICT": grpc.StatusCode.ABORTED,  # if-match did not hold (as AIP-154 has it)
    "KEY_FENCED": grpc.StatusCode.FAILED_PRECONDITION,
    "TODO_NOT_COMPENSABLE": grpc.StatusCode.FAILED_PRECONDITION,
}


def grpc_code_for(answer: Answer) -> grpc.StatusCode:
    """The gRPC code for a refused :class:`Answer`: by reason, else by its HTTP status."""
    by_reason = _CODE_BY_REASON.get(answer.reason)
    if by_reason is not None:
        return by_reason
    status = answer.status
    if status in (400, 422):
        return grpc.StatusCode.INVALID_ARGUMENT
    if status == 404:
        return grpc.StatusCode.NOT_FOUND
    if status in (409, 410, 412):
        return grpc.StatusCode.FAILED_PRECONDITION
    if status == 429:
        return grpc.StatusCode.RESOURCE_EXHAUSTED
    if status in (502, 503, 504):
        return grpc.StatusCode.UNAVAILABLE
    return grpc.StatusCode.INTERNAL


async def abort_with_reason(context: Context, code: grpc.StatusCode, reason: str, message: str) -> NoReturn:
    """Abort the call with ``"REASON: message"`` and a google.rpc.ErrorInfo detail."""
    detail = any_pb2.Any()
    detail.Pack(error_details_pb2.ErrorInfo(reason=reason, domain=ERROR_DOMAIN))
    status = status_pb2.Status(code=code.value[0], message=f"{reason}: {message}", details=[detail])
    # abort_with_status is missing from grpc-stubs' aio ServicerContext.
    await cast(Any, context).abort_with_status(rpc_status.to_status(status))
    raise AssertionError("abort_with_status returned")  # pragma: no cover


async def _refuse(context: Context, answer: Answer) -> NoReturn:
    await abort_with_reason(context, grpc_code_for(answer), answer.reason or "REFUSED", answer.message)


def _metadata(context: Context) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in context.invocation_metadata() or ():
        key, value = item[0], item[1]
        if isinstance(value, str):
            out[key.lower()] = value
    return out


def _subject(metadata: dict[str, str], ctx: backend_pb2.BackendContext) -> str:
    return metadata.get("x-countersign-subject") or ctx.subject_id or DEFAULT_OWNER


class TodoBackend(backend_pb2_grpc.ToolBackendServiceServicer):
    """grpc.aio servicer; register with ``add_backend_to_server(server, backend)``."""

    def __init__(self, store: TodoStore, controls: ServiceControls | None = None) -> None:
        self.store = store
        self.controls = controls if controls is not None else ServiceControls()

    async def _guarded(self, method: str, request: Message, context: Context, work: Callable[[], Awaitable[_T]]) -> _T:
        """Record the call in the shared log and apply any fault matching ("GRPC", full method path)."""
        path = f"/{SERVICE_NAME}/{method}"
        metadata = _metadata(context)
        body = json_format.MessageToDict(request, preserving_proto_field_name=True)
        self.controls.log.record(
            "GRPC", path, metadata.get("idempotency-key"), recorded_headers(metadata.items()), body
        )
        fault = self.controls.faults.take("GRPC", path)
        if fault is not None and fault.mode == "status":
            injected = refusal(fault.status, "INJECTED", f"injected status {fault.status}")
            await _refuse(context, injected)
        if fault is not None and fault.mode == "hang_before_commit":
            await asyncio.sleep(fault.seconds)
        result = await work()
        if fault is not None and fault.mode == "hang_after_commit":
            await asyncio.sleep(fault.seconds)
        return result

    @staticmethod
    async def _arguments(context: Context, arguments_json: str) -> dict[str, Any]:
        try:
            arguments = json.loads(arguments_json) if arguments_json.strip() else {}
        except ValueError:
            await abort_with_reason(context, grpc.StatusCode.INVALID_ARGUMENT, "BAD_JSON", "arguments_json is not JSON")
        if not isinstance(arguments, dict):
            await abort_with_reason(
                context, grpc.StatusCode.INVALID_ARGUMENT, "TODO_INVALID", "arguments must be an object"
            )
        return arguments

    async def Prepare(self, request: backend_pb2.PrepareRequest, context: Context) -> backend_pb2.PrepareResponse:
        async def work() -> backend_pb2.PrepareResponse:
            arguments = await self._arguments(context, request.arguments_json)
            answer = self.store.prepare(request.tool_name, arguments, request.context.locale)
            if not answer.ok:
                await _refuse(context, answer)
            data = answer.json()
            response = backend_pb2.PrepareResponse(
                arguments_json=json.dumps(data["arguments"], ensure_ascii=False),
                resource_version=str(data.get("resource_version", "")),
            )
            preview = data.get("preview")
            if isinstance(preview, dict):
                response.preview.CopyFrom(backend_pb2.BackendPreview(**preview))
            return response

        return await self._guarded("Prepare", request, context, work)

    async def Execute(self, request: backend_pb2.ExecuteRequest, context: Context) -> backend_pb2.ExecuteResponse:
        async def work() -> backend_pb2.ExecuteResponse:
            metadata = _metadata(context)
            key = metadata.get("idempotency-key")
            if not key:
                await abort_with_reason(
                    context,
                    grpc.StatusCode.INVALID_ARGUMENT,
                    "IDEMPOTENCY_KEY_MISSING",
                    "metadata idempotency-key",
                )
            arguments = await self._arguments(context, request.arguments_json)
            owner = _subject(metadata, request.context)
            answer = self.store.execute(request.tool_name, key, owner, arguments, metadata.get("if-match"))
            if not answer.ok:
                await _refuse(context, answer)
            data = answer.json()
            return backend_pb2.ExecuteResponse(
                resource_id=str(data.get("id", "")),
                resource_version=str(data.get("version", "")),
                result_json=answer.body,
            )

        return await self._guarded("Execute", request, context, work)

    async def Lookup(self, request: backend_pb2.LookupRequest, context: Context) -> backend_pb2.LookupResponse:
        async def work() -> backend_pb2.LookupResponse:
            key = request.idempotency_key or _metadata(context).get("idempotency-key")
            if not key:
                await abort_with_reason(
                    context, grpc.StatusCode.INVALID_ARGUMENT, "IDEMPOTENCY_KEY_MISSING", "idempotency_key"
                )
            record = self.store.fence_key(key) if request.fence else self.store.lookup_key(key)
            if record.state is KeyState.ABSENT:
                return backend_pb2.LookupResponse(result=backend_pb2.LOOKUP_RESULT_ABSENT_UNFENCED)
            if record.state is KeyState.FENCED:
                return backend_pb2.LookupResponse(result=backend_pb2.LOOKUP_RESULT_ABSENT_FENCED)
            answer = record.answer
            assert answer is not None
            if not answer.ok:
                # The key was spent on a refused write: nothing was applied and nothing ever will be.
                return backend_pb2.LookupResponse(
                    result=backend_pb2.LOOKUP_RESULT_ABSENT_FENCED, result_json=answer.body
                )
            data = answer.json()
            return backend_pb2.LookupResponse(
                result=backend_pb2.LOOKUP_RESULT_APPLIED,
                resource_id=str(data.get("id", "")),
                resource_version=str(data.get("version", "")),
                result_json=answer.body,
            )

        return await self._guarded("Lookup", request, context, work)

    async def Compensate(
        self, request: backend_pb2.ToolBackendServiceCompensateRequest, context: Context
    ) -> backend_pb2.ToolBackendServiceCompensateResponse:
        async def work() -> backend_pb2.ToolBackendServiceCompensateResponse:
            arguments = await self._arguments(context, request.arguments_json)
            answer = self.store.compensate(request.tool_name, request.resource_id, arguments)
            if not answer.ok:
                await _refuse(context, answer)
            return backend_pb2.ToolBackendServiceCompensateResponse(
                resource_id=request.resource_id, result_json=answer.body
            )

        return await self._guarded("Compensate", request, context, work)


def add_backend_to_server(server: grpc.aio.Server, backend: TodoBackend) -> None:
    register = cast(Callable[[Any, Any], None], backend_pb2_grpc.add_ToolBackendServiceServicer_to_server)
    register(backend, server)


async def start_grpc_server(
    store: TodoStore,
    controls: ServiceControls | None = None,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    credentials: grpc.ServerCredentials | None = None,
) -> tuple[grpc.aio.Server, int]:
    """Start a grpc.aio server with :class:`TodoBackend` (over TLS with ``credentials``); returns (server, port)."""
    server = grpc.aio.server()
    add_backend_to_server(server, TodoBackend(store, controls))
    address = f"{host}:{port}"
    bound = server.add_secure_port(address, credentials) if credentials else server.add_insecure_port(address)
    await server.start()
    return server, bound
