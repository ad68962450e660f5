"""The MCP front door against the gRPC path, in the same run: a read and a write, closed loop, concurrency 1.

    .venv/bin/python bench/mcp_front.py [--calls 200] [--rounds 3]

One redis-server, the example todo service and one sidecar (--mcp-listen) as processes (stopped by PID). Each
round runs four series back to back (the order flips each round, so a busy machine hurts both transports alike):

    grpc read    Invoke(list_todos)
    mcp read     tools/call list_todos (the official Python SDK client, one session, Streamable HTTP)
    grpc write   Invoke(create_todo) then Confirm of its card (claim, the downstream call, settle)
    mcp write    tools/call create_todo: the card, a form elicitation the client accepts, the confirm, the receipt

A fresh turn and title per write. Prints p50/p99 latency as the caller sees it and the sidecar's CPU per call
(from /proc), and writes bench/results/mcp_front-<time>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc

from countersign.testing import processes
from countersign.testing.calls import ctx
from countersign.testing.mcp_front import Elicitations, client
from countersign.testing.stack import start_stack
from countersign.v1 import gateway_pb2, gateway_pb2_grpc

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
CLK_TCK = os.sysconf("SC_CLK_TCK")


def turn_meta() -> Any:  # RequestParamsMeta (a TypedDict open to extension keys)
    return {"io.countersign/turn": "m-" + uuid.uuid4().hex}


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


async def series(name: str, calls: int, pid: int, one: Callable[[int], Awaitable[None]]) -> dict[str, Any]:
    for i in range(5):  # warm up
        await one(-1 - i)
    times = []
    cpu0 = cpu_seconds(pid)
    for i in range(calls):
        start = time.perf_counter()
        await one(i)
        times.append(time.perf_counter() - start)
    cpu = cpu_seconds(pid) - cpu0
    times.sort()
    return {
        "series": name,
        "calls": calls,
        "p50_ms": round(statistics.median(times) * 1000, 2),
        "p99_ms": round(times[min(len(times) - 1, int(len(times) * 0.99))] * 1000, 2),
        "sidecar_cpu_ms_per_call": round(cpu / calls * 1000, 2),
    }


async def run(calls: int, rounds: int) -> list[dict[str, Any]]:
    work = processes.workdir("bench-mcp-")
    stacks = start_stack(work, ["--mcp-listen", "127.0.0.1:0"])
    stack = next(stacks)
    try:
        pid = stack.sidecar.pid
        channel = grpc.aio.insecure_channel(stack.address)
        stub = gateway_pb2_grpc.ToolGatewayServiceStub(channel)  # type: ignore[no-untyped-call]
        context = ctx(session_id="s-mcp", locale="en")

        async def grpc_read(i: int) -> None:
            answer = await stub.Invoke(gateway_pb2.InvokeRequest(context=context, tool_name="list_todos"))
            assert answer.WhichOneof("outcome") == "result"

        async def grpc_write(i: int) -> None:
            turn = ctx(session_id="s-mcp", locale="en", request_id="g-" + uuid.uuid4().hex)
            args = json.dumps({"title": "bench " + uuid.uuid4().hex[:10]})
            card = await stub.Invoke(
                gateway_pb2.InvokeRequest(context=turn, tool_name="create_todo", arguments_json=args)
            )
            done = await stub.Confirm(gateway_pb2.ConfirmRequest(context=turn, token=card.confirmation.token))
            assert done.action.receipt.resource_id

        results: list[dict[str, Any]] = []
        async with client(str(stack.sidecar.info["mcp"]), elicit=Elicitations("accept")) as mcp:

            async def mcp_read(i: int) -> None:
                answer = await mcp.call_tool("list_todos", {})
                assert not answer.is_error

            async def mcp_write(i: int) -> None:
                answer = await mcp.call_tool(
                    "create_todo",
                    {"title": "bench " + uuid.uuid4().hex[:10]},
                    meta=turn_meta(),
                )
                assert answer.structured_content["state"] == "SUCCEEDED", answer

            plan = [
                ("grpc read", grpc_read),
                ("mcp read", mcp_read),
                ("grpc write", grpc_write),
                ("mcp write", mcp_write),
            ]
            for r in range(rounds):
                for name, one in plan if r % 2 == 0 else plan[::-1]:
                    out = await series(name, calls, pid, one)
                    out["round"] = r
                    results.append(out)
                    print(json.dumps(out), flush=True)
        await channel.close(None)
        return results
    finally:
        next(stacks, None)  # the generator stops every process it started


def summary(results: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    by: dict[str, dict[str, float]] = {}
    for name in ("grpc read", "mcp read", "grpc write", "mcp write"):
        rows = [r for r in results if r["series"] == name]
        by[name] = {
            k: round(statistics.median(r[k] for r in rows), 2) for k in ("p50_ms", "p99_ms", "sidecar_cpu_ms_per_call")
        }
    return by


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    results = asyncio.run(run(args.calls, args.rounds))
    medians = summary(results)
    for name, row in medians.items():
        cpu = row["sidecar_cpu_ms_per_call"]
        print(f"{name:11s} p50 {row['p50_ms']:7.2f} ms  p99 {row['p99_ms']:7.2f} ms  sidecar CPU {cpu:.2f} ms/call")
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"mcp_front-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}.json"
    out.write_text(
        json.dumps({"calls": args.calls, "rounds": args.rounds, "medians": medians, "series": results}, indent=1)
    )
    print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
