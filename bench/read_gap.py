"""The read Invoke's latency gap, taken apart: direct GET vs a bare gRPC hop vs the sidecar (issue 17).

    .venv/bin/python bench/read_gap.py [--rounds 8] [--seconds 2] [--base /tmp/base] [--probe] [--concurrency 1]

Series, interleaved round by round (the order rotates each round, so a busy neighbour hurts all alike):

    direct     HTTP GET /todos?status=done as a subject with no todos, from this process (write_path's read_direct)
    reference  bench/reference_server.py's Read: a bare grpc.aio server doing that GET and nothing else (the hop)
    this       the sidecar of this tree: Invoke(list_todos) of the same GET (write_path's read)
    base       (--base DIR) the sidecar of another tree, e.g. `git archive main | tar -x -C /tmp/base`

One redis-server and one example todo service serve all. Each sidecar runs with metrics on and no span exporter, as
bench/write_path.py runs it, and with --tenant-quota 10000000 so every read stays on the quota's batched path
(the default cap's half is reached after ~50,000 reads; beyond it each read would ask Redis first).

--probe runs this tree's sidecar and the reference under bench/read_probe.py: each call's stages, inside the
server, from the client's send to its receipt (inbound hop, admission, span, policy, quota, adapter: URL, headers,
request, body read, classify; the fact's summary and remember, the answer's encode; outbound hop). The probe's
wrappers cost a few µs: compare probed stages with each other, and unprobed runs with unprobed runs.

Prints p50/mean per series, the gaps (series p50 - direct p50), CPU per call of every process (/proc), and writes
bench/results/read_gap-<UTC>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import grpc

from countersign.testing import processes
from countersign.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
READ_METHOD = "/countersign.bench.Reference/Read"
READER = "bench-reader"  # owns no todos: every answer is the same small one (write_path.py's READER)
CLK_TCK = os.sysconf("SC_CLK_TCK")
FLAGS = ["--log-level", "warning", "--tenant-quota", "10000000"]
# stage name -> (start mark, end mark) in a probed call's marks (bench/read_probe.py)
STAGES = {
    "sidecar": [
        ("inbound hop (send -> handler)", "sent", "entered"),
        ("admission", "admit.0", "admit.1"),
        ("span", "span.0", "span.1"),
        ("rpc wrapper -> pipeline", "entered", "pipeline.0"),
        ("policy", "policy.0", "policy.1"),
        ("turn key", "turn_key.0", "turn_key.1"),
        ("quota", "quota.0", "quota.1"),
        ("adapter (all)", "adapter.0", "adapter.1"),
        ("  url", "url.0", "url.1"),
        ("  headers", "headers.0", "headers.1"),
        ("  request -> response head", "headers.1", "body.0"),
        ("  body read + JSON decode", "body.0", "body.1"),
        ("  classify", "classify.0", "classify.1"),
        ("summary", "summary.0", "summary.1"),
        ("remember (the turn's fact)", "remember.0", "remember.1"),
        ("answer encode", "encode.0", "encode.1"),
        ("pipeline (all)", "pipeline.0", "pipeline.1"),
        ("pipeline -> rpc wrapper done", "pipeline.1", "returned"),
        ("handler (entered -> returned)", "entered", "returned"),
        ("outbound hop (returned -> received)", "returned", "received"),
    ],
    "reference": [
        ("inbound hop (send -> handler)", "sent", "entered"),
        ("handler: the GET (entered -> returned)", "entered", "returned"),
        ("outbound hop (returned -> received)", "returned", "received"),
    ],
}


def context() -> common_pb2.CallContext:
    """The reader's context; request_id starts with the send time (bench/read_probe.py reads it)."""
    rid = f"{time.perf_counter_ns():020d}{uuid.uuid4().hex[:12]}"
    return common_pb2.CallContext(
        tenant_id="bench-tenant",
        actor_id=READER,
        subject_id=READER,
        session_id="bench-session",
        request_id=rid,
        role="user",
        locale="en",
    )


