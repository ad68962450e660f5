"""Write-path benchmark: direct HTTP vs the sidecar's Invoke/Confirm vs a bare Python reference server.

    .venv/bin/python bench/write_path.py [--seconds N] [--quick] [--rounds R] [--profile]

Starts redis-server (unix socket), the example todo service, the sidecar and bench/reference_server.py as
separate processes (stopped by PID at the end), then drives each with a closed-loop load generator in
this process (grpc.aio / aiohttp clients) at concurrency 1 and 16. See bench/README.md for the series.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import grpc

from countersign.testing import processes
from countersign.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc

ROOT = Path(__file__).resolve().parent.parent

RESULTS = ROOT / "bench" / "results"
CLK_TCK = os.sysconf("SC_CLK_TCK")
REFERENCE_METHOD = "/countersign.bench.Reference/Confirm"
REFERENCE_READ = "/countersign.bench.Reference/Read"  # the bare gRPC hop of a read: the same GET, nothing else
CONCURRENCY = (1, 16)
# The order of the series inside one round; direct and reference sit right next to the sidecar's.
ORDER = ("direct", "reference", "invoke", "confirm", "replay", "pair", "read_direct", "read_reference", "read")
# Series measured at c=1 only (the direct read and the bare hop are there for the read latency target).
ONLY_C1 = frozenset({"read_direct", "read_reference"})
RSS_CONCURRENCY = 64  # the resident-memory target under load is read while Confirm runs at this concurrency
IDLE_SECONDS = 4.0  # how long the idle sidecar's CPU is read
STARTS = 3  # fresh sidecar processes timed from exec to their "listening" line (median)
READER = "bench-reader"  # the read series' subject: owns no todos, so every list answer is the same small one
# The server process each series measures (its CPU per call is shown in the table).
SERVER = {
    "direct": "todo",
    "reference": "reference",
    "invoke": "sidecar",
    "confirm": "sidecar",
    "replay": "sidecar",
    "pair": "sidecar",
    "read_direct": "todo",
    "read_reference": "reference",
    "read": "sidecar",
}
DESCRIPTION = {
    "direct": "HTTP POST /todos, fresh Idempotency-Key (no sidecar)",
    "reference": "bare grpc.aio: EVALSHA claim + POST /todos + EVALSHA settle",
    "invoke": "sidecar Invoke(create_todo) -> confirmation card",
    "confirm": "sidecar Confirm(token) of a prepared card (first time)",
    "replay": "sidecar Confirm(token) of an already-settled card",
    "pair": "sidecar Invoke then Confirm, back to back",
    "read_direct": "HTTP GET /todos?status=done as a subject with no todos (no sidecar)",
    "read_reference": "bare grpc.aio: the same GET, its body passed back (the gRPC hop alone: no policy, no fact)",
    "read": "sidecar Invoke(list_todos) of the same GET: policy, one downstream call, the answer",
}


class OutOfCards(Exception):
    pass


@dataclass
class Cell:
    series: str
    concurrency: int
    calls: int = 0
    errors: int = 0
    seconds: float = 0.0
    latencies_ns: list[int] = field(default_factory=list)
    first_error: str = ""
    starved: bool = False
    cpu_s: dict[str, float] = field(default_factory=dict)  # CPU seconds each process used in the window
    stages: dict[str, list[float]] = field(default_factory=dict)  # sidecar histogram: name -> [sum s, count]

    def add(self, calls: int, errors: int, seconds: float, lat: list[int], first_error: str, starved: bool) -> None:
        self.calls += calls
        self.errors += errors
        self.seconds += seconds
        self.latencies_ns.extend(lat)
        self.first_error = self.first_error or first_error
        self.starved = self.starved or starved

    def add_cpu(self, used: dict[str, float]) -> None:
        for name, sec in used.items():
            self.cpu_s[name] = self.cpu_s.get(name, 0.0) + sec

    def add_stages(self, before: dict[str, float], after: dict[str, float]) -> None:
        for name in after:
            if name.endswith("_count") and after[name] > before.get(name, 0.0):
                base = name[: -len("_count")]
                acc = self.stages.setdefault(base, [0.0, 0.0])
                acc[0] += after.get(base + "_sum", 0.0) - before.get(base + "_sum", 0.0)
                acc[1] += after[name] - before.get(name, 0.0)

    def stage_means_ms(self) -> dict[str, float]:
        return {k: round(1000 * v[0] / v[1], 3) for k, v in sorted(self.stages.items()) if v[1]}

    @property
    def others_pct(self) -> float:
        """CPU used by processes not ours during the window, % of the machine."""
        if not self.seconds:
            return math.nan
        share = 100 * self.cpu_s.get("others", math.nan) / (self.seconds * (os.cpu_count() or 1))
        return max(0.0, share)  # tick rounding can make it slightly negative

    def cpu_ms_per_call(self, proc: str) -> float:
        return 1000 * self.cpu_s.get(proc, math.nan) / self.calls if self.calls else math.nan

    @property
    def throughput(self) -> float:
        return self.calls / self.seconds if self.seconds else 0.0

    def pct(self, q: float) -> float:
        """Nearest-rank percentile, milliseconds."""
        if not self.latencies_ns:
            return math.nan
        lat = sorted(self.latencies_ns)
        return lat[max(0, math.ceil(q * len(lat)) - 1)] / 1e6

    @property
    def mean_ms(self) -> float:
        return sum(self.latencies_ns) / len(self.latencies_ns) / 1e6 if self.latencies_ns else math.nan

    def summary(self) -> dict[str, Any]:
        return {
            "series": self.series,
            "concurrency": self.concurrency,
            "calls": self.calls,
            "errors": self.errors,
            "seconds": round(self.seconds, 3),
            "throughput_per_s": round(self.throughput, 1),
            "mean_ms": round(self.mean_ms, 3),
            "p50_ms": round(self.pct(0.50), 3),
            "p90_ms": round(self.pct(0.90), 3),
            "p99_ms": round(self.pct(0.99), 3),
            "max_ms": round(self.pct(1.0), 3),
            "cpu_ms_per_call": {k: round(self.cpu_ms_per_call(k), 3) for k in sorted(self.cpu_s)},
            "others_cpu_pct_of_machine": round(self.others_pct, 1),
            "sidecar_stage_means_ms": self.stage_means_ms(),
            "first_error": self.first_error,
            "ran_out_of_cards": self.starved,
        }


async def closed_loop(
    op: Callable[[], Awaitable[None]], concurrency: int, seconds: float
) -> tuple[int, int, float, list[int], str, bool]:
    """concurrency workers, each calling op back to back until the deadline; (calls, errors, elapsed, ...)."""
    lat: list[int] = []
    errors = 0
    first_error = ""
    starved = False
    start = time.perf_counter()
    deadline = start + seconds

    async def worker() -> None:
        nonlocal errors, first_error, starved
        while time.perf_counter() < deadline:
            t0 = time.perf_counter_ns()
            try:
                await op()
            except OutOfCards:
                starved = True
                return
            except Exception as exc:  # counted, reported once
                errors += 1
                first_error = first_error or f"{type(exc).__name__}: {str(exc)[:300]}"
                continue
            lat.append(time.perf_counter_ns() - t0)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return len(lat), errors, time.perf_counter() - start, lat, first_error, starved


class Clients:
    """The load generator's clients and the series' operations."""

    def __init__(self, todo_url: str, sidecar: str, reference: str, metrics: str = "") -> None:
        self.todo_url = todo_url.rstrip("/") + "/todos"
        self.metrics_url = f"http://{metrics}/metrics" if metrics else ""
        self.sidecar_channel = grpc.aio.insecure_channel(sidecar)
        self.reference_channel = grpc.aio.insecure_channel(reference)
        self.gateway = gateway_pb2_grpc.ToolGatewayServiceStub(self.sidecar_channel)
        self.reference = self.reference_channel.unary_unary(
            REFERENCE_METHOD,
            request_serializer=gateway_pb2.ConfirmRequest.SerializeToString,
            response_deserializer=gateway_pb2.ConfirmResponse.FromString,
        )
        self.reference_read_call = self.reference_channel.unary_unary(
            REFERENCE_READ,
            request_serializer=gateway_pb2.InvokeRequest.SerializeToString,
            response_deserializer=gateway_pb2.InvokeResponse.FromString,
        )
        self.session: aiohttp.ClientSession | None = None
        self.cards: deque[str] = deque()  # tokens of READY cards (Invoke output)
        self.settled: list[str] = []  # tokens already confirmed (replay input)
        self._replay_i = 0
        self.session_id = "bench-session-" + uuid.uuid4().hex[:8]

    async def start(self) -> None:
        connector = aiohttp.TCPConnector(limit=128, keepalive_timeout=30)
        self.session = aiohttp.ClientSession(connector=connector, raise_for_status=False)
        await asyncio.wait_for(self.sidecar_channel.channel_ready(), 10)
        await asyncio.wait_for(self.reference_channel.channel_ready(), 10)

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()
        await self.sidecar_channel.close()
        await self.reference_channel.close()

    def context(self) -> common_pb2.CallContext:
        return common_pb2.CallContext(
            tenant_id="bench-tenant",
            actor_id="bench-user",
            subject_id="bench-user",
            session_id=self.session_id,
            request_id=uuid.uuid4().hex,
            role="user",
            locale="en",
        )

    # -- the operations ------------------------------------------------------------------------

    async def direct(self) -> None:
        assert self.session is not None
        headers = {"Idempotency-Key": f'"{uuid.uuid4().hex}"'}
        async with self.session.post(self.todo_url, json={"title": "bench"}, headers=headers) as resp:
            await resp.read()
            if resp.status != 201:
                raise RuntimeError(f"POST /todos answered {resp.status}")

    async def reference_confirm(self) -> None:
        reply = await self.reference(
            gateway_pb2.ConfirmRequest(context=self.context(), token="bench " + uuid.uuid4().hex)
        )
        if reply.action.state != common_pb2.ACTION_STATE_SUCCEEDED:
            raise RuntimeError(f"reference answered {common_pb2.ActionState.Name(reply.action.state)}")

    async def invoke_one(self) -> str:
        reply = await self.gateway.Invoke(
            gateway_pb2.InvokeRequest(
                context=self.context(),
                tool_name="create_todo",
                arguments_json=json.dumps({"title": "bench " + uuid.uuid4().hex}),
            )
        )
        if reply.WhichOneof("outcome") != "confirmation":
            raise RuntimeError(f"Invoke did not answer with a card: {str(reply)[:200]}")
        return reply.confirmation.token

    async def confirm_one(self, token: str, *, replay: bool = False) -> None:
        reply = await self.gateway.Confirm(gateway_pb2.ConfirmRequest(context=self.context(), token=token))
        action = reply.action
        if action.state != common_pb2.ACTION_STATE_SUCCEEDED or action.replayed != replay:
            raise RuntimeError(
                f"Confirm answered {common_pb2.ActionState.Name(action.state)} "
                f"replayed={action.replayed} ({action.error.reason})"
            )

    async def invoke(self) -> None:
        self.cards.append(await self.invoke_one())

    async def confirm(self) -> None:
        try:
            token = self.cards.popleft()
        except IndexError:
            raise OutOfCards() from None
        await self.confirm_one(token)
        if len(self.settled) < 5000:
            self.settled.append(token)

    async def replay(self) -> None:
        token = self.settled[self._replay_i % len(self.settled)]
        self._replay_i += 1
        await self.confirm_one(token, replay=True)

    async def pair(self) -> None:
        token = await self.invoke_one()
        await self.confirm_one(token)

    async def read_direct(self) -> None:
        assert self.session is not None
        headers = {"X-Countersign-Subject": READER}
        async with self.session.get(self.todo_url, params={"status": "done"}, headers=headers) as resp:
            await resp.read()
            if resp.status != 200:
                raise RuntimeError(f"GET /todos answered {resp.status}")

    def read_request(self) -> gateway_pb2.InvokeRequest:
        context = self.context()
        context.actor_id = context.subject_id = READER
        return gateway_pb2.InvokeRequest(context=context, tool_name="list_todos", arguments_json='{"status": "done"}')

    async def read(self) -> None:
        reply = await self.gateway.Invoke(self.read_request())
        if reply.WhichOneof("outcome") != "result":
            raise RuntimeError(f"a read Invoke did not answer with a result: {str(reply)[:200]}")

    async def read_reference(self) -> None:
        reply = await self.reference_read_call(self.read_request())
        if reply.WhichOneof("outcome") != "result":
            raise RuntimeError(f"the reference's read did not answer with a result: {str(reply)[:200]}")

    async def stages(self) -> dict[str, float]:
        """The sidecar's stage and downstream histograms (sum and count per label set), from /metrics."""
        if not self.metrics_url or self.session is None:
            return {}
        async with self.session.get(self.metrics_url) as resp:
            text = await resp.text()
        out: dict[str, float] = {}
        for line in text.splitlines():
            if line.startswith(
                ("countersign_stage_duration_seconds_", "countersign_downstream_duration_seconds_")
            ) and ("_sum{" in line or "_count{" in line):
                name, _, value = line.rpartition(" ")
                metric, _, labels = name.partition("{")
                label = labels.split('"')[1] if '"' in labels else ""
                suffix = "_sum" if metric.endswith("_sum") else "_count"
                key = (label if metric.startswith("countersign_stage") else "downstream") + suffix
                out[key] = out.get(key, 0.0) + float(value)
        return out

    async def top_up(self, want: int, concurrency: int = 16) -> None:
        """Untimed: Invoke until `want` cards are ready."""

        async def worker() -> None:
            while len(self.cards) < want:
                self.cards.append(await self.invoke_one())

        await asyncio.gather(*(worker() for _ in range(concurrency)))


