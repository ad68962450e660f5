"""The MCP adapter's cost: the same write and read through the HTTP adapter and through the MCP adapter, in one run.

    .venv/bin/python bench/mcp_adapter.py [--calls N] [--rounds R] [--concurrency 1,8]

Starts redis-server (unix socket), the example todo service (HTTP, aiohttp), the example MCP todo server
(Streamable HTTP, the official SDK) and one sidecar whose registry holds both
(``countersign.testing.mcp.write_both_registry``), each as its own process on free ports, stopped by PID at the
end. The series run interleaved, round by round, so a noisy neighbour hurts them alike:

    confirm-http   Confirm of a create_todo card: claim, POST /todos, settle
    confirm-mcp    Confirm of a create_mcp_todo card: claim, tools/call create_todo, settle
    read-http      Invoke(list_todos): GET /todos (an empty list)
    read-mcp       Invoke(list_mcp_todos): tools/call list_todos (an empty list)

Cards are issued before the timed window. Per series and concurrency: calls, errors, p50/p99 ms, and the CPU
per call of the sidecar (its adapter's share is the difference between the two kinds) and of the downstream
(aiohttp against the SDK's server). Writes bench/results/mcp_adapter-<UTC timestamp>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc

from countersign.testing import processes
from countersign.testing.mcp import write_both_registry
from countersign.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
CLK_TCK = os.sysconf("SC_CLK_TCK")
SERIES = ("confirm-http", "confirm-mcp", "read-http", "read-mcp")
TOOL = {
    "confirm-http": "create_todo",
    "confirm-mcp": "create_mcp_todo",
    "read-http": "list_todos",
    "read-mcp": "list_mcp_todos",
}
DOWNSTREAM = {"confirm-http": "todo", "confirm-mcp": "mcp", "read-http": "todo", "read-mcp": "mcp"}


def ctx(request_id: str, who: str = "alice") -> common_pb2.CallContext:
    return common_pb2.CallContext(
        tenant_id="bench",
        actor_id=who,
        subject_id=who,
        session_id="s-bench",
        request_id=request_id,
        role="user",
        locale="zh-CN",
    )


def cpu(pid: int) -> float:
    """utime + stime of a process so far, in seconds (from /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


class Cell:
    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.errors = 0
        self.first_error = ""
        self.cpu: dict[str, float] = {"sidecar": 0.0, "todo": 0.0, "mcp": 0.0}

    def row(self, series: str) -> dict[str, Any]:
        done = sorted(self.latencies)
        n = len(done)

        def pct(q: float) -> float:
            return round(done[min(n - 1, int(q * n))] * 1000, 3) if n else float("nan")

        per_call = {k: round(v * 1000 / n, 3) if n else float("nan") for k, v in self.cpu.items()}
        return {
            "calls": n,
            "errors": self.errors,
            "p50_ms": pct(0.50),
            "p99_ms": pct(0.99),
            "mean_ms": round(statistics.fmean(done) * 1000, 3) if n else float("nan"),
            "sidecar_cpu_ms_per_call": per_call["sidecar"],
            "downstream_cpu_ms_per_call": per_call[DOWNSTREAM[series]],
            "first_error": self.first_error,
        }


async def issue(stub: Any, tool: str, count: int) -> list[str]:
    """``count`` cards of ``tool`` (each its own turn), issued before the window; their tokens."""
    tokens = []
    for _ in range(count):
        request = gateway_pb2.InvokeRequest(
            context=ctx(uuid.uuid4().hex), tool_name=tool, arguments_json=json.dumps({"title": "bench"})
        )
        response = await stub.Invoke(request, timeout=10)
        tokens.append(response.confirmation.token)
    return tokens


async def measure(
    cell: Cell, calls: list[Callable[[], Awaitable[bool]]], concurrency: int, pids: dict[str, int]
) -> None:
    """Run ``calls`` with ``concurrency`` workers; each latency and error into ``cell``, and the CPU each process
    used over the window."""
    queue = list(reversed(calls))
    before = {name: cpu(pid) for name, pid in pids.items()}

    async def worker() -> None:
        while queue:
            call = queue.pop()
            started = time.perf_counter()
            try:
                ok = await call()
            except grpc.RpcError as exc:
                ok = False
                cell.first_error = cell.first_error or f"{exc.code()}: {exc.details()}"  # type: ignore[attr-defined]
            if ok:
                cell.latencies.append(time.perf_counter() - started)
            else:
                cell.errors += 1

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    for name, pid in pids.items():
        cell.cpu[name] += cpu(pid) - before[name]


async def run(args: argparse.Namespace, address: str, pids: dict[str, int]) -> dict[str, Any]:
    cells = {(s, c): Cell() for c in args.concurrency for s in SERIES}
    async with grpc.aio.insecure_channel(address) as channel:
        stub = gateway_pb2_grpc.ToolGatewayServiceStub(channel)  # type: ignore[no-untyped-call]

        def confirm(token: str) -> Callable[[], Awaitable[bool]]:
            async def call() -> bool:
                request = gateway_pb2.ConfirmRequest(context=ctx(uuid.uuid4().hex), token=token)
                action = (await stub.Confirm(request, timeout=10)).action
                return bool(action.state == common_pb2.ACTION_STATE_SUCCEEDED)

            return call

        def read(tool: str) -> Callable[[], Awaitable[bool]]:
            async def call() -> bool:
                request = gateway_pb2.InvokeRequest(
                    context=ctx(uuid.uuid4().hex, "reader"), tool_name=tool, arguments_json="{}"
                )
                return bool((await stub.Invoke(request, timeout=10)).WhichOneof("outcome") == "result")

            return call

        # warm-up: both adapters' connections (and the MCP session) open, the code paths run once
        for series in SERIES:
            warm = Cell()
            if series.startswith("confirm"):
                batch = [confirm(t) for t in await issue(stub, TOOL[series], 20)]
            else:
                batch = [read(TOOL[series]) for _ in range(20)]
            await measure(warm, batch, 1, pids)
            if warm.errors:
                raise RuntimeError(f"{series} does not work: {warm.first_error}")
        per_slice = max(1, args.calls // args.rounds)
        for round_ in range(args.rounds):
            for concurrency in args.concurrency:
                for series in SERIES if round_ % 2 == 0 else tuple(reversed(SERIES)):
                    if series.startswith("confirm"):
                        batch = [confirm(t) for t in await issue(stub, TOOL[series], per_slice)]
                    else:
                        batch = [read(TOOL[series]) for _ in range(per_slice)]
                    await measure(cells[(series, concurrency)], batch, concurrency, pids)
    return {f"{s} c={c}": cells[(s, c)].row(s) for c in args.concurrency for s in SERIES}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=400, help="calls per series and concurrency (all rounds)")
    parser.add_argument("--rounds", type=int, default=4, help="interleaved slices")
    parser.add_argument("--concurrency", type=lambda v: [int(x) for x in v.split(",")], default=[1, 8])
    args = parser.parse_args()
    work = processes.workdir("countersign-bench-mcp-")
    procs: list[processes.Proc] = []
    try:
        redis = processes.start_redis(work)
        procs.append(redis)
        todo = processes.start_todo_service(work)
        procs.append(todo)
        mcp = processes.start_mcp_todo(work)
        procs.append(mcp)
        registry = write_both_registry(work, todo.info["url"], mcp.info["url"])
        sidecar = processes.start_sidecar(
            work,
            registry,
            redis_url=redis.info["url"],
            keys=processes.write_keys(work),
            flags=["--log-level", "warning", "--downstream-deadline", "5s"],
        )
        procs.append(sidecar)
        pids = {"sidecar": sidecar.pid, "todo": todo.pid, "mcp": mcp.pid}
        load = os.getloadavg()
        rows = asyncio.run(run(args, str(sidecar.info["grpc"]), pids))
    finally:
        for proc in reversed(procs):
            proc.stop()
        shutil.rmtree(work, ignore_errors=True)
    print(f"{'series':<18}{'calls':>7}{'err':>5}{'p50 ms':>9}{'p99 ms':>9}{'sidecar cpu/call':>18}{'server':>17}")
    for name, row in rows.items():
        print(
            f"{name:<18}{row['calls']:>7}{row['errors']:>5}{row['p50_ms']:>9.2f}{row['p99_ms']:>9.2f}"
            f"{row['sidecar_cpu_ms_per_call']:>16.2f}ms{row['downstream_cpu_ms_per_call']:>15.2f}ms"
        )
        if row["first_error"]:
            print(f"    first error: {row['first_error']}")
    for c in args.concurrency:
        http, via = rows[f"confirm-http c={c}"], rows[f"confirm-mcp c={c}"]
        extra_cpu = via["sidecar_cpu_ms_per_call"] - http["sidecar_cpu_ms_per_call"]
        print(
            f"c={c}: an MCP-backed write costs {via['p50_ms'] - http['p50_ms']:+.2f} ms p50, "
            f"{via['p99_ms'] - http['p99_ms']:+.2f} ms p99 and {extra_cpu:+.2f} ms of sidecar CPU per call "
            "against an HTTP-backed one"
        )
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"mcp_adapter-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}.json"
    out.write_text(
        json.dumps(
            {
                "args": vars(args),
                "git_head": head,
                "python": platform.python_version(),
                "cpus": os.cpu_count(),
                "load_before": load,
                "load_after": os.getloadavg(),
                "rows": rows,
            },
            indent=2,
        )
    )
    print(f"load {load[0]:.2f} → {os.getloadavg()[0]:.2f}; wrote {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
