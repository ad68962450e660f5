"""OpenTelemetry, by the semantic conventions: one SERVER span per RPC (continuing the caller's traceparent),
stage spans under it, one CLIENT span per downstream call, and the W3C traceparent handed on to the downstream.

Configuration: the SDK's standard environment (observability/trace_config.py).

Server spans are named ``countersign.v1.ToolGatewayService/Invoke`` and carry ``rpc.system``, ``rpc.service``,
``rpc.method`` and ``rpc.grpc.status_code``; their status is ERROR only for a server fault (UNKNOWN, INTERNAL,
UNAVAILABLE, DATA_LOSS, DEADLINE_EXCEEDED, UNIMPLEMENTED), never for a refusal (INVALID_ARGUMENT, NOT_FOUND, ...).
The MCP front door's tools/list and tools/call are server spans by the MCP conventions (``tools/call create_todo``,
``mcp.method.name``, ``gen_ai.tool.name``, the host's traceparent from ``params._meta``), with the same status rule.
"""

from __future__ import annotations

import functools
import logging
import os
import types
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from random import getrandbits as _getrandbits
from typing import TYPE_CHECKING, Any

import grpc
from opentelemetry import context as context_api
from opentelemetry import propagate, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

if TYPE_CHECKING:  # the SDK is imported only when spans are recorded (setup): a sidecar without tracing skips it
    pass

from countersign.observability.conventions import downstream_attributes as downstream_attributes
from countersign.observability.spans import NO_SPAN, Dropped, DroppedSpan, NoSpan
from countersign.observability.spans import InSpan as InSpan
from countersign.observability.spans import _recorded as _recorded
from countersign.observability.spans import recorded as recorded
from countersign.observability.trace_config import exporter as _exporter
from countersign.observability.trace_config import exporter_names as exporter_names
from countersign.observability.trace_config import ratio_sampler
from countersign.observability.trace_config import resource as resource
from countersign.observability.trace_config import version as version
from countersign.registry.templates import safe_url as safe_url  # shown in spans; filled in templates

log = logging.getLogger("countersign.tracing")
tracer = trace.get_tracer("countersign")
_configured = False
recording = False  # True once setup() installed the SDK: stage spans are worth creating

# gRPC codes that mean the server failed (semantic conventions, gRPC server spans); every other code is the
# caller's business (a refusal, a precondition, a shed call) and leaves the span's status unset.
SERVER_FAULTS = frozenset(
    {
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DATA_LOSS,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.UNIMPLEMENTED,
    }
)
# JSON-RPC errors that are the caller's (a malformed message, an unknown method or tool, invalid params); any other
# error code on an MCP request is the server's.
JSONRPC_CALLER_ERRORS = frozenset({-32700, -32600, -32601, -32602})


def setup(*, force: bool = False) -> bool:
    """Install the SDK tracer provider once per process, when spans have somewhere to go.

    With no exporter configured, spans are not recorded at all (measured: recording them costs
    about 14 % of Confirm's CPU); the downstream still gets a traceparent (``outgoing_headers``).
    ``force`` records even so (tests add their own in-memory exporter). Returns whether spans are recorded.
    A misconfiguration (an unknown exporter or protocol) raises ValueError: the start fails, naming it.
    """
    global _configured, recording, tracer
    if _configured:
        return True
    names = exporter_names()
    if not (names or force):
        return False
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    exporters = [_exporter(name) for name in names]
    _configured = True
    sampler, ids = _ratio_sampler()
    provider = TracerProvider(resource=resource(), sampler=sampler, id_generator=ids)
    for exporter in exporters:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    # the SDK's tracer itself: the module-level one is a proxy, one more context manager around every span
    tracer = provider.get_tracer("countersign")
    recording = True
    log.info("tracing on", extra={"event": "tracing", "exporters": names})
    return True


# (ids, the ratio's bound, a dropped root's flags, those flags as its traceparent's tail: "-00")
_roots: tuple[Any, int, trace.TraceFlags, str] | None = None


def _ratio_sampler() -> tuple[Any, Any]:
    """The sampler and id generator for the provider (trace_config.ratio_sampler); keeps the roots' draw here."""
    global _roots
    sampler, ids, roots = ratio_sampler()
    _roots = None if roots is None else (*roots, f"-{int(roots[2]):02x}")
    return sampler, ids


def _root_span(name: str, attributes: dict[str, str]) -> InSpan | Dropped:
    """A server span with no parent under a trace-id-ratio sampler: its trace id drawn and sampled here, as
    TraceIdRatioBased would (the id's low 64 bits below the ratio's bound); a dropped root is a NonRecordingSpan
    (DroppedSpan) made without the SDK's span-making (41k instructions, most of an unsampled call's tracing), made
    current by Dropped; a sampled one is the SDK's, on that trace id, in an InSpan."""
    assert _roots is not None
    ids, bound, dropped, tail = _roots
    trace_id = _getrandbits(128)  # RandomIdGenerator's draws, inline (two calls less; the tests compare the ids)
    while not trace_id:
        trace_id = _getrandbits(128)
    if trace_id & _TRACE_ID_LIMIT < bound:
        ids.handed = trace_id
        try:
            return InSpan(
                tracer.start_span(
                    name,
                    context=_ROOT,
                    kind=SpanKind.SERVER,
                    attributes=attributes,
                    record_exception=False,
                    set_status_on_exception=False,
                ),
                errors=False,
            )
        finally:
            ids.handed = 0
    span_id = _getrandbits(64)
    while not span_id:
        span_id = _getrandbits(64)
    span = DroppedSpan(trace.SpanContext(trace_id, span_id, False, dropped))
    span.trace_id, span.tail = trace_id, tail
    return Dropped(span)


