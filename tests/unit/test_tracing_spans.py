"""The span makers of observability/tracing.py (InSpan instead of the SDK's start_as_current_span; no span at all
when there is nothing to record) give the spans the SDK's own way gave: same names, kinds, parents, status on an
exception, no exception events; the context is restored after each; and a resource hashed once is still the same
resource to the OTLP encoder."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON, ParentBased, Sampler

from countersign.observability import tracing

METHOD = tracing.RpcMethod("countersign.v1.ToolGatewayService", "Confirm")
CALLER = [("traceparent", f"00-{'ab' * 16}-{'cd' * 8}-01")]


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    yield from _provider(monkeypatch, ALWAYS_ON)


def _provider(monkeypatch: pytest.MonkeyPatch, sampler: Sampler) -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=ParentBased(sampler), resource=tracing.resource())
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(tracing, "tracer", provider.get_tracer("countersign"))
    monkeypatch.setattr(tracing, "recording", True)
    yield exporter
    provider.shutdown()


def _confirm_ours(metadata: Any, fail: bool) -> None:
    with tracing.server_span(METHOD, METHOD.attributes(), metadata) as server:
        with tracing.stage_span("claim"):
            tracing.annotate(action_id="a1")
        try:
            with tracing.stage_span("policy"):
                if fail:
                    raise RuntimeError("refused by policy")
        except RuntimeError:
            pass
        with tracing.client_span("create_todo", "http", "POST", "http://127.0.0.1:8081/todos") as client:
            tracing.end_client_span(client, "http", "201", "")
        tracing.end_server_span(server, grpc.StatusCode.OK)


def _confirm_sdk(metadata: Any, fail: bool) -> None:
    """The same with the SDK's start_as_current_span, as tracing.py did before InSpan."""
    from opentelemetry import propagate

    carrier = {k: v for k, v in (metadata or ()) if k in ("traceparent", "tracestate")}
    parent = propagate.extract(carrier) if carrier else None
    t = tracing.tracer
    with t.start_as_current_span(
        METHOD.full_name,
        context=parent,
        kind=trace.SpanKind.SERVER,
        attributes=METHOD.attributes(),
        record_exception=False,
        set_status_on_exception=False,
    ) as server:
        with t.start_as_current_span("countersign.claim", record_exception=False):
            current = trace.get_current_span()  # annotate() as it was: the current span, if recorded
            if current.is_recording():
                current.set_attributes({"countersign.action_id": "a1"})
        try:
            with t.start_as_current_span("countersign.policy", record_exception=False):
                if fail:
                    raise RuntimeError("refused by policy")
        except RuntimeError:
            pass
        name, attributes = tracing._client_span_shape("create_todo", "http", "POST", "http://127.0.0.1:8081/todos")
        with t.start_as_current_span(
            name, kind=trace.SpanKind.CLIENT, record_exception=False, attributes=attributes
        ) as client:
            tracing.end_client_span(client, "http", "201", "")
        tracing.end_server_span(server, grpc.StatusCode.OK)


