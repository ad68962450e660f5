"""gRPC servicers: decode the request, call the component app.py handed them, turn errors into rich statuses.

Decoding includes who is calling (identity.py): the client certificate's allow-list and, with
--verified-context, the CallContext taken from a verified context assertion. No business logic lives here.
Every error leaves as a gRPC status with a google.rpc.ErrorInfo (domain "countersign", a stable reason) and, for
argument problems, a google.rpc.BadRequest.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2_grpc
from grpc_reflection.v1alpha._async import ReflectionServicer
from grpc_status import rpc_status

from countersign.canonical import as_text
from countersign.errors import DOMAIN, CountersignError, InvalidArgument, ResourceExhausted, StoreUnavailable
from countersign.observability import tracing
from countersign.observability.metrics import Metrics
from countersign.path.grants import Grants
from countersign.path.pipeline import Pipeline
from countersign.reasons import Reason
from countersign.recovery.compensate import Compensator
from countersign.recovery.reconcile import Reconciler
from countersign.reply.check import ReplyCheck
from countersign.reply.continuations import Continuations
from countersign.sidecar.admission import Gate
from countersign.sidecar.identity import Identity
from countersign.v1 import (
    continuation_pb2,
    continuation_pb2_grpc,
    gateway_pb2,
    gateway_pb2_grpc,
    guard_pb2,
    guard_pb2_grpc,
)

log = logging.getLogger("countersign.server")
Ctx = Any  # grpc.aio.ServicerContext; the published stubs lag behind grpc.aio
R = TypeVar("R")
Handler = Callable[[Any, Any, Ctx], Awaitable[R]]

SERVICES = (
    gateway_pb2.DESCRIPTOR.services_by_name["ToolGatewayService"].full_name,
    continuation_pb2.DESCRIPTOR.services_by_name["ContinuationService"].full_name,
    guard_pb2.DESCRIPTOR.services_by_name["ReplyGuardService"].full_name,
)


# Calls that only read or write Redis, never a downstream: their own lane at the gate, so a caller's slow calls
# (Invoke, Confirm, Compensate, Reconcile wait on a downstream) never shed its status calls.
QUICK = frozenset(
    {
        "GetAction",
        "Reject",
        "OpenContinuation",
        "ClaimContinuation",
        "SettleContinuation",
        "ReleaseContinuation",
        "CheckReply",
        "ListGrants",
        "RevokeGrant",
    }
)


def rich_status(error: CountersignError) -> grpc.Status:
    """The status with its details, kept well under the trailer limits of every client (8 KiB)."""
    # as_text: a message may quote a downstream's words, with a lone surrogate from its JSON (no protobuf string)
    status = status_pb2.Status(code=error.code.value[0], message=as_text(error.message[:1000]))
    metadata = {as_text(k[:64]): as_text(v[:128]) for k, v in list(error.metadata.items())[:8]}
    info = any_pb2.Any()
    info.Pack(error_details_pb2.ErrorInfo(reason=error.reason, domain=DOMAIN, metadata=metadata))
    status.details.append(info)
    if error.retry_after:
        delay = duration_pb2.Duration()
        delay.FromNanoseconds(int(error.retry_after * 1e9))  # seconds and nanos < 1e9, as the type requires
        retry = any_pb2.Any()
        retry.Pack(error_details_pb2.RetryInfo(retry_delay=delay))
        status.details.append(retry)
    if error.violations:
        bad = error_details_pb2.BadRequest(
            field_violations=[
                error_details_pb2.BadRequest.FieldViolation(
                    field=as_text(v.field[:128]), description=as_text(v.description[:300])
                )
                for v in error.violations[:10]
            ]
        )
        detail = any_pb2.Any()
        detail.Pack(bad)
        status.details.append(detail)
    return rpc_status.to_status(status)


def _method(name: str) -> tracing.RpcMethod:
    """The contract's RPC of this name (a misspelled name fails at import, not at the first call)."""
    for module in (gateway_pb2, continuation_pb2, guard_pb2):
        for service in module.DESCRIPTOR.services_by_name.values():
            if name in service.methods_by_name:
                return tracing.RpcMethod(service.full_name, name)
    raise LookupError(f"no RPC named {name!r} in the contract")