class Profiler:
    """py-spy record of the sidecar during the Confirm c=16 window (optional)."""

    def __init__(self, pid: int, out: Path, native: bool = False) -> None:
        self.pid, self.out, self.native = pid, out, native
        self.proc: subprocess.Popen[bytes] | None = None
        self.exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")

    def available(self) -> bool:
        return Path(self.exe).exists()

    def start(self, seconds: float) -> None:
        cmd = [
            self.exe,
            "record",
            "-d",
            str(max(1, int(seconds))),
            "-o",
            str(self.out),
            "--pid",
            str(self.pid),
            "--format",
            "speedscope",
            "--rate",
            "200",
            *(["--native"] if self.native else []),
        ]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def wait(self) -> dict[str, Any]:
        if self.proc is None:
            return {}
        _, err = self.proc.communicate(timeout=60)
        if self.proc.returncode != 0 or not self.out.exists():
            print(f"py-spy failed: {err.decode(errors='replace')[-500:]}", file=sys.stderr)
            return {}
        return top_self(self.out)


def top_self(path: Path, n: int = 10) -> dict[str, Any]:
    """Where the sidecar's event loop (MainThread) spent its samples, from a py-spy speedscope file.

    Samples are root-first stacks; self = the leaf frame, inclusive = any frame of the stack.
    """
    data = json.loads(path.read_text())
    frames = data["shared"]["frames"]
    threads = {}
    main = None
    for prof in data["profiles"]:
        threads[prof.get("name", "?")] = round(sum(prof.get("weights", [])), 3)
        if "MainThread" in prof.get("name", ""):
            main = prof
    if main is None:
        return {"threads_busy_s": threads, "self": [], "inclusive": []}
    # Frames are per (function, file, line); fold them per (function, file).
    key = [(fr.get("name", "?"), _short(fr.get("file", ""))) for fr in frames]
    self_w: dict[tuple[str, str], float] = {}
    incl_w: dict[tuple[str, str], float] = {}
    total = 0.0
    for stack, weight in zip(main.get("samples", []), main.get("weights", []), strict=False):
        total += weight
        if stack:
            self_w[key[stack[-1]]] = self_w.get(key[stack[-1]], 0.0) + weight
        for k in {key[idx] for idx in stack}:
            incl_w[k] = incl_w.get(k, 0.0) + weight

    def rows(weights: dict[tuple[str, str], float], keep: Callable[[str], bool]) -> list[dict[str, Any]]:
        ranked = [(k, w) for k, w in sorted(weights.items(), key=lambda kv: -kv[1]) if keep(k[1])]
        return [{"function": name, "where": where, "pct": round(100 * w / total, 1)} for (name, where), w in ranked[:n]]

    return {
        "threads_busy_s": threads,
        "main_samples_s": round(total, 3),
        "self": rows(self_w, lambda where: True),
        "inclusive": rows(incl_w, lambda where: where.startswith("countersign/") and "cli.py" not in where),
    }