def _shape(spans: tuple[ReadableSpan, ...]) -> list[tuple[Any, ...]]:
    ids = {s.context.span_id: s.name for s in spans}
    return [
        (
            s.name,
            s.kind,
            ids.get(s.parent.span_id, "remote" if s.parent.is_remote else "?") if s.parent else None,
            s.parent.trace_id == 0xAB * (2**120 // 0xFF) if s.parent and s.parent.is_remote else None,
            s.status.status_code,
            s.status.description,
            dict(s.attributes or {}),
            len(s.events),
        )
        for s in spans
    ]


@pytest.mark.parametrize("metadata", [None, CALLER], ids=["root", "caller's traceparent"])
@pytest.mark.parametrize("fail", [False, True], ids=["ok", "a stage raises"])
def test_the_spans_are_the_ones_start_as_current_span_made(
    recorded: InMemorySpanExporter, metadata: Any, fail: bool
) -> None:
    _confirm_sdk(metadata, fail)
    want = _shape(recorded.get_finished_spans())
    recorded.clear()
    _confirm_ours(metadata, fail)
    got = _shape(recorded.get_finished_spans())
    assert got == want
    assert [s[0] for s in got] == [
        "countersign.claim",
        "countersign.policy",
        "POST /todos",
        "countersign.v1.ToolGatewayService/Confirm",
    ]
    if fail:
        assert got[1][4:6] == (trace.StatusCode.ERROR, "RuntimeError: refused by policy")
    assert trace.get_current_span() is trace.INVALID_SPAN  # every context detached


def test_a_dropped_trace_records_nothing_yet_its_context_is_current(monkeypatch: pytest.MonkeyPatch) -> None:
    exporter = next(_provider(monkeypatch, ALWAYS_OFF))
    with tracing.server_span(METHOD, METHOD.attributes(), None) as server:
        assert not server.is_recording() and server.get_span_context().is_valid  # the trace the downstream joins
        assert trace.get_current_span() is server
        with tracing.stage_span("claim") as stage:
            assert stage is trace.INVALID_SPAN and trace.get_current_span() is server  # no child made
        hop = tracing.outgoing_headers()["traceparent"].split("-")
        assert hop[1] == format(server.get_span_context().trace_id, "032x")
        assert int(hop[3], 16) & 1 == 0  # not sampled (the SDK may set its random-trace-id flag, 0x02)
    assert exporter.get_finished_spans() == ()


def test_without_the_sdk_a_call_without_a_traceparent_makes_no_span(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tracing, "recording", False)
    monkeypatch.setattr(tracing, "tracer", trace.NoOpTracer())
    with tracing.server_span(METHOD, METHOD.attributes(), None) as server:
        assert server is trace.INVALID_SPAN and trace.get_current_span() is trace.INVALID_SPAN
        assert tracing.outgoing_headers()["traceparent"].endswith("-01")  # a fresh trace for the downstream
    with tracing.server_span(METHOD, METHOD.attributes(), CALLER) as server:  # the caller's trace goes on
        assert trace.get_current_span() is server
        assert tracing.outgoing_headers()["traceparent"].split("-")[1] == "ab" * 16
    assert trace.get_current_span() is trace.INVALID_SPAN


def test_the_resource_hashed_once_is_the_sdks_resource(recorded: InMemorySpanExporter) -> None:
    ours = tracing.resource()
    theirs = Resource(ours.attributes, ours.schema_url)
    assert type(ours) is not Resource and ours == theirs and hash(ours) == hash(theirs)
    _confirm_ours(None, False)
    _confirm_ours(CALLER, False)
    spans = recorded.get_finished_spans()
    assert all(s.resource is spans[0].resource for s in spans)
    request = encode_spans(spans)
    (group,) = request.resource_spans  # one resource, all spans under it
    assert sum(len(scope.spans) for scope in group.scope_spans) == len(spans) == 8


def test_a_root_under_a_ratio_sampler_is_the_span_the_sdk_would_make(monkeypatch: pytest.MonkeyPatch) -> None:
    """A server span with no traceparent, sampled before any span is made (tracing._root_span): the same trace
    and span ids, flags and sampling decisions as the SDK's own tracer makes from the same random draws."""
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace.sampling import TraceIdRatioBased

    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "parentbased_traceidratio")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", "0.3")
    monkeypatch.setattr(tracing, "_roots", None)
    sampler, ids = tracing._ratio_sampler()
    exporter = InMemorySpanExporter()
    ours = TracerProvider(sampler=sampler, id_generator=ids, resource=tracing.resource())
    ours.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(tracing, "tracer", ours.get_tracer("countersign"))
    monkeypatch.setattr(tracing, "recording", True)
    sdk = TracerProvider(sampler=ParentBased(TraceIdRatioBased(0.3))).get_tracer("countersign")

    def made(span: Any) -> tuple[int, int, int, bool]:
        c = span.get_span_context()
        return c.trace_id, c.span_id, int(c.trace_flags), span.is_recording()

    random.seed(7)
    got = []
    for _ in range(300):
        with tracing.server_span(METHOD, METHOD.attributes(), None) as span:
            got.append(made(span))
            assert trace.get_current_span() is span and (tracing._recorded.get() is span) == span.is_recording()
            c, hop = span.get_span_context(), tracing.outgoing_headers()
            if not span.is_recording():  # a dropped root's hop: the header the rule for any unrecorded span gives
                assert list(hop) == ["traceparent"]
                version, trace_hex, parent, flags = hop["traceparent"].split("-")
                assert (version, trace_hex, flags) == ("00", f"{c.trace_id:032x}", f"{int(c.trace_flags):02x}")
                assert len(parent) == 16 and parent != f"{c.span_id:016x}"  # a hop of its own
    random.seed(7)
    want = [made(sdk.start_span(METHOD.full_name, context=Context(), kind=trace.SpanKind.SERVER)) for _ in range(300)]
    assert got == want
    sampled = {trace_id for trace_id, _, _, recorded in got if recorded}
    assert 50 < len(sampled) < 130  # ~90 of 300
    assert {s.context.trace_id for s in exporter.get_finished_spans()} == sampled
    assert ids.handed == 0
    ours.shutdown()