def cpu_s(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return math.nan
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def start_tree(root: Path, work: Path, registry: Path, redis_url: str, keys: Path) -> processes.Proc:
    """A sidecar from another source tree (its own PYTHONPATH and cwd), stopped by PID like every Proc."""
    env = dict(os.environ, PYTHONPATH=str(root), PYTHONUNBUFFERED="1")
    log_path = work / f"sidecar-{root.name}.log"
    cmd = [sys.executable, "-m", "countersign.sidecar.cli", "serve", "--registry", str(registry)]
    cmd += ["--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--redis-url", redis_url]
    cmd += ["--keys-file", str(keys), *FLAGS]
    popen = subprocess.Popen(cmd, cwd=root, env=env, stdout=subprocess.PIPE, stderr=log_path.open("wb"))
    proc = processes.Proc(popen, log_path=log_path)
    assert popen.stdout is not None
    proc.info = json.loads(popen.stdout.readline())
    return proc


class Series:
    def __init__(self, name: str, proc: processes.Proc | None, probe: Path | None = None) -> None:
        self.name, self.proc, self.probe = name, proc, probe
        self.lat: list[int] = []
        self.calls = 0
        self.seconds = 0.0
        self.cpu: dict[str, float] = {}
        self.received: dict[int, int] = {}  # send ns -> receive ns (probed series)
        self.marks: list[dict[str, int]] = []
        self.errors = 0
        self.first_error = ""

    def p(self, q: float) -> float:
        lat = sorted(self.lat)
        return lat[max(0, math.ceil(q * len(lat)) - 1)] / 1e6 if lat else math.nan

    @property
    def mean(self) -> float:
        return statistics.fmean(self.lat) / 1e6 if self.lat else math.nan

    def per_call_cpu(self) -> dict[str, float]:
        return {k: round(1000 * v / self.calls, 3) for k, v in self.cpu.items()} if self.calls else {}

    def stages(self, kind: str) -> list[dict[str, Any]]:
        """Per stage, over the probed calls that have both marks: p50 and mean, µs."""
        rows = []
        for label, a, b in STAGES[kind]:
            d = [m[b] - m[a] for m in self.marks if a in m and b in m and m[a]]
            if d:
                rows.append(
                    {
                        "stage": label,
                        "calls": len(d),
                        "p50_us": round(statistics.median(d) / 1e3, 1),
                        "mean_us": round(statistics.fmean(d) / 1e3, 1),
                    }
                )
        return rows


async def run_window(op: Any, series: Series, concurrency: int, seconds: float, timed: bool) -> None:
    deadline = time.perf_counter() + seconds

    async def worker() -> None:
        while time.perf_counter() < deadline:
            t0 = time.perf_counter_ns()
            try:
                sent = await op()
            except Exception as exc:
                series.errors += 1
                series.first_error = series.first_error or f"{type(exc).__name__}: {str(exc)[:300]}"
                continue
            t1 = time.perf_counter_ns()
            if timed:
                series.lat.append(t1 - t0)
                series.calls += 1
                if sent and series.probe is not None:
                    series.received[sent] = t1

    await asyncio.gather(*(worker() for _ in range(concurrency)))


async def bench(args: argparse.Namespace, todo_url: str, all_series: list[Series], pids: dict[str, int]) -> None:
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=128, keepalive_timeout=30))
    channels: dict[str, grpc.aio.Channel] = {}
    ops: dict[str, Any] = {}
    url = todo_url.rstrip("/") + "/todos"

    async def direct() -> int:
        async with session.get(url, params={"status": "done"}, headers={"X-Countersign-Subject": READER}) as resp:
            await resp.read()
            if resp.status != 200:
                raise RuntimeError(f"GET /todos answered {resp.status}")
        return 0

    def invoke(call: Any) -> Any:
        async def op() -> int:
            ctx = context()
            request = gateway_pb2.InvokeRequest(
                context=ctx, tool_name="list_todos", arguments_json='{"status": "done"}'
            )
            reply = await call(request)
            if reply.WhichOneof("outcome") != "result":
                raise RuntimeError(f"not a result: {str(reply)[:200]}")
            return int(ctx.request_id[:20])

        return op

    for s in all_series:
        if s.name == "direct":
            ops[s.name] = direct
            continue
        assert s.proc is not None
        channel = channels[s.name] = grpc.aio.insecure_channel(s.proc.info["grpc"])
        await asyncio.wait_for(channel.channel_ready(), 10)
        if s.name == "reference":
            ops[s.name] = invoke(
                channel.unary_unary(
                    READ_METHOD,
                    request_serializer=gateway_pb2.InvokeRequest.SerializeToString,
                    response_deserializer=gateway_pb2.InvokeResponse.FromString,
                )
            )
        else:
            ops[s.name] = invoke(gateway_pb2_grpc.ToolGatewayServiceStub(channel).Invoke)
    try:
        for n in range(args.rounds):
            k = n % len(all_series)
            for s in all_series[k:] + all_series[:k]:
                await run_window(ops[s.name], s, args.concurrency, args.warmup, timed=False)
                if s.probe is not None and s.proc is not None:
                    os.kill(s.proc.pid, signal.SIGUSR1)  # the probe starts afresh (the warm-up's marks dropped)
                    await asyncio.sleep(0.05)
                before = {name: cpu_s(pid) for name, pid in pids.items()}
                t0 = time.perf_counter()
                await run_window(ops[s.name], s, args.concurrency, args.seconds, timed=True)
                s.seconds += time.perf_counter() - t0
                for name, pid in pids.items():
                    s.cpu[name] = s.cpu.get(name, 0.0) + cpu_s(pid) - before[name]
                if s.probe is not None and s.proc is not None:
                    os.kill(s.proc.pid, signal.SIGUSR1)
                    await asyncio.sleep(0.1)
                    for marks in json.loads(s.probe.read_text()):
                        got = s.received.get(marks.get("sent", -1))
                        if got:
                            s.marks.append({**marks, "received": got})
            print(f"  round {n + 1}/{args.rounds}: " + "  ".join(f"{s.name} p50 {s.p(0.5):.3f}" for s in all_series))
    finally:
        await session.close()
        for channel in channels.values():
            await channel.close(None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=2.0, help="timed seconds per series and round")
    parser.add_argument("--warmup", type=float, default=0.3)
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--base", type=Path, help="another source tree: its sidecar is the 'base' series")
    parser.add_argument("--probe", action="store_true", help="this tree's sidecar and the reference under read_probe")
    parser.add_argument("--no-reference", action="store_true")
    args = parser.parse_args(argv)
    load_start = os.getloadavg()
    work = processes.workdir("countersign-read-gap-")
    procs: list[processes.Proc] = []
    try:
        redis, todo, registry, keys = processes.start_backends(work)
        procs += [redis, todo]
        probe = [sys.executable, str(ROOT / "bench" / "read_probe.py")]
        all_series = [Series("direct", None)]
        ref_cmd = ["--redis-url", redis.info["url"], "--todo-url", todo.info["url"]]
        if not args.no_reference:
            out = work / "probe-reference.json" if args.probe else None
            cmd = [*probe, "reference", str(out)] if out else [sys.executable, str(ROOT / "bench/reference_server.py")]
            ref = processes._start([*cmd, *ref_cmd], work, "reference")
            procs.append(ref)
            all_series.append(Series("reference", ref, out))
        out = work / "probe-sidecar.json" if args.probe else None
        side = [*probe, "sidecar", str(out)] if out else [sys.executable, "-m", "countersign.sidecar.cli"]
        side += ["serve", "--registry", str(registry), "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"]
        side += ["--redis-url", redis.info["url"], "--keys-file", str(keys), *FLAGS]
        this = processes._start(side, work, "sidecar")
        procs.append(this)
        all_series.append(Series("this", this, out))
        if args.base:
            base = start_tree(args.base.resolve(), work, registry, redis.info["url"], keys)
            procs.append(base)
            all_series.append(Series("base", base))
        pids = {"todo": todo.pid, "redis": redis.pid, "bench": os.getpid()}
        pids.update({s.name: s.proc.pid for s in all_series if s.proc is not None})
        print(
            f"read_gap: c={args.concurrency}, {args.rounds} rounds x {args.seconds:g} s per series"
            f"{' (probed)' if args.probe else ''}; loadavg {[round(x, 2) for x in load_start]}",
            flush=True,
        )
        asyncio.run(bench(args, todo.info["url"], all_series, pids))
    finally:
        for proc in reversed(procs):
            proc.stop()
    load_end = os.getloadavg()
    direct = all_series[0]
    print(f"\n{'series':<10}{'calls':>7}{'err':>5}{'p50 ms':>9}{'mean ms':>9}{'p90 ms':>9}{'gap p50':>9}  CPU ms/call")
    for s in all_series:
        cpu = "  ".join(f"{k} {v:.3f}" for k, v in s.per_call_cpu().items() if k in ("todo", "redis", "bench", s.name))
        print(
            f"{s.name:<10}{s.calls:>7}{s.errors:>5}{s.p(0.5):>9.3f}{s.mean:>9.3f}{s.p(0.9):>9.3f}"
            f"{s.p(0.5) - direct.p(0.5):>9.3f}  {cpu}"
        )
        if s.first_error:
            print(f"  first error: {s.first_error}")
    stages = {}
    for s in all_series:
        if s.marks:
            kind = "reference" if s.name == "reference" else "sidecar"
            stages[s.name] = s.stages(kind)
            print(f"\n{s.name}: stages of {len(s.marks)} probed calls, wall µs (p50, mean)")
            for row in stages[s.name]:
                print(f"  {row['stage']:<40}{row['p50_us']:>9.1f}{row['mean_us']:>9.1f}")
    print(f"\nloadavg at start {[round(x, 2) for x in load_start]}, at end {[round(x, 2) for x in load_end]}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"read_gap-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    summary = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "settings": {k: str(v) for k, v in vars(args).items()},
        "loadavg_start": load_start,
        "loadavg_end": load_end,
        "series": {
            s.name: {
                "calls": s.calls,
                "errors": s.errors,
                "p50_ms": round(s.p(0.5), 3),
                "mean_ms": round(s.mean, 3),
                "p90_ms": round(s.p(0.9), 3),
                "p99_ms": round(s.p(0.99), 3),
                "gap_p50_ms": round(s.p(0.5) - direct.p(0.5), 3),
                "cpu_ms_per_call": s.per_call_cpu(),
            }
            for s in all_series
        },
        "stages_us": stages,
    }
    path.write_text(json.dumps(summary, indent=1) + "\n")
    print(f"results: {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