def caller_of(request: Any, context: Ctx) -> tuple[str, str]:
    """Whom a call is for, for the gate's fair shares: tenant and actor of its CallContext, else its peer."""
    call = getattr(request, "context", None)
    if call is not None and call.tenant_id and call.actor_id:
        return call.tenant_id[:256], call.actor_id[:256]
    return "", str(context.peer())


def rpc(name: str) -> Callable[[Handler[R]], Handler[R]]:
    """The one place each RPC is observed: admission (fair shares per caller), its span, its duration by gRPC
    code, refusals counted, the error tree mapped to rich statuses, never a stack trace to the caller."""
    method = _method(name)
    attributes = method.attributes()
    quick = name in QUICK

    def wrap(handler: Handler[R]) -> Handler[R]:
        @functools.wraps(handler)
        async def inner(self: Any, request: Any, context: Ctx) -> R:
            metrics: Metrics = self.metrics
            gate: Gate = self.gate
            start = time.perf_counter()
            code = grpc.StatusCode.OK
            try:
                try:
                    # before any work, the span included: shedding must stay cheap
                    lane = gate.admit(caller_of(request, context), quick)
                except ResourceExhausted as shed:
                    code = shed.code
                    metrics.refusals.labels(name, metrics.reason(shed.reason)).inc()
                    await context.abort_with_status(rich_status(shed))
                    raise AssertionError("unreachable") from None
                try:
                    with tracing.server_span(method, attributes, context.invocation_metadata()) as span:
                        try:
                            if request is UNDECODABLE:
                                raise InvalidArgument(
                                    Reason.REQUEST_INVALID,
                                    "the request is not a valid protobuf "
                                    "message (invalid UTF-8 in a string field, or corrupt bytes)",
                                )
                            identity: Identity | None = getattr(self, "identity", None)
                            if identity is not None:  # the peer's certificate, the verified context (§12)
                                await identity.admit(request, context)
                            answer = await handler(self, request, context)
                            tracing.end_server_span(span, code)
                            return answer
                        except CountersignError as exc:
                            error, code = exc, exc.code
                            tracing.end_server_span(span, code, exc.reason)
                            if isinstance(exc, StoreUnavailable):
                                metrics.fail_closed.labels(name).inc()
                            metrics.refusals.labels(name, metrics.reason(exc.reason)).inc()
                            log.info(
                                "refused",
                                extra={
                                    "event": "refused",
                                    "rpc": name,
                                    "reason": exc.reason,
                                    "code": exc.code.name,
                                    "metadata": exc.metadata,
                                },
                            )
                        except grpc.aio.AbortError:
                            code = _aborted_code(context)
                            tracing.end_server_span(span, code)
                            raise
                        except asyncio.CancelledError:  # the caller went away or its deadline passed
                            code = grpc.StatusCode.CANCELLED
                            tracing.end_server_span(span, code)
                            raise
                        except Exception:
                            log.exception(
                                "unexpected error in %s", name, extra={"event": "internal_error", "rpc": name}
                            )
                            code = grpc.StatusCode.INTERNAL
                            tracing.end_server_span(span, code, "INTERNAL")
                            status = status_pb2.Status(
                                code=code_pb2.INTERNAL, message="internal error; see the sidecar log"
                            )
                            await context.abort_with_status(rpc_status.to_status(status))
                            raise AssertionError("unreachable") from None
                finally:
                    gate.release(lane)
                await context.abort_with_status(rich_status(error))
                raise AssertionError("unreachable")  # abort_with_status raises
            finally:
                metrics.rpc_duration.labels(name, code.name).observe(time.perf_counter() - start)

        return inner

    return wrap


def _aborted_code(context: Ctx) -> grpc.StatusCode:
    """The code a handler aborted with (grpc.aio keeps it on the context)."""
    try:
        code = context.code()
    except Exception:
        return grpc.StatusCode.UNKNOWN
    if isinstance(code, grpc.StatusCode):
        return code
    return next((c for c in grpc.StatusCode if c.value[0] == code), grpc.StatusCode.UNKNOWN)


