"""Where spans go and how they are sampled (the SDK's standard environment, read once at start by ``tracing.setup``):
the resource, the exporters by entry point, and the trace-id-ratio sampler whose roots ``tracing`` samples before
making a span. The SDK is imported here only when ``setup`` runs: a sidecar without tracing never loads it.

Configuration is the SDK's standard environment, read once at start:

    OTEL_TRACES_EXPORTER          otlp | console | none | any installed exporter's entry point, comma-separated.
                                  Unset: otlp when an OTLP endpoint is set, else none (spans are not recorded)
    OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL   grpc (default) | http/protobuf
    OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT, _HEADERS, _INSECURE, ...  read by the exporter itself
    OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES   win over the defaults (service.name countersign,
                                  service.version the installed package's)
    OTEL_TRACES_SAMPLER[_ARG]     read by the SDK's TracerProvider
    OTEL_SDK_DISABLED=true        nothing is recorded
"""

from __future__ import annotations

import logging
import os
from importlib import metadata
from typing import TYPE_CHECKING, Any

from opentelemetry import trace

if TYPE_CHECKING:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace.export import SpanExporter

log = logging.getLogger("countersign.tracing")
_PROTOCOLS = {"grpc": "otlp_proto_grpc", "http/protobuf": "otlp_proto_http"}


def version() -> str:
    try:
        return metadata.version("countersign")
    except metadata.PackageNotFoundError:  # a source tree that was never installed
        return "0+unknown"


def resource() -> Resource:
    """service.name countersign and service.version, unless OTEL_SERVICE_NAME / OTEL_RESOURCE_ATTRIBUTES say."""
    from opentelemetry.sdk.resources import OTELResourceDetector, Resource

    class HashedOnce(Resource):
        """The SDK's Resource with its hash computed once. The OTLP encoders group each batch's spans by resource
        and hash it for every span: json.dumps of its attributes, sorted (43k instructions a span, a fifth of
        encoding one; bench notes/lean-meter2.md). Its attributes cannot change (the SDK makes them immutable)."""

        def __init__(self, attributes: Any, schema_url: str | None = None) -> None:
            super().__init__(attributes, schema_url)
            self._hash = super().__hash__()

        def __hash__(self) -> int:
            return self._hash

    defaults = Resource({"service.name": "countersign", "service.version": version()})
    made = Resource.create(dict(defaults.merge(OTELResourceDetector().detect()).attributes))
    return HashedOnce(made.attributes, made.schema_url)


def exporter_names(environ: dict[str, str] | None = None) -> list[str]:
    """The entry-point names of the span exporters the environment asks for (empty: record nothing)."""
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return []
    asked = env.get("OTEL_TRACES_EXPORTER", "").strip()
    if not asked:  # the cheap default: without an endpoint there is nowhere to send spans, so none are made
        endpoint = env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        asked = "otlp" if endpoint else "none"
    names = []
    for name in (n.strip() for n in asked.split(",")):
        if name in ("", "none"):
            continue
        if name == "otlp":
            protocol = (
                env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "grpc"
            ).strip()
            if protocol not in _PROTOCOLS:
                raise ValueError(f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r}: the sidecar speaks grpc or http/protobuf")
            name = _PROTOCOLS[protocol]
        names.append(name)
    return names


def exporter(name: str) -> SpanExporter:
    """An exporter by its entry point (opentelemetry_traces_exporter), configured by its own OTEL_* variables."""
    found = metadata.entry_points(group="opentelemetry_traces_exporter", name=name)
    if not found:
        raise ValueError(f"OTEL_TRACES_EXPORTER names {name!r}, which no installed package provides")
    kind = next(iter(found)).load()
    if name == "otlp_proto_grpc" and kind.__module__ == "opentelemetry.exporter.otlp.proto.grpc.trace_exporter":
        from countersign.observability import otlp

        grpc_exporter: SpanExporter = otlp.grpc_exporter()  # the same exporter, its requests encoded by otlp.py
        return grpc_exporter
    exporter: SpanExporter = kind()
    return exporter