def _short(path: str) -> str:
    for marker in ("site-packages/", f"{ROOT}/", "lib/python3"):
        if marker in path:
            return path.split(marker, 1)[1]
    return path


def cpu_seconds(pids: dict[str, int]) -> dict[str, float]:
    """utime + stime of each process so far (from /proc; NaN where unreadable)."""
    out = {}
    for name, pid in pids.items():
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            out[name] = (int(fields[11]) + int(fields[12])) / CLK_TCK
        except (OSError, IndexError, ValueError):
            out[name] = math.nan
    try:  # the whole machine's busy CPU (all cores), to tell how much of it was not ours
        ticks = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:9]]
        out["machine"] = (sum(ticks) - ticks[3] - ticks[4]) / CLK_TCK
    except (OSError, ValueError, IndexError):
        out["machine"] = math.nan
    return out


async def run_bench(
    args: argparse.Namespace, clients: Clients, profiler: Profiler | None, pids: dict[str, int]
) -> dict[str, Any]:
    ops: dict[str, Callable[[], Awaitable[None]]] = {
        "direct": clients.direct,
        "reference": clients.reference_confirm,
        "invoke": clients.invoke,
        "confirm": clients.confirm,
        "replay": clients.replay,
        "pair": clients.pair,
        "read_direct": clients.read_direct,
        "read_reference": clients.read_reference,
        "read": clients.read,
    }
    cells = {(s, c): Cell(s, c) for c in CONCURRENCY for s in ORDER}
    slice_s = args.seconds / args.rounds
    profile: dict[str, Any] = {}
    # A few settled cards so the replay series has something to replay from the start.
    await clients.top_up(32)
    while clients.cards:
        token = clients.cards.popleft()
        await clients.confirm_one(token)
        clients.settled.append(token)
    for rnd in range(args.rounds):
        for c in CONCURRENCY:
            for series in ORDER:
                if c != 1 and series in ONLY_C1:
                    continue
                op = ops[series]
                if series == "confirm":
                    # Warm up on prepared cards, measure the rate, prepare enough for the window (x2).
                    await clients.top_up(max(64, 4 * c))
                    before = len(clients.cards)
                    t0 = time.perf_counter()
                    await closed_loop(op, c, args.warmup)
                    rate = (before - len(clients.cards)) / (time.perf_counter() - t0)
                    await clients.top_up(int(rate * slice_s * 2) + 8 * c + 64)
                else:
                    await closed_loop(op, c, args.warmup)
                prof = profiler is not None and f"{series}:{c}" == args.profile_at and rnd == 0
                if prof:
                    assert profiler is not None
                    profiler.start(slice_s)
                sidecar_series = SERVER[series] == "sidecar"
                stages0 = await clients.stages() if sidecar_series else {}
                cpu0 = cpu_seconds(pids)
                result = await closed_loop(op, c, slice_s)
                cpu1 = cpu_seconds(pids)
                if sidecar_series:
                    cells[(series, c)].add_stages(stages0, await clients.stages())
                cells[(series, c)].add(*result)
                used = {k: cpu1[k] - cpu0[k] for k in cpu1}
                used["others"] = used.pop("machine") - sum(used.values())
                cells[(series, c)].add_cpu(used)
                if prof:
                    assert profiler is not None
                    profile = await asyncio.to_thread(profiler.wait)
                print(
                    f"  round {rnd + 1}/{args.rounds} c={c:<2} {series:<9} {result[0] / result[2]:8.1f}/s"
                    f"  (errors {result[1]})",
                    flush=True,
                )
    memory = await rss_under_load(clients, pids["sidecar"], min(args.seconds, 3.0))
    return {"cells": cells, "profile": profile, "leftover_cards": len(clients.cards), "memory": memory}