class _Undecodable:
    """Stands in for a request gRPC could not decode, so the handler can answer it properly."""


UNDECODABLE = _Undecodable()


def _tolerant(deserializer: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    def decode(raw: bytes) -> Any:
        try:
            return deserializer(raw)
        except Exception:  # DecodeError, invalid UTF-8 in a string field: answered as REQUEST_INVALID
            return UNDECODABLE

    return decode


def register(add: Callable[[Any, Any], None], servicer: Any, server: grpc.aio.Server) -> None:
    """Add a generated servicer, with request decoding that cannot turn bad bytes into UNKNOWN, by its generic
    handler only (see GenericOnly)."""

    class Capture:
        service, handlers = "", {}

        def add_generic_rpc_handlers(self, _: Any) -> None:
            pass

        def add_registered_method_handlers(self, service: str, handlers: dict[str, Any]) -> None:
            self.service, self.handlers = service, handlers

    capture = Capture()
    add(servicer, capture)
    wrapped = {
        name: grpc.unary_unary_rpc_method_handler(
            h.unary_unary,
            request_deserializer=_tolerant(h.request_deserializer),
            response_serializer=h.response_serializer,
        )
        for name, h in capture.handlers.items()
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(capture.service, wrapped),))


class GenericOnly:
    """A server as a generated ``add_*_to_server`` sees it: the service's generic handler is added, its registered
    method handlers are not (register() adds none either). For each registered method grpc.aio keeps a request
    pending, and for every call that arrives it waits on all of them again (``asyncio.wait`` over one future per
    method, 18 here: ~92k instructions per call, counted: notes/lean-cpu4.md); a generic handler is one pending
    request for every method, each found by its name, with the same handlers."""

    def __init__(self, server: grpc.aio.Server) -> None:
        self.server = server

    def add_generic_rpc_handlers(self, handlers: Any) -> None:
        self.server.add_generic_rpc_handlers(handlers)

    def add_registered_method_handlers(self, service: str, handlers: dict[str, Any]) -> None:
        pass  # served by the generic handler added with them


def add_health_and_reflection(server: grpc.aio.Server, health: Any) -> None:
    """The standard health service and server reflection (of every service here), by generic handlers only."""
    health_pb2_grpc.add_HealthServicer_to_server(health, GenericOnly(server))
    names = (*SERVICES, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME)
    reflection_pb2_grpc.add_ServerReflectionServicer_to_server(ReflectionServicer(names), GenericOnly(server))


def _token(token: str) -> str:
    if not token:
        raise InvalidArgument(Reason.CONFIRMATION_TOKEN_INVALID, "token is required")
    return token


