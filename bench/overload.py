"""Overload: does the sidecar shed beyond --max-in-flight instead of queueing until callers time out?

    .venv/bin/python bench/overload.py [--seconds 5] [--rounds 2] [--limits 256,32] [--concurrency 16,64,128]

Starts redis-server (unix socket), the example todo service and one sidecar per --max-in-flight
value (all on loopback, stopped by PID at the end), then drives each sidecar with closed-loop
Confirm load (first Confirms of cards Invoked before the timed window) at each concurrency. A caller
that is shed (RESOURCE_EXHAUSTED OVERLOADED) retries the same card after the google.rpc.RetryInfo
delay the sidecar sent, doubled on each further shed (capped at 32x) with jitter: the exponential
backoff of gRPC's retry policy and of every cloud SDK. (--fixed-backoff retries after 20-40 ms
forever instead, to show what a retry storm does.) Cells are interleaved over --rounds so machine
noise hits every cell.

Per cell: served Confirms/s, p50/p99 of the served call, p99 as the caller saw it (with shed
retries), sheds, other errors; then, per limit, throughput(c)/throughput(c=16) and p99 growth.
Target (issue): at c=64 at least 0.9 x the throughput at c=16, with p99 not growing without bound.
Results: bench/results/overload-<UTC>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import random
import sys
import time
import urllib.request
import uuid
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from countersign.testing import processes
from countersign.testing.faults import pct
from countersign.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc

ROOT = Path(__file__).resolve().parent.parent

RESULTS = ROOT / "bench" / "results"
CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK
    except (OSError, IndexError, ValueError):
        return float("nan")


def machine_busy_s() -> float:
    """CPU seconds the whole machine spent busy (all cores), from /proc/stat."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / CLK_TCK


@dataclass
class Cell:
    limit: int
    concurrency: int
    served: int = 0
    seconds: float = 0.0
    shed: int = 0
    errors: int = 0
    deadline_exceeded: int = 0
    first_error: str = ""
    starved: bool = False
    served_ms: list[float] = field(default_factory=list)  # the call that was served
    caller_ms: list[float] = field(default_factory=list)  # from the first attempt, shed retries included
    sidecar_cpu_s: float = 0.0
    others_cpu_s: float = 0.0  # CPU used by processes not in this benchmark

    @property
    def throughput(self) -> float:
        return self.served / self.seconds if self.seconds else 0.0

    def summary(self) -> dict[str, Any]:
        return {
            "max_in_flight": self.limit,
            "concurrency": self.concurrency,
            "served": self.served,
            "seconds": round(self.seconds, 3),
            "throughput_per_s": round(self.throughput, 1),
            "served_p50_ms": round(pct(self.served_ms, 0.5), 2),
            "served_p99_ms": round(pct(self.served_ms, 0.99), 2),
            "caller_p50_ms": round(pct(self.caller_ms, 0.5), 2),
            "caller_p99_ms": round(pct(self.caller_ms, 0.99), 2),
            "caller_max_ms": round(pct(self.caller_ms, 1.0), 2),
            "shed": self.shed,
            "errors": self.errors,
            "deadline_exceeded": self.deadline_exceeded,
            "first_error": self.first_error,
            "ran_out_of_cards": self.starved,
            "sidecar_cpu_ms_per_served": round(1000 * self.sidecar_cpu_s / self.served, 3) if self.served else None,
            "others_cpu_pct_of_machine": round(100 * self.others_cpu_s / (self.seconds * (os.cpu_count() or 1)), 1)
            if self.seconds
            else None,
        }


def retry_delay(err: grpc.aio.AioRpcError) -> float:
    """The google.rpc.RetryInfo delay in a status, in seconds (0.05 when the status has none)."""
    status = rpc_status.from_call(err)  # type: ignore[arg-type]  # an AioRpcError is a call
    for detail in status.details if status else []:
        info = error_details_pb2.RetryInfo()
        if detail.Unpack(info):
            return info.retry_delay.seconds + info.retry_delay.nanos / 1e9
    return 0.05