def rss_mb(pid: int) -> dict[str, float]:
    """Resident memory of a process, MB: rss (VmRSS: what `ps` and most dashboards show), anon (RssAnon: its
    private heap, what no other process shares) and hwm (VmHWM: the peak so far)."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        key = {"VmRSS": "rss", "RssAnon": "anon", "VmHWM": "hwm"}.get(name)
        if key:
            out[key] = round(int(value.split()[0]) / 1024, 1)
    return out


async def rss_under_load(clients: Clients, pid: int, seconds: float) -> dict[str, float]:
    """The sidecar's resident memory while Confirm runs at RSS_CONCURRENCY (sampled every 50 ms; the largest)."""
    await clients.top_up(int(seconds * 1000) + 8 * RSS_CONCURRENCY)
    peak: dict[str, float] = {}
    done = asyncio.Event()

    async def sample() -> None:
        while not done.is_set():
            for key, value in rss_mb(pid).items():
                peak[key] = max(peak.get(key, 0.0), value)
            await asyncio.sleep(0.05)

    sampler = asyncio.ensure_future(sample())
    calls, errors, elapsed, *_ = await closed_loop(clients.confirm, RSS_CONCURRENCY, seconds)
    done.set()
    await sampler
    return {**{f"{k}_mb": v for k, v in peak.items()}, "confirms_per_s": round(calls / elapsed, 1), "errors": errors}