class Ids:
    """The SDK's random ids, and the one trace id a root was just sampled on, handed to the SDK's tracer (which
    makes a root's trace id itself). Spans are made on the event loop's thread only: the id is handed and taken
    within one call, with no await between."""

    def __init__(self) -> None:
        from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

        self._random = RandomIdGenerator()
        self.generate_span_id = self._random.generate_span_id
        self.is_trace_id_random = self._random.is_trace_id_random
        self.handed = 0

    def generate_trace_id(self) -> int:
        handed = self.handed
        if handed:
            self.handed = 0
            return handed
        return self._random.generate_trace_id()


def ratio_sampler() -> tuple[Any, Any, tuple[Ids, int, trace.TraceFlags] | None]:
    """OTEL_TRACES_SAMPLER=[parentbased_]traceidratio (the chart's): the SDK's samplers, made here so that a root
    span (no traceparent) can be sampled before any span is made (``tracing._root_span``), with the roots'
    (ids, the ratio's bound, a dropped root's flags). Any other sampler: (None, None, None), the SDK's own choice
    from the environment."""
    name = os.environ.get("OTEL_TRACES_SAMPLER", "").lower()  # as the SDK reads it (no strip)
    if name not in ("traceidratio", "parentbased_traceidratio"):
        return None, None, None
    from opentelemetry.sdk.trace.sampling import TraceIdRatioBased

    try:  # as the SDK reads it (sampling._get_from_env_or_default): not a number, or outside [0, 1]: 1.0
        ratio = TraceIdRatioBased(float(os.environ.get("OTEL_TRACES_SAMPLER_ARG", "")))
    except ValueError:
        log.warning("OTEL_TRACES_SAMPLER_ARG is not a rate in [0, 1]: sampling every trace")
        ratio = TraceIdRatioBased(1.0)
    ids = Ids()
    flags = trace.TraceFlags.DEFAULT | (trace.TraceFlags.RANDOM_TRACE_ID if ids.is_trace_id_random() else 0)
    sampler = _parent_based(ratio) if name.startswith("parentbased") else ratio
    return sampler, ids, (ids, ratio.bound, trace.TraceFlags(flags))


def _parent_based(root: Any) -> Any:
    """The SDK's ``ParentBased(root)``, its decision for a child of a local sampled span (every stage and CLIENT
    span of a sampled trace) made in one step: ``ALWAYS_ON``'s answer (record and sample, the span's attributes,
    the parent's trace state) without its second lookup of the parent in the context; for a span given no
    attributes under the empty trace state (a sampled root's stage spans), one shared result (immutable: the SDK
    only reads it). Every other parent (none, remote, not sampled) is the SDK's ``ParentBased`` as ever.
    ~10k instructions less per child (notes/lean-meter3.md)."""
    from opentelemetry.sdk.trace.sampling import ALWAYS_ON, Decision, ParentBased, SamplingResult

    record = Decision.RECORD_AND_SAMPLE
    plain = SamplingResult(record, None, trace.DEFAULT_TRACE_STATE)  # no attributes, the empty trace state

    class Parented(ParentBased):  # type: ignore[misc]
        def should_sample(
            self,
            parent_context: Any,
            trace_id: int,
            name: str,
            kind: Any = None,
            attributes: Any = None,
            links: Any = None,
            trace_state: Any = None,
        ) -> SamplingResult:
            parent = trace.get_current_span(parent_context).get_span_context()
            if parent.is_valid and not parent.is_remote and parent.trace_flags.sampled:
                state = parent.trace_state
                if attributes is None and state is plain.trace_state:
                    return plain
                return SamplingResult(record, attributes, state)
            return super().should_sample(parent_context, trace_id, name, kind, attributes, links, trace_state)

    sampler = Parented(root)
    assert sampler._local_parent_sampled is ALWAYS_ON  # the default the fast path stands for
    return sampler