def test_a_dropped_root_hides_a_recorded_span_around_it_and_gives_it_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "parentbased_traceidratio")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", "0")
    monkeypatch.setattr(tracing, "_roots", None)
    tracing._ratio_sampler()
    monkeypatch.setattr(tracing, "recording", True)
    outer = next(_provider(monkeypatch, ALWAYS_ON))
    with tracing.InSpan(tracing.tracer.start_span("outer"), errors=False) as around:
        with tracing.server_span(METHOD, METHOD.attributes(), None) as server:
            assert not server.is_recording() and trace.get_current_span() is server
            assert tracing._recorded.get() is None  # no stage span under the dropped root
            with tracing.stage_span("claim") as stage:
                assert stage is trace.INVALID_SPAN
        assert tracing._recorded.get() is around and trace.get_current_span() is around
    assert tracing._recorded.get() is None and trace.get_current_span() is trace.INVALID_SPAN
    assert [s.name for s in outer.get_finished_spans()] == ["outer"]


def test_the_recorded_span_follows_the_context_into_tasks_and_back(recorded: InMemorySpanExporter) -> None:
    import asyncio

    async def child() -> None:  # a task started inside a span sees it; its own spans end inside it
        with tracing.stage_span("settle"):
            tracing.annotate(outcome="succeeded")

    async def call() -> None:
        with tracing.server_span(METHOD, METHOD.attributes(), None) as server:
            await asyncio.gather(child(), child())
            assert tracing._recorded.get() is server
        assert tracing._recorded.get() is None

    asyncio.run(call())
    spans = recorded.get_finished_spans()
    assert [s.name for s in spans].count("countersign.settle") == 2
    assert all(dict(s.attributes or {}) == {"countersign.outcome": "succeeded"} for s in spans if "settle" in s.name)


@pytest.mark.parametrize(
    ("name", "arg"),
    [
        ("parentbased_traceidratio", "0.25"),
        ("traceidratio", "0.5"),
        ("parentbased_traceidratio", "not a number"),
        ("traceidratio", "1.5"),  # outside [0, 1]: the SDK samples every trace
        ("parentbased_traceidratio", None),
    ],
)
def test_the_ratio_sampler_is_the_one_the_sdk_reads_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, name: str, arg: str | None
) -> None:
    from opentelemetry.sdk.trace import sampling

    monkeypatch.setenv("OTEL_TRACES_SAMPLER", name)
    if arg is None:
        monkeypatch.delenv("OTEL_TRACES_SAMPLER_ARG", raising=False)
    else:
        monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", arg)
    monkeypatch.setattr(tracing, "_roots", None)
    ours, _ = tracing._ratio_sampler()
    assert ours.get_description() == sampling._get_from_env_or_default().get_description()


def test_other_samplers_are_left_to_the_sdk(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tracing, "_roots", None)
    for name in ("always_on", "parentbased_always_off", " traceidratio", ""):
        monkeypatch.setenv("OTEL_TRACES_SAMPLER", name)
        assert tracing._ratio_sampler() == (None, None)
    assert tracing._roots is None


def test_the_ratio_samplers_parent_based_decides_every_parent_as_the_sdks(monkeypatch: pytest.MonkeyPatch) -> None:
    """trace_config._parent_based answers a local sampled parent's child in one step; every parent (none, local or
    remote, sampled or not, with or without a trace state) and attributes or none: the SDK's ParentBased's answer."""
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace.sampling import TraceIdRatioBased
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, TraceState

    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "parentbased_traceidratio")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", "0.5")
    monkeypatch.setattr(tracing, "_roots", None)
    ours, _ = tracing._ratio_sampler()
    sdk = ParentBased(TraceIdRatioBased(0.5))
    parents: list[Context | None] = [None, Context()]
    for remote in (False, True):
        for flags in (0, 1, 3):
            for state in (trace.DEFAULT_TRACE_STATE, TraceState([("k", "v")])):
                parent = SpanContext(0xAB << 64 | 0x77, 0xCD, remote, TraceFlags(flags), state)
                parents.append(trace.set_span_in_context(NonRecordingSpan(parent)))
    seen = set()
    for parent_context in parents:
        for attributes in (None, {"a": "b"}, {}):
            for trace_id in (1, (1 << 64) - 1, 0xAB << 64 | 0x77):
                a = ours.should_sample(parent_context, trace_id, "n", trace.SpanKind.INTERNAL, attributes)
                b = sdk.should_sample(parent_context, trace_id, "n", trace.SpanKind.INTERNAL, attributes)
                assert (a.decision, dict(a.attributes), a.trace_state) == (
                    b.decision,
                    dict(b.attributes),
                    b.trace_state,
                )
                seen.add(a.decision)
    assert len(seen) == 2
    assert ours.get_description() == sdk.get_description()