class Load:
    def __init__(self, address: str, deadline: float, fixed_backoff: bool) -> None:
        self.deadline, self.fixed_backoff = deadline, fixed_backoff
        self.channel = grpc.aio.insecure_channel(address)
        self.stub = gateway_pb2_grpc.ToolGatewayServiceStub(self.channel)
        self.session = "overload-" + uuid.uuid4().hex[:8]
        self.cards: deque[tuple[common_pb2.CallContext, str]] = deque()

    def context(self) -> common_pb2.CallContext:
        return common_pb2.CallContext(
            tenant_id="bench",
            actor_id="bench-user",
            subject_id="bench-user",
            session_id=self.session,
            request_id=uuid.uuid4().hex,
            role="user",
            locale="en",
        )

    async def top_up(self, n: int, concurrency: int = 16) -> None:
        """Invoke until n cards wait (not timed)."""
        need = max(0, n - len(self.cards))
        counter = iter(range(need))

        async def one() -> None:
            for _ in counter:
                ctx = self.context()
                for _attempt in range(20):
                    try:
                        reply = await self.stub.Invoke(
                            gateway_pb2.InvokeRequest(
                                context=ctx,
                                tool_name="create_todo",
                                arguments_json=json.dumps({"title": "overload " + ctx.request_id}),
                            ),
                            timeout=10,
                        )
                        self.cards.append((ctx, reply.confirmation.token))
                        break
                    except grpc.aio.AioRpcError:
                        await asyncio.sleep(0.05)

        await asyncio.gather(*(one() for _ in range(concurrency)))

    async def closed_loop(self, cell: Cell | None, concurrency: int, seconds: float, pid: int, ours: list[int]) -> None:
        """concurrency callers, each confirming one card after another until the deadline."""
        start = time.perf_counter()
        deadline = start + seconds
        cpu0 = cpu_s(pid)
        ours0, machine0 = sum(cpu_s(p) for p in ours), machine_busy_s()

        async def caller(rng: random.Random) -> None:
            while time.perf_counter() < deadline:
                if not self.cards:
                    if cell is not None:
                        cell.starved = True
                    return
                ctx, token = self.cards.popleft()
                t_first = time.perf_counter()
                sheds = 0
                while time.perf_counter() < deadline + 10:  # a shed call is retried with backoff
                    t0 = time.perf_counter()
                    try:
                        await self.stub.Confirm(
                            gateway_pb2.ConfirmRequest(context=ctx, token=token), timeout=self.deadline
                        )
                    except grpc.aio.AioRpcError as err:
                        if err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
                            if cell is not None:
                                cell.shed += 1
                            if self.fixed_backoff:
                                await asyncio.sleep(0.02 + 0.02 * rng.random())
                            else:
                                await asyncio.sleep(retry_delay(err) * 2 ** min(sheds, 5) * (0.5 + rng.random()))
                            sheds += 1
                            continue
                        if cell is not None:
                            cell.errors += 1
                            cell.deadline_exceeded += err.code() == grpc.StatusCode.DEADLINE_EXCEEDED
                            cell.first_error = cell.first_error or f"{err.code().name}: {err.details()[:200]}"
                        break
                    now = time.perf_counter()
                    if cell is not None and now <= deadline:
                        cell.served += 1
                        cell.served_ms.append(1000 * (now - t0))
                        cell.caller_ms.append(1000 * (now - t_first))
                    break

        await asyncio.gather(*(caller(random.Random(i)) for i in range(concurrency)))
        if cell is not None:
            cell.seconds += min(time.perf_counter(), deadline) - start
            cell.sidecar_cpu_s += cpu_s(pid) - cpu0
            cell.others_cpu_s += max(0.0, (machine_busy_s() - machine0) - (sum(cpu_s(p) for p in ours) - ours0))

    async def close(self) -> None:
        await self.channel.close()