_TRACE_ID_LIMIT = (1 << 64) - 1  # TraceIdRatioBased.TRACE_ID_LIMIT: the ratio is taken on the low 64 bits


@dataclass(frozen=True)
class RpcMethod:
    """One RPC of the contract as the conventions name it: span name and the rpc.* attributes."""

    service: str  # countersign.v1.ToolGatewayService
    method: str  # Invoke

    @property
    def full_name(self) -> str:
        return f"{self.service}/{self.method}"

    def attributes(self) -> dict[str, str]:
        return {"rpc.system": "grpc", "rpc.service": self.service, "rpc.method": self.method}


_ROOT = context_api.Context()  # the parent of a server span with no traceparent: none (it is a root)


def server_span(
    method: RpcMethod, attributes: dict[str, str], metadata: Iterable[tuple[str, str | bytes]] | None
) -> InSpan | Dropped | NoSpan:
    """The span of one RPC, a child of the caller's traceparent when it sent one. ``attributes`` is
    ``method.attributes()``, made once per method rather than per call.

    Without the SDK (spans not recorded) and without a traceparent there is nothing to make: the downstream then
    gets a fresh trace (``outgoing_headers``). With a traceparent, its context is made current, so the downstream
    continues the caller's trace as a hop of the sidecar's own."""
    carrier = None  # a loop, not a comprehension (its frame): most calls carry neither key
    for k, v in metadata or ():
        if (k == "traceparent" or k == "tracestate") and isinstance(v, str):
            if carrier is None:
                carrier = {}
            carrier[k] = v
    if carrier:
        parent = propagate.extract(carrier)
    elif not recording:
        return NO_SPAN
    elif _roots is not None:
        return _root_span(method.full_name, attributes)
    else:
        parent = _ROOT
    span = tracer.start_span(
        method.full_name,
        context=parent,
        kind=SpanKind.SERVER,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    )
    return InSpan(span, errors=False)


def end_server_span(span: Span, code: grpc.StatusCode, reason: str = "") -> None:
    """The answer's gRPC code on the server span; ERROR only when the server failed."""
    if not span.is_recording():
        return
    span.set_attribute("rpc.grpc.status_code", code.value[0])
    if reason:
        span.set_attribute("countersign.reason", reason)
    if code in SERVER_FAULTS:
        span.set_status(Status(StatusCode.ERROR, reason or code.name))
        span.set_attribute("error.type", code.name)


def mcp_server_span(
    method: str, target: str | None, attributes: dict[str, Any], carrier: Mapping[str, Any] | None
) -> InSpan:
    """The span of one MCP request, named by the MCP conventions (``tools/call create_todo``, ``tools/list``), a
    child of the host's traceparent: from ``params._meta`` (where the conventions propagate it) or the HTTP
    request's headers, as ``carrier``."""
    found = {k: v for k, v in (carrier or {}).items() if isinstance(v, str) and k in ("traceparent", "tracestate")}
    parent = propagate.extract(found) if found else None
    span = tracer.start_span(
        f"{method} {target}" if target else method,
        context=parent,
        kind=SpanKind.SERVER,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    )
    return InSpan(span, errors=False)


def end_mcp_span(span: Span, *, code: str = "", reason: str = "", jsonrpc: int | None = None) -> None:
    """The answer on an MCP server span, by the gRPC server spans' rule: ERROR only when the server failed (a tool
    error whose gRPC code ``code`` is a server fault, or a JSON-RPC error ``jsonrpc`` that is not the caller's); a
    refusal names its reason and leaves the status unset."""
    if not span.is_recording():
        return
    if reason:
        span.set_attribute("countersign.reason", reason)
    if jsonrpc is not None:
        span.set_attribute("rpc.response.status_code", str(jsonrpc))
        failed, error_type = jsonrpc not in JSONRPC_CALLER_ERRORS, str(jsonrpc)
    else:
        failed, error_type = code in {c.name for c in SERVER_FAULTS}, code
    if failed:
        span.set_status(Status(StatusCode.ERROR, reason or error_type))
        span.set_attribute("error.type", error_type)


