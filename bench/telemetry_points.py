"""What telemetry's touch points of one Confirm cost, in instructions, without a server: one process calls the
observability API as a Confirm does (server span, claim/policy/execute/settle stages, the client span and its
traceparent, the counters and histograms, annotate), N times, under valgrind's callgrind.

    .venv/bin/python bench/telemetry_points.py [--calls 1000]

Each mode runs twice under callgrind, with 0 and with N calls after the same 200 warm-up calls; the difference
over N is the instructions per Confirm of that mode (start-up cancels out; PYTHONHASHSEED=0). Modes: off
(--telemetry off), metrics (the default without an endpoint), unsampled (the SDK installed, every trace dropped by
parentbased_traceidratio 0), traced (every span recorded; exporter none: the export thread is not in this),
exported (every span recorded, through a BatchSpanProcessor to an exporter that encodes each batch as the sidecar's
OTLP/gRPC exporter does, ExportTraceServiceRequest bytes, and sends nothing: the export thread's Python work without the
network), sampled (the same at parentbased_traceidratio 0.1, what the chart sets; trace ids from a seeded
generator, so both runs sample the same traces). Batches of 64 spans, no timer; flushed before the process ends.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MODES = ("off", "metrics", "unsampled", "traced", "sampled", "exported")
EXPORTING = ("sampled", "exported")


def touch(mode: str, calls: int) -> None:
    """The child: set up as the mode says, then 200 + calls Confirms' worth of telemetry."""
    import grpc

    from countersign.observability import tracing
    from countersign.observability.metrics import Metrics

    if mode != "off" and mode != "metrics":
        os.environ["OTEL_TRACES_EXPORTER"] = "none"
        if mode in ("unsampled", "sampled"):
            os.environ["OTEL_TRACES_SAMPLER"] = "parentbased_traceidratio"
            os.environ["OTEL_TRACES_SAMPLER_ARG"] = "0" if mode == "unsampled" else "0.1"
        tracing.setup(force=True)
    if mode in EXPORTING:
        random.seed(0)  # the SDK's ids come from random.getrandbits: the same traces sampled in both runs
        import importlib

        from opentelemetry import trace

        try:  # what the sidecar's OTLP/gRPC exporter encodes with (observability/otlp.py), in a tree that has it
            encode_spans = importlib.import_module("countersign.observability.otlp").encode
        except ImportError:
            encode_spans = importlib.import_module(
                "opentelemetry.exporter.otlp.proto.common.trace_encoder"
            ).encode_spans
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

        class Encoding(SpanExporter):
            """What the OTLP exporters do with a batch before the network: the request message and its bytes."""

            def export(self, spans: Any) -> SpanExportResult:
                encode_spans(spans).SerializeToString()
                return SpanExportResult.SUCCESS

        provider: Any = trace.get_tracer_provider()
        provider.add_span_processor(
            BatchSpanProcessor(Encoding(), schedule_delay_millis=3_600_000, max_export_batch_size=64)
        )
    m = Metrics(frozenset({"create_todo"}), enabled=mode != "off")
    method = tracing.RpcMethod("countersign.v1.ToolGatewayService", "Confirm")
    attributes = method.attributes()

    def one() -> None:
        start = time.perf_counter()
        with tracing.server_span(method, attributes, [("user-agent", "bench")]) as span:
            with m.timed("claim"):
                tracing.annotate(action_id="a1")
            m.claims.labels(m.tool("create_todo"), "won").inc()
            m.redis.labels("claim").observe(0.001)
            tracing.annotate(action_id="a1", tool="create_todo", capability="todo.write", risk="low")
            with m.timed("policy"):
                pass
            with (
                m.timed("execute", span=False),
                tracing.client_span("create_todo", "http", "POST", "http://127.0.0.1:8081/todos") as client,
            ):
                tracing.outgoing_headers()
            tracing.end_client_span(client, "http", "201", "")
            m.downstream.labels("create_todo", "http").observe(0.002)
            m.executions.labels("create_todo", "succeeded").inc()
            tracing.annotate(outcome="succeeded", replayed=False)
            with m.timed("settle"):
                pass
            m.redis.labels("settle").observe(0.001)
            m.redis.labels("audit").observe(0.001)
            tracing.end_server_span(span, grpc.StatusCode.OK)
        m.rpc_duration.labels("Confirm", "OK").observe(time.perf_counter() - start)

    for _ in range(200 + calls):
        one()
    if mode in EXPORTING:
        provider.force_flush()


def counted(mode: str, calls: int) -> int:
    env = {**os.environ, "PYTHONHASHSEED": "0", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [
            *("valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"),
            *(sys.executable, __file__, "--child", mode, "--calls", str(calls)),
        ],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    found = re.search(r"Collected : (\d+)", done.stderr)
    if found is None:
        raise RuntimeError(done.stderr[-2000:])
    return int(found.group(1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated, of: " + ", ".join(MODES))
    args = parser.parse_args(argv)
    if args.child:
        touch(args.child, args.calls)
        return 0
    modes = [m for m in MODES if m in args.modes.split(",")]
    per = {mode: (counted(mode, args.calls) - counted(mode, 0)) / args.calls for mode in modes}
    print(f"telemetry touch points of one Confirm, instructions per call (callgrind, {args.calls} calls):")
    for mode in modes:
        over = f"   over off {per[mode] - per['off']:+12,.0f}" if "off" in per else ""
        print(f"  {mode:<10} {per[mode]:12,.0f}{over}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
