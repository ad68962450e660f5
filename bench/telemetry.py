"""What telemetry costs: Confirm throughput at c=16 with traces and metrics off, metrics only, and both on.

    .venv/bin/python bench/telemetry.py [--seconds 3] [--rounds 6]

Five sidecars on one Redis and one todo service, measured in interleaved slices in one run (the order
rotates each round; each variant is compared with off within the same round):
  off       --telemetry off: no metrics, no spans (the traceparent is still passed on)
  off-again the same as off, in a second process: the noise floor of the comparison
  metrics   the default with no OTLP endpoint: Prometheus metrics, spans not recorded
  traced    metrics, and every span recorded and exported over OTLP/gRPC to a sink process
            (bench/otlp_sink.py; a collector never runs inside the load generator)
  sampled   the same with OTEL_TRACES_SAMPLER=parentbased_traceidratio, OTEL_TRACES_SAMPLER_ARG=0.1
Targets: traced costs at most 15 % of Confirm throughput against off; metrics at most 3 % and sampled at most
8 %, each beyond the noise floor (how far off-again lies from off in the same run).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

import grpc
from overload import cpu_s
from write_path import closed_loop

from countersign.testing import processes
from countersign.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc

ROOT = Path(__file__).resolve().parent.parent

CTX = dict(tenant_id="bench", actor_id="u", subject_id="u", session_id="s", role="user", locale="en")


def start_sink() -> tuple[subprocess.Popen[str], int]:
    """bench/otlp_sink.py as a process of its own (a collector is never inside the load generator)."""
    sink = subprocess.Popen([sys.executable, str(ROOT / "bench" / "otlp_sink.py")], stdout=subprocess.PIPE, text=True)
    assert sink.stdout is not None
    line = sink.stdout.readline()
    if not line:
        sink.kill()
        raise RuntimeError("the OTLP sink did not start")
    return sink, int(json.loads(line)["port"])


def stop_sink(sink: subprocess.Popen[str]) -> dict[str, int]:
    if sink.poll() is not None:
        return {}
    sink.send_signal(signal.SIGTERM)
    out, _ = sink.communicate(timeout=10)
    lines = out.strip().splitlines()
    return dict(json.loads(lines[-1])) if lines else {}


async def measure(address: str, seconds: float, concurrency: int, pid: int) -> tuple[float, float, float]:
    """Confirm throughput, p99 (ms) and the sidecar's CPU ms per Confirm, on fresh cards prepared before the
    timed window (the CPU counts every thread of the sidecar: the span exporter's included)."""
    async with grpc.aio.insecure_channel(address) as channel:
        stub = gateway_pb2_grpc.ToolGatewayServiceStub(channel)
        cards: list[str] = []
        need = int(seconds * 1200) + 200

        async def invoke() -> None:
            response = await stub.Invoke(
                gateway_pb2.InvokeRequest(
                    context=common_pb2.CallContext(**CTX, request_id=uuid.uuid4().hex),
                    tool_name="create_todo",
                    arguments_json=json.dumps({"title": uuid.uuid4().hex[:12]}),
                )
            )
            cards.append(response.confirmation.token)

        for start in range(0, need, 64):
            await asyncio.gather(*(invoke() for _ in range(min(64, need - start))))

        async def confirm() -> None:
            token = cards.pop()
            await stub.Confirm(gateway_pb2.ConfirmRequest(context=common_pb2.CallContext(**CTX), token=token))

        cpu0 = cpu_s(pid)
        calls, errors, elapsed, lat, first_error, _ = await closed_loop(confirm, concurrency, seconds)
        cpu_ms = 1000 * (cpu_s(pid) - cpu0) / max(1, calls)
        if errors:
            print(f"  {errors} errors, first: {first_error}", file=sys.stderr)
        lat.sort()
        return calls / elapsed, (lat[int(len(lat) * 0.99) - 1] / 1e6 if lat else 0.0), cpu_ms


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="timed seconds per slice")
    parser.add_argument("--rounds", type=int, default=6, help="interleaved slices per variant")
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args(argv)

    sink, otlp_port = start_sink()
    sunk: dict[str, int] = {}

    work = processes.workdir("countersign-telemetry-")
    procs: list[processes.Proc] = []
    try:
        redis, todo, registry, keys = processes.start_backends(work)
        procs += [redis, todo]
        # one tenant prepares ~2,600 cards per slice; the default quota (100,000 records) ran out in round 4
        flags = ["--log-level", "warning", "--reconcile-interval", "1h", "--tenant-quota", "10000000"]
        variants: dict[str, processes.Proc] = {}
        for name, extra, env in (
            ("off", ["--telemetry", "off"], {}),
            ("off-again", ["--telemetry", "off"], {}),
            ("metrics", [], {}),
            (
                "traced",
                [],
                {
                    "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{otlp_port}",
                    "OTEL_EXPORTER_OTLP_INSECURE": "true",
                    "OTEL_BSP_SCHEDULE_DELAY": "200",
                },
            ),
            (
                "sampled",
                [],
                {
                    "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{otlp_port}",
                    "OTEL_EXPORTER_OTLP_INSECURE": "true",
                    "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
                    "OTEL_TRACES_SAMPLER_ARG": "0.1",
                    "OTEL_BSP_SCHEDULE_DELAY": "200",
                },
            ),
        ):
            saved = dict(os.environ)
            os.environ.update(env)
            try:
                variants[name] = processes.start_sidecar(
                    work, registry, redis_url=redis.info["url"], keys=keys, flags=flags + extra
                )
            finally:
                os.environ.clear()
                os.environ.update(saved)
            procs.append(variants[name])
        results: dict[str, list[float]] = {name: [] for name in variants}
        p99s: dict[str, list[float]] = {name: [] for name in variants}
        cpus: dict[str, list[float]] = {name: [] for name in variants}
        names = list(variants)
        print(
            f"telemetry: Confirm c={args.concurrency}, {args.rounds} x {args.seconds:g} s per variant, "
            f"interleaved; loadavg {os.getloadavg()[0]:.2f}"
        )
        for round_ in range(args.rounds):
            # the order rotates each round, so no variant always runs first (after an idle pause) or last
            for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
                proc = variants[name]
                rate, p99, cpu_ms = asyncio.run(
                    measure(str(proc.info["grpc"]), args.seconds, args.concurrency, proc.pid)
                )
                results[name].append(rate)
                p99s[name].append(p99)
                cpus[name].append(cpu_ms)
                print(
                    f"  round {round_ + 1} {name:<9} {rate:8.1f} calls/s  p99 {p99:6.1f} ms  "
                    f"sidecar CPU {cpu_ms:.3f} ms/Confirm",
                    flush=True,
                )
        time.sleep(1.0)
        sunk = stop_sink(sink)
        median = {name: statistics.median(v) for name, v in results.items()}
        cpu = {name: statistics.median(v) for name, v in cpus.items()}
        # paired: each variant against off in the same round, so drifts of the machine cancel out
        paired = {
            name: statistics.median(r / o for r, o in zip(results[name], results["off"], strict=True))
            for name in variants
        }
        paired_cpu = {
            name: statistics.median(c / o for c, o in zip(cpus[name], cpus["off"], strict=True)) for name in variants
        }
        print(
            "\nvariant    calls/s (median)  p99 ms (median)  throughput vs off  CPU ms/Confirm  CPU vs off"
            "   (vs off: median over rounds of the ratio within the round)"
        )
        for name in variants:
            print(
                f"{name:<10} {median[name]:16.1f} {statistics.median(p99s[name]):16.1f} {paired[name]:18.3f} "
                f"{cpu[name]:15.3f} {paired_cpu[name]:11.3f}"
            )
        noise = abs(1 - paired["off-again"])
        cost = 1 - paired["traced"]
        print(f"\nnoise floor: a second sidecar with telemetry off differs by {noise * 100:.1f} % from the first")
        print(
            f"traced costs {cost * 100:.1f} % of Confirm throughput against off (target <= 15 %): "
            f"{'OK' if cost <= 0.15 else 'MISSED'}; the OTLP sink received {sunk.get('spans', 0)} spans "
            f"in {sunk.get('exports', 0)} exports"
        )
        # issue 17's targets, each beyond the noise floor measured in the same run (off against off-again)
        for name, target in (("metrics", 0.03), ("sampled", 0.08)):
            part = 1 - paired[name]
            if part > target + noise:
                verdict = "MISSED"
            elif noise <= target:
                verdict = "OK"
            else:  # two identical sidecars differ by more than the target: this run cannot tell
                verdict = "NOT MEASURABLE in this run (the noise floor is above the target)"
            print(
                f"{name} costs {part * 100:.1f} % (target <= {target * 100:.0f} % beyond the noise floor of "
                f"{noise * 100:.1f} %): {verdict}"
            )
        out = ROOT / "bench" / "results" / f"telemetry-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
        out.write_text(
            json.dumps(
                {
                    "median_calls_per_s": median,
                    "paired_throughput_vs_off": paired,
                    "paired_cpu_vs_off": paired_cpu,
                    "rounds": results,
                    "p99_ms": p99s,
                    "cpu_ms_per_confirm": cpus,
                    "median_cpu_ms_per_confirm": cpu,
                    "cost_traced_vs_off": cost,
                    "spans_exported": sunk.get("spans", 0),
                    "concurrency": args.concurrency,
                    "seconds": args.seconds,
                },
                indent=1,
            )
        )
        print(f"results: {out.relative_to(ROOT)}")
        return 0
    finally:
        for proc in reversed(procs):
            proc.stop()
        stop_sink(sink)


if __name__ == "__main__":
    sys.exit(main())