def compile_like_the_image(root: Path) -> None:
    """Bytecode for a source tree's modules, as the image has it (the Dockerfile compiles the venv, the project's
    wheel in it, hash-checked). A checkout run with PYTHONDONTWRITEBYTECODE=1 (as on the team's machine) has none,
    so each fresh sidecar compiled ~100 of our modules from source: ~0.2 s of CPU per start that no pod pays
    (notes/lean-start2.md). Hash-checked bytecode is never stale; __pycache__ is ignored by git."""
    dirs = [str(root / name) for name in ("countersign", "bench", "examples") if (root / name).is_dir()]
    cmd = [sys.executable, "-m", "compileall", "-q", "-j", "0", "--invalidation-mode", "checked-hash", *dirs]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)


def time_starts(work: Path, registry: Path, redis_url: str, keys: Path, reference_cmd: list[str]) -> dict[str, Any]:
    """exec -> "listening" of STARTS fresh sidecars (and of the bare reference server, a yardstick: Python with
    grpc.aio, redis and aiohttp imported), interleaved; each stopped once it listened. Also the CPU each used until
    it listened (steadier than wall time on a shared machine), and the idle RSS of each sidecar one second after it
    listened (no call served yet)."""
    sidecar_s: list[float] = []
    reference_s: list[float] = []
    sidecar_cpu: list[float] = []
    reference_cpu: list[float] = []
    idle: list[dict[str, float]] = []
    for _ in range(STARTS):
        t0 = time.perf_counter()
        proc = processes.start_sidecar(work, registry, redis_url=redis_url, keys=keys, flags=["--log-level", "warning"])
        sidecar_s.append(time.perf_counter() - t0)
        sidecar_cpu.append(cpu_seconds({"p": proc.pid})["p"])
        try:
            time.sleep(1.0)
            idle.append(rss_mb(proc.pid))
        finally:
            proc.stop()
        t0 = time.perf_counter()
        ref = processes._start(reference_cmd, work, "reference")
        reference_s.append(time.perf_counter() - t0)
        reference_cpu.append(cpu_seconds({"p": ref.pid})["p"])
        ref.stop()
    median = statistics.median
    return {
        "sidecar_exec_to_listening_s": round(median(sidecar_s), 3),
        "reference_exec_to_listening_s": round(median(reference_s), 3),
        "sidecar_starts_s": [round(x, 3) for x in sidecar_s],
        "sidecar_start_cpu_s": round(median(sidecar_cpu), 3),
        "reference_start_cpu_s": round(median(reference_cpu), 3),
        "idle_rss_mb": median(m["rss"] for m in idle),
        "idle_anon_mb": median(m["anon"] for m in idle),
    }


def _target(
    name: str, value: float, target: str, ok: bool | None, unit: str = "", group: str = "lean"
) -> dict[str, Any]:
    """One line of the verdicts; ok None: a yardstick printed beside a target (no verdict of its own)."""
    return {
        "name": name,
        "value": value,
        "target": target,
        "ok": ok if ok is None else bool(ok),
        "unit": unit,
        "group": group,
    }