def outgoing_headers() -> dict[str, str]:
    """traceparent (and tracestate) of the current span, for a downstream call.

    When spans are not recorded and the caller sent no trace, a fresh W3C traceparent is made so the
    downstream's logs can still be joined to this call.
    """
    headers: dict[str, str] = {}
    span = trace.get_current_span()
    if type(span) is DroppedSpan:  # a root dropped here: the header below, without SpanContext properties
        headers["traceparent"] = f"00-{span.trace_id:032x}-{os.urandom(8).hex()}{span.tail}"
        return headers
    if span.is_recording():
        propagate.inject(headers)
        return headers
    ctx = span.get_span_context()
    if ctx.is_valid:  # continue the caller's trace as a hop of our own
        headers["traceparent"] = f"00-{ctx.trace_id:032x}-{os.urandom(8).hex()}-{int(ctx.trace_flags):02x}"
        if ctx.trace_state is not trace.DEFAULT_TRACE_STATE and ctx.trace_state:  # the shared empty one: no __len__
            headers["tracestate"] = ctx.trace_state.to_header()
    else:
        headers["traceparent"] = f"00-{os.urandom(16).hex()}-{os.urandom(8).hex()}-01"
    return headers


def stage_span(name: str) -> InSpan | NoSpan:
    """A child span for one stage of the path (policy, prepare, issue, claim, execute, settle, ...), named
    ``countersign.<name>``; an exception leaving the stage makes it an ERROR span (the SDK's default).

    Under a span that is not recorded (a trace the sampler dropped) no child is made: every standard
    sampler would drop it too, by parent or by the same trace id, and making it costs as much as half a
    recorded one.
    """
    if not recording or _recorded.get() is None:
        return NO_SPAN
    return InSpan(tracer.start_span(_stage_name(name), record_exception=False), errors=True)


@functools.lru_cache(maxsize=64)
def _stage_name(name: str) -> str:
    return f"countersign.{name}"


def client_span(tool: str, adapter: str, method: str, url_or_target: str) -> InSpan | NoSpan:
    """The downstream call itself: one CLIENT span (the adapters inject its traceparent), named
    ``POST /todos`` (HTTP: method and path template) or ``countersign.v1.ToolBackendService/Execute`` (gRPC);
    an exception leaving the call makes it an ERROR span (the SDK's default)."""
    if not recording or _recorded.get() is None:
        return NO_SPAN  # INVALID_SPAN; outgoing_headers still hands the trace on, as a hop of its own
    name, attributes = _client_span_shape(tool, adapter, method, url_or_target)
    return InSpan(
        tracer.start_span(name, kind=SpanKind.CLIENT, record_exception=False, attributes=attributes), errors=True
    )


@functools.lru_cache(maxsize=1024)
def _client_span_shape(tool: str, adapter: str, method: str, url_or_target: str) -> tuple[str, Mapping[str, Any]]:
    """A CLIENT span's name and attributes, made once per tool and URL template (the registry's: a bounded set;
    parsing the URL cost more than the rest of the span's attributes). Read-only: the SDK copies attributes."""
    attributes = downstream_attributes(adapter, method, url_or_target)
    if adapter == "mcp":
        name = f"tools/call {tool}"
    elif adapter == "http":
        name = f"{method} {attributes['url.template']}"
    else:
        name = f"{attributes['rpc.service']}/{method}"
    attributes.update({"countersign.tool": tool, "countersign.adapter": adapter})
    return name, types.MappingProxyType(attributes)


def end_client_span(span: Span, adapter: str, status: str, reason: str) -> None:
    """The downstream's answer on the CLIENT span: HTTP status or gRPC code; ERROR for an HTTP status of 400
    or more, a gRPC code other than OK, an MCP answer other than a result, or no answer at all (not sent, timed
    out, connection lost)."""
    if not span.is_recording():
        return
    if adapter == "http" and status.isdigit():
        span.set_attribute("http.response.status_code", int(status))
        failed = int(status) >= 400
        error_type = status
    elif adapter == "mcp" and status:  # "result", "isError", "error <JSON-RPC code>", or an HTTP status
        failed, error_type = status != "result", status
    elif adapter != "http" and status in grpc.StatusCode.__members__:
        span.set_attribute("rpc.grpc.status_code", grpc.StatusCode[status].value[0])
        failed = status != "OK"
        error_type = status
    else:  # no answer
        failed, error_type = True, reason or "NO_ANSWER"
    if failed:
        span.set_status(Status(StatusCode.ERROR, reason or error_type))
        span.set_attribute("error.type", error_type)


def annotate(**attributes: str | bool | int) -> None:
    """Set countersign.* attributes on the current span (never raw arguments, tokens or reply text)."""
    span = _recorded.get()
    if span is None:
        return
    if len(attributes) > 2:  # one call: the SDK's set_attributes costs ~16k + ~4.5k an attribute (a lock, Mapping ABCs)
        span.set_attributes({_attribute_name(k): v for k, v in attributes.items()})
        return
    for k, v in attributes.items():  # set_attribute: ~9.5k each, cheaper up to two (notes/lean-meter3.md)
        span.set_attribute(_attribute_name(k), v)


@functools.lru_cache(maxsize=256)
def _attribute_name(key: str) -> str:
    return f"countersign.{key}"


def trace_id() -> str:
    ctx = trace.get_current_span().get_span_context()
    return format(ctx.trace_id, "032x") if ctx.is_valid else ""
