"""observability/otlp.py's encoder builds the request the library's encode_spans builds: equal messages and equal
bytes, for the spans a Confirm makes and for everything it hands back to the library (events, links, dropped
counts, lists, out-of-range ints), across resources and scopes; the gRPC exporter sends it."""

from __future__ import annotations

import math
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, SpanContext, SpanKind, TraceFlags, TraceState
from opentelemetry.trace.status import Status, StatusCode

from countersign.observability import otlp, trace_config, tracing


def _spans(provider: TracerProvider, exporter: InMemorySpanExporter) -> tuple[ReadableSpan, ...]:
    t = provider.get_tracer("countersign")
    other = provider.get_tracer("other", "1.2", schema_url="https://opentelemetry.io/schemas/1.21.0")
    remote = SpanContext(
        0xAB << 64, 0xCD, is_remote=True, trace_flags=TraceFlags(1), trace_state=TraceState([("k", "v")])
    )
    with t.start_as_current_span(
        "countersign.v1.ToolGatewayService/Confirm",
        context=trace.set_span_in_context(trace.NonRecordingSpan(remote)),
        kind=SpanKind.SERVER,
        attributes={"rpc.system": "grpc", "rpc.method": "Confirm"},
    ) as server:
        server.set_attributes(
            {"countersign.action_id": "a-1", "countersign.replayed": False, "rpc.grpc.status_code": 0}
        )
        with t.start_as_current_span("countersign.claim") as stage:
            stage.set_status(Status(StatusCode.ERROR, "RuntimeError: lost"))
        with t.start_as_current_span("POST /todos", kind=SpanKind.CLIENT) as client:
            client.set_attributes({"server.port": 8081, "url.full": "http://127.0.0.1:8081/todos", "ü": "wörd"})
            client.set_attribute("http.response.status_code", 201)
            client.set_status(Status(StatusCode.OK))
        with t.start_as_current_span("numbers") as numbers:
            numbers.set_attributes({"f": 0.25, "nan": math.nan, "neg": -7, "big": 2**63 - 1, "t": True, "e": ""})
        with t.start_as_current_span("library's", links=[Link(remote, {"l": 1})]) as odd:  # links: the library's
            odd.add_event("event", {"e": "x"})
            odd.set_attribute("list", ["a", "b"])
        with t.start_as_current_span("list only") as listed:
            listed.set_attribute("ints", [1, 2])
    with other.start_as_current_span("another scope", kind=SpanKind.PRODUCER):
        pass
    return exporter.get_finished_spans()


@pytest.fixture
def spans() -> tuple[ReadableSpan, ...]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=tracing.resource(), span_limits=SpanLimits(max_span_attributes=8))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    made = _spans(provider, exporter)
    with provider.get_tracer("countersign").start_as_current_span("too many") as crowded:  # dropped attributes
        crowded.set_attributes({f"a{i}": i for i in range(12)})
    second = TracerProvider(resource=Resource({"service.name": "elsewhere"}, "https://schema"))
    second.add_span_processor(SimpleSpanProcessor(exporter))
    with second.get_tracer("countersign").start_as_current_span("another resource", kind=SpanKind.CONSUMER):
        pass
    provider.shutdown()
    second.shutdown()
    assert len(made) == 7
    return exporter.get_finished_spans()


def _check(batch: Any) -> None:
    ours, theirs = otlp.encode(batch), encode_spans(batch)
    assert ours == theirs
    assert ours.SerializeToString() == theirs.SerializeToString()


def test_the_request_is_the_librarys_for_every_span_and_every_mix(spans: tuple[ReadableSpan, ...]) -> None:
    assert len(spans) == 9
    _check(spans)
    _check(spans[::-1])  # another first-seen order of resources and scopes
    for span in spans:
        _check([span])
    _check(spans[:3] * 3)  # the caches of names and attributes, hit
    _check([])


def test_a_span_not_made_by_the_sdk_is_read_through_its_properties(spans: tuple[ReadableSpan, ...]) -> None:
    """otlp._plain_attributes reads an SDK span's own containers; a ReadableSpan built by hand (plain dict and
    tuples) goes through the public properties, and its events still go to the library's writer."""
    made = spans[0]
    kinds = {
        "plain": {},
        "events": {"events": (Event("e", {"k": "v"}, timestamp=made.start_time),)},
        "links": {"links": (Link(made.get_span_context(), {"l": 1}),)},
    }
    for name, extra in kinds.items():
        span = ReadableSpan(
            name=f"by hand {name}",
            context=made.get_span_context(),
            parent=made.parent,
            resource=made.resource,
            attributes={"a": "b", "n": 3, "ok": True},
            kind=SpanKind.CLIENT,
            status=Status(StatusCode.ERROR),
            start_time=made.start_time,
            end_time=made.end_time,
            instrumentation_scope=made.instrumentation_scope,
            **extra,
        )
        assert (otlp._plain_attributes(span) is None) == (name != "plain")
        assert isinstance(otlp._plain_attributes(made), type({}.items()))  # an SDK span: its own containers
        _check([span])
        _check([made, span])


def test_an_sdk_span_with_an_event_or_a_link_only_goes_to_the_library() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=tracing.resource())
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    t = provider.get_tracer("countersign")
    with t.start_as_current_span("event only", attributes={"a": "b"}) as span:
        span.add_event("e", {"k": "v"})
    with t.start_as_current_span("link only", links=[Link(span.get_span_context())]):
        pass
    provider.shutdown()
    made = exporter.get_finished_spans()
    assert [otlp._plain_attributes(s) for s in made] == [None, None]
    _check(made)


def test_the_attribute_cache_empties_when_full(
    monkeypatch: pytest.MonkeyPatch, spans: tuple[ReadableSpan, ...]
) -> None:
    monkeypatch.setattr(otlp, "_CACHE_LIMIT", 3)
    otlp._attributes.clear()
    _check(spans)
    assert len(otlp._attributes) <= 3


def test_the_grpc_exporter_sends_it(spans: tuple[ReadableSpan, ...]) -> None:
    exporter: Any = trace_config.exporter("otlp_proto_grpc")  # what OTEL_TRACES_EXPORTER=otlp (gRPC) makes
    try:
        assert type(exporter).__module__ == otlp.__name__
        assert exporter._translate_data(spans) == encode_spans(spans)
    finally:
        exporter.shutdown()
