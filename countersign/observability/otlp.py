"""The OTLP/gRPC span exporter with a cheaper encoder: the same ExportTraceServiceRequest, built from bytes.

The library's encoder (opentelemetry-exporter-otlp-proto-common's ``encode_spans``) makes a protobuf message per
span, per attribute and per attribute value from Python, and hashes each span's resource (json.dumps of its
attributes): ~200k instructions per span here, more than making and ending the span. A sampled Confirm exports five
spans (bench/telemetry_points.py, notes/lean-meter2.md). Here a span is written in protobuf's wire format directly
(its attributes' encodings cached: tool names, URLs, methods and codes repeat), the batch is parsed once by upb
(C) into the request message the exporter sends. Anything this writer does not handle (events, links, dropped
counts, attribute values other than str/bool/int/float) is written by the library's own ``_encode_span``, so the
request is always the library's: ``tests/unit/test_otlp_encoding.py`` compares the two messages.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from typing import Any

from opentelemetry.attributes import BoundedAttributes
from opentelemetry.exporter.otlp.proto.common._internal import (
    _encode_instrumentation_scope,
    _encode_resource,
)
from opentelemetry.exporter.otlp.proto.common._internal.trace_encoder import _encode_span
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util import BoundedList
from opentelemetry.trace import DEFAULT_TRACE_STATE, SpanKind
from opentelemetry.trace.status import StatusCode

# The API's INTERNAL=0 ... is the proto's SPAN_KIND_INTERNAL=1 ...; keyed by the member's identity (an Enum's hash
# is a Python call, ~2k instructions a span), and the field's bytes with it.
_KIND = {id(kind): b"\x30" + bytes((kind.value + 1,)) for kind in SpanKind}
# Span.status (field 15) without a description, by the code's identity: the common case (UNSET, OK, ERROR bare).
_STATUS = {id(code): b"\x7a" + (bytes((2, 0x18, code.value)) if code.value else b"\x00") for code in StatusCode}
_FLAGS_LOCAL = b"\x85\x01" + struct.pack("<I", 0x100)  # field 16 (fixed32): SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK
_FLAGS_REMOTE = b"\x85\x01" + struct.pack("<I", 0x300)  # ... | SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK
_INT64 = 1 << 63
_NO_STATE = DEFAULT_TRACE_STATE  # what a span without a tracestate holds (an empty TraceState)
_fixed64 = struct.Struct("<Q").pack
_CACHE_LIMIT = 4096  # attribute encodings kept (action ids never repeat: the cache is emptied when full)
_attributes: dict[tuple[str, type, Any], bytes] = {}
_names: dict[tuple[str, int], bytes] = {}  # (name, id(kind)) -> the name and kind fields' bytes


def _varint(n: int) -> bytes:
    if n < 0x80:
        return bytes((n,))
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _len(tag: bytes, payload: bytes) -> bytes:
    return tag + _varint(len(payload)) + payload


def _attribute(key: str, value: Any) -> bytes | None:
    """One KeyValue (span field 9) as bytes, or None for a value this writer leaves to the library."""
    kind = value.__class__
    cached = _attributes.get((key, kind, value))
    if cached is not None:
        return cached
    if kind is str:
        any_value = _len(b"\x0a", value.encode("utf-8", "surrogatepass"))
    elif kind is bool:
        any_value = b"\x10\x01" if value else b"\x10\x00"
    elif kind is int:
        if not -_INT64 <= value < _INT64:
            return None
        any_value = b"\x18" + _varint(value & 0xFFFFFFFFFFFFFFFF)
    elif kind is float:
        any_value = b"\x21" + struct.pack("<d", value)
    else:
        return None
    encoded = _len(b"\x4a", _len(b"\x0a", key.encode("utf-8", "surrogatepass")) + _len(b"\x12", any_value))
    if len(_attributes) >= _CACHE_LIMIT:
        _attributes.clear()
    _attributes[(key, kind, value)] = encoded
    return encoded


def _plain_attributes(span: ReadableSpan) -> Iterable[tuple[str, Any]] | None:
    """The attributes of a span this writer writes whole (no events, links or dropped counts), else None.

    A span the SDK ended holds them in its own containers (a BoundedAttributes, made immutable at ``end``, and two
    BoundedLists): read there, where the public properties copy the lists under a lock and walk the attributes
    through the Mapping ABC's views (~21k of ~56k instructions a span). Any other span (another SDK's or a
    ReadableSpan built by hand): the properties."""
    attributes = getattr(span, "_attributes", None)
    events, links = getattr(span, "_events", None), getattr(span, "_links", None)
    if type(attributes) is BoundedAttributes and type(events) is BoundedList and type(links) is BoundedList:
        if len(events) or len(links) or attributes.dropped or events.dropped or links.dropped:
            return None
        return attributes._dict.items()
    if span.events or span.links or span.dropped_attributes or span.dropped_events or span.dropped_links:
        return None
    return (span.attributes or {}).items()


def _span(span: ReadableSpan) -> bytes:
    """One Span message's bytes, as the library's ``_encode_span`` would serialize it."""
    context = span.get_span_context()
    start, end = span.start_time, span.end_time
    items = _plain_attributes(span)
    if context is None or start is None or end is None or items is None:  # events, links, dropped: the library's
        return bytes(_encode_span(span).SerializeToString())
    parts = [b"\x0a\x10", context.trace_id.to_bytes(16, "big"), b"\x12\x08", context.span_id.to_bytes(8, "big")]
    state = context.trace_state
    if state is not _NO_STATE and state:  # the shared empty one: no Mapping ABC __len__ (~2k instructions)
        parts.append(_len(b"\x1a", ",".join(f"{k}={v}" for k, v in state.items()).encode()))
    parent = span.parent
    if parent:
        parts += (b"\x22\x08", parent.span_id.to_bytes(8, "big"))
    kind = span.kind
    named = _names.get((span.name, id(kind)))
    if named is None:
        kind_field = _KIND.get(id(kind))
        if kind_field is None:
            return bytes(_encode_span(span).SerializeToString())
        named = _len(b"\x2a", span.name.encode("utf-8", "surrogatepass")) + kind_field
        if len(_names) < _CACHE_LIMIT:
            _names[(span.name, id(kind))] = named
    parts += (named, b"\x39", _fixed64(start), b"\x41", _fixed64(end))
    for key, value in items:
        encoded = _attribute(key, value)
        if encoded is None:
            return bytes(_encode_span(span).SerializeToString())
        parts.append(encoded)
    status = span.status
    plain = None if status.description else _STATUS.get(id(status.status_code))
    if plain is not None:
        parts.append(plain)
    else:
        code = status.status_code.value
        body = (_len(b"\x12", status.description.encode("utf-8", "surrogatepass")) if status.description else b"") + (
            b"\x18" + _varint(code) if code else b""
        )
        parts.append(_len(b"\x7a", body))  # always present (the library sets it, empty or not)
    parts.append(_FLAGS_REMOTE if parent is not None and parent.is_remote else _FLAGS_LOCAL)
    return b"".join(parts)


def encode(spans: Sequence[ReadableSpan]) -> ExportTraceServiceRequest:
    """``encode_spans(spans)``'s request: spans grouped by resource, then by instrumentation scope, in first-seen
    order (by equality, as the library's dictionaries group them)."""
    groups: dict[Any, dict[Any, list[bytes]]] = {}
    resources: dict[int, Any] = {}  # a batch's resource objects by identity: each hashed once, not per span
    for span in spans:
        resource = span.resource
        key = resources.get(id(resource))
        if key is None:
            key = resources[id(resource)] = resource
        scope = span.instrumentation_scope or None
        groups.setdefault(key, {}).setdefault(scope, []).append(_span(span))
    out = []
    for resource, scopes in groups.items():
        body = [_len(b"\x0a", _encode_resource(resource).SerializeToString())]
        for scope, encoded in scopes.items():
            scope_body = [_len(b"\x0a", _encode_instrumentation_scope(scope).SerializeToString())]
            scope_body += (_len(b"\x12", s) for s in encoded)
            if scope is not None and scope.schema_url:
                scope_body.append(_len(b"\x1a", scope.schema_url.encode()))
            body.append(_len(b"\x12", b"".join(scope_body)))
        if resource.schema_url:
            body.append(_len(b"\x1a", resource.schema_url.encode()))
        out.append(_len(b"\x0a", b"".join(body)))
    return ExportTraceServiceRequest.FromString(b"".join(out))


def grpc_exporter() -> Any:
    """The OTLP/gRPC span exporter (the ``otlp_proto_grpc`` entry point's class), configured by its OTEL_*
    variables as ever, sending what ``encode`` builds."""
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

    class Exporter(OTLPSpanExporter):  # type: ignore[misc]
        def _translate_data(self, data: Sequence[ReadableSpan]) -> ExportTraceServiceRequest:
            return encode(data)

    return Exporter()