def ratios(
    cells: dict[tuple[str, int], Cell], memory: dict[str, Any] | None = None, starts: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """The targets, each from figures of this one run: the lean sidecar's (issue 17) first, then the write path's."""

    def g(series: str, c: int) -> Cell:
        return cells[(series, c)]

    confirm16, ref16 = g("confirm", 16), g("reference", 16)
    c1, d1, r1, ref1 = g("confirm", 1), g("direct", 1), g("replay", 1), g("reference", 1)
    read1, read_d1, read_ref1 = g("read", 1), g("read_direct", 1), g("read_reference", 1)
    tput = confirm16.throughput / ref16.throughput if ref16.throughput else math.nan
    cpu = confirm16.cpu_ms_per_call("sidecar") / ref16.cpu_ms_per_call("reference")
    out = [
        _target("Confirm c=16 throughput / reference c=16 throughput", tput, ">= 0.8", tput >= 0.8),
        _target("CPU per Confirm c=16 / reference's CPU per call", cpu, "<= 1.3", cpu <= 1.3),
        _target(
            "Confirm c=1 p50 - reference c=1 p50",
            c1.pct(0.5) - ref1.pct(0.5),
            "<= 0.5 ms",
            c1.pct(0.5) - ref1.pct(0.5) <= 0.5,
            "ms",
        ),
        _target(
            "read Invoke c=1 p50 - direct GET c=1 p50",
            read1.pct(0.5) - read_d1.pct(0.5),
            "<= 1.0 ms",
            read1.pct(0.5) - read_d1.pct(0.5) <= 1.0,
            "ms",
        ),
        # beside the target, not one: what the gRPC hop alone costs (a bare grpc.aio server doing the same GET)
        _target(
            "  beside it: bare gRPC hop c=1 p50 - direct GET c=1 p50",
            read_ref1.pct(0.5) - read_d1.pct(0.5),
            "",
            None,
            "ms",
        ),
    ]
    if starts:
        out += [
            _target(
                "resident memory, idle (VmRSS)", starts["idle_rss_mb"], "<= 50 MB", starts["idle_rss_mb"] <= 50, "MB"
            ),
            _target(
                "exec -> listening (median of fresh starts)",
                starts["sidecar_exec_to_listening_s"],
                "<= 0.8 s",
                starts["sidecar_exec_to_listening_s"] <= 0.8,
                "s",
            ),
        ]
    if memory:
        out.append(
            _target(
                f"resident memory at Confirm c={RSS_CONCURRENCY} (VmRSS, peak)",
                memory["rss_mb"],
                "<= 80 MB",
                memory["rss_mb"] <= 80,
                "MB",
            )
        )
    out += [
        _target(
            "Confirm c=1 p50 - direct c=1 p50",
            c1.pct(0.5) - d1.pct(0.5),
            "<= 1.5 ms",
            c1.pct(0.5) - d1.pct(0.5) <= 1.5,
            "ms",
            "write path",
        ),
        _target(
            "Confirm c=1 p99 - direct c=1 p99",
            c1.pct(0.99) - d1.pct(0.99),
            "<= 3 ms",
            c1.pct(0.99) - d1.pct(0.99) <= 3.0,
            "ms",
            "write path",
        ),
        _target(
            "first Confirm c=1 p50 / replayed Confirm c=1 p50",
            c1.pct(0.5) / r1.pct(0.5),
            ">= 1.5",
            c1.pct(0.5) / r1.pct(0.5) >= 1.5,
            "",
            "write path",
        ),
    ]
    return out


def sizing_rule(
    cells: dict[tuple[str, int], Cell], memory: dict[str, Any], starts: dict[str, Any], idle_millicores: float
) -> dict[str, str]:
    """What a platform team plans per pod, from this run: CPU of a write (Invoke + Confirm, the pair series) and of
    a read (Invoke of a read tool) at c=16, where the per-call CPU no longer carries idle overhead; memory idle and
    under load (it grows with the calls in flight, not with the rate)."""
    write_ms = cells[("pair", 16)].cpu_ms_per_call("sidecar")
    read_ms = cells[("read", 16)].cpu_ms_per_call("sidecar")
    return {
        "per 100 writes/s": f"{write_ms * 100:.0f} millicores",
        "per 1,000 reads/s": f"{read_ms * 1000:.0f} millicores",
        "per idle pod": f"{idle_millicores:.0f} millicores, {starts['idle_rss_mb']:.0f} MB",
        "memory under load": f"{memory['rss_mb']:.0f} MB at {RSS_CONCURRENCY} calls in flight",
    }


def table(cells: dict[tuple[str, int], Cell]) -> str:
    """One line per cell; CPU columns are milliseconds of CPU per call (server = the process under test)."""
    head = (
        f"{'series':<15}{'c':>3}{'calls':>7}{'err':>4}{'calls/s':>9}{'mean ms':>8}{'p50 ms':>8}{'p99 ms':>8}"
        f"{'cpu/call ms: server':>20}{'todo':>6}{'redis':>6}{'bench':>6}{'others%':>8}"
    )
    lines = [head, "-" * len(head)]
    for series in ORDER:
        for c in CONCURRENCY:
            cell = cells[(series, c)]
            if not cell.calls and series in ONLY_C1:
                continue
            flag = "  (ran out of cards!)" if cell.starved else ""
            server = f"{SERVER[series]} {cell.cpu_ms_per_call(SERVER[series]):.2f}"
            lines.append(
                f"{series:<15}{c:>3}{cell.calls:>7}{cell.errors:>4}{cell.throughput:>9.1f}"
                f"{cell.mean_ms:>8.2f}{cell.pct(0.5):>8.2f}{cell.pct(0.99):>8.2f}{server:>20}"
                f"{cell.cpu_ms_per_call('todo'):>6.2f}{cell.cpu_ms_per_call('redis'):>6.2f}"
                f"{cell.cpu_ms_per_call('bench'):>6.2f}{cell.others_pct:>8.0f}{flag}"
            )
    lines.append("")
    lines.extend(f"  {series:<15}{DESCRIPTION[series]}" for series in ORDER)
    lines.append(
        "\nsidecar stage means, ms (its own histograms; 'downstream' is the HTTP call: compare it with the direct "
        "series' mean, not its p50)"
    )
    for series in ORDER:
        for c in CONCURRENCY:
            means = cells[(series, c)].stage_means_ms()
            if means:
                lines.append(f"  {series:<15}c={c:<3}" + "  ".join(f"{k}={v:.2f}" for k, v in means.items()))
    return "\n".join(lines)


def git_state() -> dict[str, Any]:
    """The commit measured and the files changed on top of it (read-only git calls)."""

    def git(*cmd: str) -> str:
        try:
            return subprocess.run(["git", *cmd], cwd=ROOT, capture_output=True, text=True, timeout=10).stdout
        except (OSError, subprocess.SubprocessError):
            return ""

    dirty = [line[3:] for line in git("status", "--porcelain").splitlines() if "bench/results/" not in line]
    return {"head": git("rev-parse", "--short", "HEAD").strip(), "changed_files": dirty}


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=None, help="timed seconds per cell (default 5; --quick 2)")
    parser.add_argument("--quick", action="store_true", help="2 s per cell, 0.5 s warm-up")
    parser.add_argument("--warmup", type=float, default=None, help="warm-up seconds before each timed slice")
    parser.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="split each cell into this many slices, interleaved across series (default 2; quick 1)",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="py-spy record the sidecar during Confirm c=16 (slows that cell; do not compare its numbers)",
    )
    parser.add_argument("--profile-native", action="store_true", help="--profile with py-spy --native")
    parser.add_argument(
        "--profile-at", default="confirm:16", metavar="SERIES:C", help="the cell --profile samples (default confirm:16)"
    )
    args = parser.parse_args(argv)
    args.profile = args.profile or args.profile_native
    args.seconds = args.seconds if args.seconds is not None else (2.0 if args.quick else 5.0)
    args.warmup = args.warmup if args.warmup is not None else (0.5 if args.quick else 1.0)
    args.rounds = max(1, args.rounds if args.rounds is not None else (1 if args.quick else 2))

    started = datetime.now(UTC)
    code = git_state()
    load_start = loadavg()
    print(
        f"write_path: {args.seconds:g} s per cell in {args.rounds} interleaved slice(s), warm-up {args.warmup:g} s; "
        f"cpus={os.cpu_count()} loadavg at start {load_start}",
        flush=True,
    )
    print(f"code: HEAD {code['head']}, {len(code['changed_files'])} changed file(s) on top", flush=True)

    work = processes.workdir("countersign-bench-")
    procs: list[processes.Proc] = []
    try:
        redis, todo, registry, keys = processes.start_backends(work)
        procs += [redis, todo]
        reference_cmd = [
            sys.executable,
            str(ROOT / "bench" / "reference_server.py"),
            "--redis-url",
            redis.info["url"],
            "--todo-url",
            todo.info["url"],
        ]
        compile_like_the_image(ROOT)
        starts = time_starts(work, registry, redis.info["url"], keys, reference_cmd)
        print(
            f"exec -> listening: sidecar {starts['sidecar_exec_to_listening_s']} s, bare reference "
            f"{starts['reference_exec_to_listening_s']} s (medians of {STARTS}; CPU until listening "
            f"{starts['sidecar_start_cpu_s']} s and {starts['reference_start_cpu_s']} s); idle sidecar RSS "
            f"{starts['idle_rss_mb']} MB ({starts['idle_anon_mb']} MB of it private heap)",
            flush=True,
        )
        sidecar = processes.start_sidecar(
            work, registry, redis_url=redis.info["url"], keys=keys, flags=["--log-level", "warning"]
        )
        procs.append(sidecar)
        reference = processes._start(reference_cmd, work, "reference")  # waits for its "listening" line
        procs.append(reference)
        pids = {
            "redis": redis.pid,
            "todo": todo.pid,
            "sidecar": sidecar.pid,
            "reference": reference.pid,
            "bench": os.getpid(),
        }
        print(f"pids: {pids}; work dir {work}", flush=True)

        profiler = None
        if args.profile:
            target = reference.pid if args.profile_at.startswith("reference") else sidecar.pid
            name = args.profile_at.replace(":", "-c")
            profiler = Profiler(target, work / f"{name}.speedscope.json", args.profile_native)
            if not profiler.available():
                print("--profile: py-spy not found (pip install py-spy); running without it", file=sys.stderr)
                profiler = None

        async def go() -> dict[str, Any]:
            clients = Clients(
                todo.info["url"], sidecar.info["grpc"], reference.info["grpc"], sidecar.info.get("metrics", "")
            )
            await clients.start()
            try:
                return await run_bench(args, clients, profiler, pids)
            finally:
                await clients.close()

        time.sleep(1.0)  # the idle sidecar's own CPU (reconciler sweeps, probes' threads): a pod's floor
        cpu0 = cpu_seconds({"sidecar": sidecar.pid})
        time.sleep(IDLE_SECONDS)
        idle_millicores = 1000 * (cpu_seconds({"sidecar": sidecar.pid})["sidecar"] - cpu0["sidecar"]) / IDLE_SECONDS
        out = asyncio.run(go())
        for proc in procs:
            if not proc.alive():
                print(f"warning: pid {proc.pid} died during the run: {proc.log()[-500:]}", file=sys.stderr)
    finally:
        for proc in reversed(procs):
            proc.stop()

    load_end = loadavg()
    cells: dict[tuple[str, int], Cell] = out["cells"]
    memory = out["memory"]
    rs = ratios(cells, memory, starts)
    sizing = sizing_rule(cells, memory, starts, idle_millicores)
    print()
    print(table(cells))
    print(
        f"\nsidecar memory: idle {starts['idle_rss_mb']} MB RSS ({starts['idle_anon_mb']} MB private heap); at "
        f"Confirm c={RSS_CONCURRENCY} ({memory['confirms_per_s']}/s) peak {memory['rss_mb']} MB RSS "
        f"({memory['anon_mb']} MB private heap); idle CPU {idle_millicores:.1f} millicores"
    )
    print("\nsizing (from this run): " + "; ".join(f"{k} {v}" for k, v in sizing.items()))
    print()
    group = ""
    for r in rs:
        if r["group"] != group:
            group = r["group"]
            print({"lean": "targets of the lean sidecar (issue 17):", "write path": "\nwrite-path targets:"}[group])
        unit = f" {r['unit']}" if r["unit"] else ""
        verdict = "(yardstick)" if r["ok"] is None else f"target {r['target']:<9} {'OK' if r['ok'] else 'MISSED'}"
        print(f"  {r['name']:<56} {r['value']:8.3f}{unit:<3}  {verdict}")
    print(
        "  telemetry targets (metrics <= 3 %, sampled traces <= 8 % beyond the noise floor) and CPU per Confirm in "
        "instructions: bench/telemetry.py --instructions, bench/confirm_ir.py (`make bench` runs them next)"
    )
    print(f"\nloadavg at start {load_start}, at end {load_end}")
    prof = out["profile"]
    if prof:
        print(
            f"\nserver during {args.profile_at} (py-spy{' --native' if args.profile_native else ''}); busy seconds "
            f"per thread: {prof['threads_busy_s']}"
        )
        for title, key in (("top functions by self time", "self"), ("countersign functions, inclusive", "inclusive")):
            print(f"  MainThread (event loop), {title}, % of its busy samples:")
            for row in prof[key]:
                print(f"    {row['pct']:5.1f}%  {row['function']}  ({row['where']})")
        print(f"  speedscope file: {profiler.out if profiler else ''}")

    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / ".gitkeep").touch()
    stamp = started.strftime("%Y%m%dT%H%M%SZ")
    path = RESULTS / f"write_path-{stamp}.json"
    path.write_text(
        json.dumps(
            {
                "started_utc": started.isoformat(),
                "command": " ".join([Path(sys.executable).name, *sys.argv]),
                "code": code,
                "settings": {
                    "seconds": args.seconds,
                    "warmup": args.warmup,
                    "rounds": args.rounds,
                    "concurrency": list(CONCURRENCY),
                    "profile": args.profile,
                },
                "machine": {
                    "cpus": os.cpu_count(),
                    "platform": platform.platform(),
                    "python": platform.python_version(),
                    "loadavg_start": load_start,
                    "loadavg_end": load_end,
                },
                "cells": [cells[(s, c)].summary() for s in ORDER for c in CONCURRENCY if cells[(s, c)].seconds],
                "ratios": [{**r, "value": round(r["value"], 3)} for r in rs],
                "memory_at_load": memory,
                "starts": starts,
                "idle_millicores": round(idle_millicores, 1),
                "sizing": sizing,
                "profile": {"cell": args.profile_at, **out["profile"]} if out["profile"] else {},
                "descriptions": DESCRIPTION,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"results: {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        raise SystemExit(main())