class GatewayServicer(gateway_pb2_grpc.ToolGatewayServiceServicer):
    def __init__(
        self,
        pipeline: Pipeline,
        compensator: Compensator,
        reconciler: Reconciler,
        grants: Grants,
        metrics: Metrics,
        gate: Gate,
        identity: Identity | None = None,
    ) -> None:
        self.pipeline, self.compensator, self.reconciler, self.grants = pipeline, compensator, reconciler, grants
        self.metrics, self.gate, self.identity = metrics, gate, identity

    @rpc("Invoke")
    async def Invoke(self, request: gateway_pb2.InvokeRequest, context: Ctx) -> gateway_pb2.InvokeResponse:
        return await self.pipeline.invoke(request.context, request.tool_name, request.arguments_json)

    @rpc("Confirm")
    async def Confirm(self, request: gateway_pb2.ConfirmRequest, context: Ctx) -> gateway_pb2.ConfirmResponse:
        action = await self.pipeline.confirm(request.context, _token(request.token), request.wait_ms, request.approval)
        return gateway_pb2.ConfirmResponse(action=action)

    @rpc("Reject")
    async def Reject(self, request: gateway_pb2.RejectRequest, context: Ctx) -> gateway_pb2.RejectResponse:
        return gateway_pb2.RejectResponse(action=await self.pipeline.reject(request.context, _token(request.token)))

    @rpc("GetAction")
    async def GetAction(self, request: gateway_pb2.GetActionRequest, context: Ctx) -> gateway_pb2.GetActionResponse:
        action = await self.pipeline.get_action(request.context, request.action_id)
        return gateway_pb2.GetActionResponse(action=action)

    @rpc("Compensate")
    async def Compensate(self, request: gateway_pb2.CompensateRequest, context: Ctx) -> gateway_pb2.CompensateResponse:
        return await self.compensator.compensate(request.context, request.action_id)

    @rpc("Reconcile")
    async def Reconcile(self, request: gateway_pb2.ReconcileRequest, context: Ctx) -> gateway_pb2.ReconcileResponse:
        action = await self.reconciler.reconcile_rpc(request.context, request.action_id)
        return gateway_pb2.ReconcileResponse(action=action)

    @rpc("CreateGrant")
    async def CreateGrant(
        self, request: gateway_pb2.CreateGrantRequest, context: Ctx
    ) -> gateway_pb2.CreateGrantResponse:
        return await self.grants.create(request.context, request.approval)

    @rpc("ListGrants")
    async def ListGrants(self, request: gateway_pb2.ListGrantsRequest, context: Ctx) -> gateway_pb2.ListGrantsResponse:
        return await self.grants.list(request.context)

    @rpc("RevokeGrant")
    async def RevokeGrant(
        self, request: gateway_pb2.RevokeGrantRequest, context: Ctx
    ) -> gateway_pb2.RevokeGrantResponse:
        return await self.grants.revoke(request.context, request.grant_id)


class ContinuationServicer(continuation_pb2_grpc.ContinuationServiceServicer):
    def __init__(
        self, continuations: Continuations, metrics: Metrics, gate: Gate, identity: Identity | None = None
    ) -> None:
        self.continuations, self.metrics, self.gate, self.identity = continuations, metrics, gate, identity

    @rpc("OpenContinuation")
    async def OpenContinuation(
        self, request: continuation_pb2.OpenContinuationRequest, context: Ctx
    ) -> continuation_pb2.OpenContinuationResponse:
        return continuation_pb2.OpenContinuationResponse(
            continuation=await self.continuations.open(request.context, request.action_id, request.snapshot)
        )

    @rpc("ClaimContinuation")
    async def ClaimContinuation(
        self, request: continuation_pb2.ClaimContinuationRequest, context: Ctx
    ) -> continuation_pb2.ClaimContinuationResponse:
        return continuation_pb2.ClaimContinuationResponse(
            continuation=await self.continuations.claim(request.context, request.token)
        )

    @rpc("SettleContinuation")
    async def SettleContinuation(
        self, request: continuation_pb2.SettleContinuationRequest, context: Ctx
    ) -> continuation_pb2.SettleContinuationResponse:
        return continuation_pb2.SettleContinuationResponse(
            continuation=await self.continuations.settle(
                request.context, request.token, request.reply_text, request.claim_id
            )
        )

    @rpc("ReleaseContinuation")
    async def ReleaseContinuation(
        self, request: continuation_pb2.ReleaseContinuationRequest, context: Ctx
    ) -> continuation_pb2.ReleaseContinuationResponse:
        return continuation_pb2.ReleaseContinuationResponse(
            continuation=await self.continuations.release(request.context, request.token, request.claim_id)
        )


class ReplyGuardServicer(guard_pb2_grpc.ReplyGuardServiceServicer):
    def __init__(self, checker: ReplyCheck, metrics: Metrics, gate: Gate, identity: Identity | None = None) -> None:
        self.checker, self.metrics, self.gate, self.identity = checker, metrics, gate, identity

    @rpc("CheckReply")
    async def CheckReply(self, request: guard_pb2.CheckReplyRequest, context: Ctx) -> guard_pb2.CheckReplyResponse:
        return await self.checker.check_reply(request.context, request.reply_text, request.action_ids)