def table(cells: dict[tuple[int, int], Cell], limits: list[int], conc: list[int]) -> str:
    head = (
        f"{'max-in-flight':>13}{'c':>5}{'served/s':>10}{'p50 ms':>8}{'p99 ms':>8}{'caller p99':>11}"
        f"{'shed':>7}{'errors':>7}{'timeouts':>9}{'cpu ms/served':>14}{'others%':>8}"
    )
    lines = [head, "-" * len(head)]
    for limit in limits:
        for c in conc:
            s = cells[(limit, c)].summary()
            flag = "  (ran out of cards)" if s["ran_out_of_cards"] else ""
            lines.append(
                f"{limit:>13}{c:>5}{s['throughput_per_s']:>10.1f}{s['served_p50_ms']:>8.1f}"
                f"{s['served_p99_ms']:>8.1f}{s['caller_p99_ms']:>11.1f}{s['shed']:>7}{s['errors']:>7}"
                f"{s['deadline_exceeded']:>9}"
                f"{s['sidecar_cpu_ms_per_served'] or float('nan'):>14.2f}"
                f"{s['others_cpu_pct_of_machine'] or 0:>8.0f}{flag}"
            )
    return "\n".join(lines)


def ratios(cells: dict[tuple[int, int], Cell], limits: list[int], conc: list[int]) -> list[dict[str, Any]]:
    base_c = conc[0]
    out = []
    for limit in limits:
        base = cells[(limit, base_c)]
        for c in conc[1:]:
            cell = cells[(limit, c)]
            thr = cell.throughput / base.throughput if base.throughput else float("nan")
            p99 = pct(cell.served_ms, 0.99) / pct(base.served_ms, 0.99)
            caller = pct(cell.caller_ms, 0.99) / pct(base.caller_ms, 0.99)
            out.append(
                {
                    "max_in_flight": limit,
                    "concurrency": c,
                    "vs": base_c,
                    "throughput_ratio": round(thr, 3),
                    "served_p99_growth": round(p99, 2),
                    "caller_p99_growth": round(caller, 2),
                    "throughput_ok": thr >= 0.9,
                    "shed": cell.shed,
                    "errors": cell.errors,
                }
            )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5.0, help="timed seconds per cell (split over rounds)")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved slices per cell (default 2)")
    parser.add_argument("--warmup", type=float, default=0.5)
    parser.add_argument("--limits", default="64,32", help="--max-in-flight values (default 64, the default, and 32)")
    parser.add_argument("--concurrency", default="16,64,128,256", help="closed-loop callers (default 16,64,128,256)")
    parser.add_argument("--deadline", type=float, default=10.0, help="each Confirm's gRPC deadline, seconds")
    parser.add_argument(
        "--slow-downstream",
        type=float,
        default=0.0,
        metavar="S",
        help="every POST /todos waits S seconds at the todo service (calls park on I/O)",
    )
    parser.add_argument(
        "--fixed-backoff",
        action="store_true",
        help="shed callers retry after 20-40 ms forever (a retry storm) instead of backing off",
    )
    args = parser.parse_args(argv)
    limits = [int(x) for x in args.limits.split(",")]
    conc = [int(x) for x in args.concurrency.split(",")]
    slice_s = args.seconds / args.rounds
    started = datetime.now(UTC)
    print(
        f"overload: {args.seconds:g} s per cell in {args.rounds} slice(s), limits {limits}, concurrency {conc}, "
        f"deadline {args.deadline:g} s, downstream +{args.slow_downstream:g} s; "
        f"cpus={os.cpu_count()} loadavg {os.getloadavg()[0]:.2f}",
        flush=True,
    )

    work = processes.workdir("countersign-overload-")
    procs: list[processes.Proc] = []
    try:
        redis, todo, registry, keys = processes.start_backends(work)
        procs += [redis, todo]
        if args.slow_downstream:
            body = json.dumps(
                {
                    "path": "/todos",
                    "method": "POST",
                    "mode": "hang_before_commit",
                    "seconds": args.slow_downstream,
                    "times": 10_000_000,
                }
            ).encode()
            urllib.request.urlopen(
                urllib.request.Request(todo.info["url"] + "/_test/faults", data=body, method="POST"), timeout=10
            ).close()
        sidecars: dict[int, processes.Proc] = {}
        for limit in limits:
            sidecars[limit] = processes.start_sidecar(
                work,
                registry,
                redis_url=redis.info["url"],
                keys=keys,
                flags=["--log-level", "warning", "--max-in-flight", str(limit)],
            )
            procs.append(sidecars[limit])
        print(
            "pids: "
            + ", ".join(f"sidecar(max-in-flight {k}) {p.pid}" for k, p in sidecars.items())
            + f", redis {redis.pid}, todo {todo.pid}",
            flush=True,
        )

        async def go() -> dict[tuple[int, int], Cell]:
            loads = {limit: Load(p.info["grpc"], args.deadline, args.fixed_backoff) for limit, p in sidecars.items()}
            ours = [p.pid for p in procs] + [os.getpid()]
            cells = {(limit, c): Cell(limit, c) for limit in limits for c in conc}
            rate = 900.0
            try:
                for rnd in range(args.rounds):
                    for c in conc:
                        for limit in limits:
                            load = loads[limit]
                            await load.top_up(int(rate * (slice_s + args.warmup) * 1.4) + 2 * c + 100)
                            await load.closed_loop(None, c, args.warmup, sidecars[limit].pid, ours)
                            before = cells[(limit, c)].served
                            t = cells[(limit, c)].seconds
                            await load.closed_loop(cells[(limit, c)], c, slice_s, sidecars[limit].pid, ours)
                            cell = cells[(limit, c)]
                            got = (cell.served - before) / max(1e-9, cell.seconds - t)
                            rate = max(rate, got)
                            print(
                                f"  round {rnd + 1}/{args.rounds} max-in-flight {limit:<4} c={c:<4}"
                                f"{got:8.1f}/s  shed {cell.shed} errors {cell.errors}",
                                flush=True,
                            )
                return cells
            finally:
                for load in loads.values():
                    await load.close()

        cells = asyncio.run(go())
    finally:
        for proc in reversed(procs):
            proc.stop()

    print()
    print(table(cells, limits, conc))
    rs = ratios(cells, limits, conc)
    print()
    for r in rs:
        print(
            f"max-in-flight {r['max_in_flight']:>4}: throughput c={r['concurrency']}/c={r['vs']} = "
            f"{r['throughput_ratio']:.3f} ({'OK' if r['throughput_ok'] else 'MISSED'} vs >= 0.9), served p99 x"
            f"{r['served_p99_growth']:.2f}, caller p99 x{r['caller_p99_growth']:.2f}, shed {r['shed']}"
        )
    print(f"loadavg at end {os.getloadavg()[0]:.2f}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"overload-{started.strftime('%Y%m%dT%H%M%SZ')}.json"
    path.write_text(
        json.dumps(
            {
                "started_utc": started.isoformat(),
                "command": " ".join([Path(sys.executable).name, *sys.argv]),
                "settings": {
                    "seconds": args.seconds,
                    "rounds": args.rounds,
                    "warmup": args.warmup,
                    "limits": limits,
                    "deadline_s": args.deadline,
                    "slow_downstream_s": args.slow_downstream,
                    "concurrency": conc,
                    "shed_backoff": "20-40 ms" if args.fixed_backoff else "RetryInfo x 2^n (n<=5), jitter 0.5-1.5",
                },
                "machine": {
                    "cpus": os.cpu_count(),
                    "platform": platform.platform(),
                    "python": platform.python_version(),
                },
                "cells": [cells[(limit, c)].summary() for limit in limits for c in conc],
                "ratios": rs,
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
