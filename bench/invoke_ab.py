"""A/B of the write path: the sidecar of this tree against the sidecar of another tree (e.g. main), side by side.

    .venv/bin/python bench/invoke_ab.py --base /tmp/base [--rounds 6] [--seconds 3] [--rpc RPC]

--rpc invoke (default): Invoke(create_todo); pair: Invoke, then Confirm of its card (claim, the downstream call,
settle); replay: Confirm of a card that settled already (the duplicate's path); confirm: Confirm alone, of cards
issued before the timed window (untimed, their background writes given time to land), so the CPU figure is the
Confirm's own (its audit events included, whenever and however they are written); read: Invoke(list_todos) as a
subject that owns no todos (write_path.py's read series).

Get the other tree without touching any checkout: `mkdir /tmp/base && git archive main | tar -x -C /tmp/base`.
One redis-server and one example todo service serve both sidecars (each started from its own tree, stopped by PID);
closed-loop Invoke(create_todo) with a fresh turn and title per call, at concurrency 1 and 16, the two sidecars
interleaved round by round (the order flips each round) so a busy machine hurts both alike. Prints throughput,
p50/p99 and the sidecar's CPU per call (from /proc).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import grpc

from countersign.testing import processes
from countersign.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc

ROOT = Path(__file__).resolve().parent.parent
CARDS_PER_SECOND = 1000  # --rpc confirm: cards issued before each timed window, per second of it

CLK_TCK = os.sysconf("SC_CLK_TCK")


def start(root: Path, work: Path, registry: Path, redis_url: str, keys: Path) -> tuple[subprocess.Popen[bytes], str]:
    env = dict(os.environ, PYTHONPATH=str(root), PYTHONUNBUFFERED="1")
    log = open(work / f"sidecar-{root.name}.log", "wb")  # noqa: SIM115 - closed with the process
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "countersign.sidecar.cli",
            "serve",
            "--registry",
            str(registry),
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "",
            "--redis-url",
            redis_url,
            "--keys-file",
            str(keys),
            "--log-level",
            "warning",
            "--tenant-quota",
            "10000000",  # --rpc confirm issues thousands of cards per cell for one tenant
        ],
        cwd=root,
        env=env,
        stdout=subprocess.PIPE,
        stderr=log,
    )
    assert proc.stdout is not None
    return proc, json.loads(proc.stdout.readline())["grpc"]


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def _context() -> common_pb2.CallContext:
    return common_pb2.CallContext(
        tenant_id="bench",
        actor_id="a",
        subject_id="a",
        session_id="s",
        request_id=uuid.uuid4().hex,
        role="user",
        locale="en",
    )


async def _invoke(stub: gateway_pb2_grpc.ToolGatewayServiceStub) -> gateway_pb2.InvokeResponse:
    return await stub.Invoke(
        gateway_pb2.InvokeRequest(
            context=_context(), tool_name="create_todo", arguments_json=json.dumps({"title": uuid.uuid4().hex})
        )
    )


def _read() -> gateway_pb2.InvokeRequest:
    context = _context()
    context.actor_id = context.subject_id = "bench-reader"  # owns no todos: every answer is the same small one
    return gateway_pb2.InvokeRequest(context=context, tool_name="list_todos", arguments_json='{"status": "done"}')


async def cards(address: str, count: int) -> list[str]:
    """``count`` fresh cards' tokens (16 Invokes at a time), then a pause for what the sidecar writes after them."""
    tokens: list[str] = []
    async with grpc.aio.insecure_channel(address) as channel:
        stub = gateway_pb2_grpc.ToolGatewayServiceStub(channel)

        async def worker(n: int) -> None:
            for _ in range(n):
                tokens.append((await _invoke(stub)).confirmation.token)

        await asyncio.gather(*(worker(count // 16 + 1) for _ in range(16)))
    await asyncio.sleep(0.5)
    return tokens


async def load(
    address: str, concurrency: int, seconds: float, rpc: str = "invoke", tokens: list[str] | None = None
) -> list[int]:
    latencies: list[int] = []
    async with grpc.aio.insecure_channel(address) as channel:
        stub = gateway_pb2_grpc.ToolGatewayServiceStub(channel)

        async def worker() -> None:
            settled = ""
            if rpc == "replay":  # one settled card per worker, confirmed again and again
                settled = (await _invoke(stub)).confirmation.token
                await stub.Confirm(gateway_pb2.ConfirmRequest(context=_context(), token=settled))
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                start_ns = time.perf_counter_ns()
                if rpc == "confirm":
                    if not tokens:  # out of prepared cards: the cell ends early (its throughput counts its own time)
                        return
                    await stub.Confirm(gateway_pb2.ConfirmRequest(context=_context(), token=tokens.pop()))
                elif rpc == "replay":
                    await stub.Confirm(gateway_pb2.ConfirmRequest(context=_context(), token=settled))
                elif rpc == "read":
                    await stub.Invoke(_read())
                else:
                    card = (await _invoke(stub)).confirmation
                    if rpc == "pair":
                        await stub.Confirm(gateway_pb2.ConfirmRequest(context=_context(), token=card.token))
                latencies.append(time.perf_counter_ns() - start_ns)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return latencies


def pct(latencies: list[int], q: float) -> float:
    ordered = sorted(latencies)
    return ordered[max(0, int(q * len(ordered)) - 1)] / 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", required=True, type=Path, help="the other source tree")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=3.0, help="timed seconds per cell and round")
    parser.add_argument("--rpc", choices=("invoke", "pair", "confirm", "replay", "read"), default="invoke")
    args = parser.parse_args()
    work = processes.workdir("countersign-ab-")
    redis, todo, registry, keys = processes.start_backends(work)
    sidecars: dict[str, tuple[subprocess.Popen[bytes], str]] = {}
    try:
        for name, root in (("base", args.base.resolve()), ("this", ROOT)):
            sidecars[name] = start(root, work, registry, redis.info["url"], keys)
        cells: dict[tuple[str, int], tuple[list[int], list[float]]] = {
            (name, c): ([], []) for name in sidecars for c in (1, 16)
        }
        walls = dict.fromkeys(cells, 0.0)
        for n in range(args.rounds):
            for c in (1, 16):
                for name in ("base", "this") if n % 2 == 0 else ("this", "base"):
                    proc, address = sidecars[name]
                    confirm = args.rpc == "confirm"
                    tokens = (
                        asyncio.run(cards(address, int(CARDS_PER_SECOND * (args.seconds + 0.3)))) if confirm else None
                    )
                    asyncio.run(load(address, c, 0.3, args.rpc, tokens))  # warm-up
                    before, started = cpu_s(proc.pid), time.monotonic()
                    latencies = asyncio.run(load(address, c, args.seconds, args.rpc, tokens))
                    walls[(name, c)] += time.monotonic() - started
                    if confirm:
                        time.sleep(0.1)  # a write the sidecar makes after its last Confirm returned is its CPU too
                    cells[(name, c)][0].extend(latencies)
                    cells[(name, c)][1].append(cpu_s(proc.pid) - before)
        print(f"{args.rpc}, {args.rounds} rounds x {args.seconds:g} s per cell; loadavg {os.getloadavg()}")
        for c in (1, 16):
            for name in ("base", "this"):
                latencies, cpu = cells[(name, c)]
                print(
                    f"  {name:<5} c={c:<3} {len(latencies) / walls[(name, c)]:7.1f}/s  "
                    f"p50 {pct(latencies, 0.5):6.2f} ms  p99 {pct(latencies, 0.99):7.2f} ms  "
                    f"sidecar CPU {1000 * sum(cpu) / len(latencies):.3f} ms/call"
                )
    finally:
        for proc, _ in sidecars.values():
            proc.terminate()
            proc.wait(10)
        todo.stop()
        redis.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
