"""CPU per read Invoke in instructions: the sidecar's read against the bare gRPC hop (and, with --base, another tree).

    .venv/bin/python bench/read_ir.py [--reads 300] [--rounds 2] [--base /tmp/base]

The sidecar (as bench/write_path.py runs it: metrics on, no span exporter; --tenant-quota 10000000 so every read
stays on the quota's batched path), bench/reference_server.py's Read (one GET, its body passed back: the bare
hop) and, with --base, the sidecar of another source tree, each under valgrind's callgrind (bench/counted.py), on
one Redis and one todo service. Each window: --reads calls one after another (c=1, bench/write_path.py's read
series: Invoke(list_todos) as a subject with no todos), counted from a zero of the counters to a dump --settle s
after the last answer (the quota's batch and other background work of those reads included). Windows interleave,
the order flipping each round. Prints instructions per call by each of counted.MEASURES; writes
bench/results/read-ir-<UTC>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
import uuid
from pathlib import Path

import counted
import grpc
from read_gap import FLAGS, READ_METHOD, READER
from telemetry import sidecar_cmd

from countersign.testing import processes
from countersign.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"


def request() -> gateway_pb2.InvokeRequest:
    context = common_pb2.CallContext(
        tenant_id="bench-tenant",
        actor_id=READER,
        subject_id=READER,
        session_id="bench-session",
        request_id=uuid.uuid4().hex,
        role="user",
        locale="en",
    )
    return gateway_pb2.InvokeRequest(context=context, tool_name="list_todos", arguments_json='{"status": "done"}')


async def reads(address: str, count: int, reference: bool) -> None:
    async with grpc.aio.insecure_channel(address) as channel:
        if reference:
            call = channel.unary_unary(
                READ_METHOD,
                request_serializer=gateway_pb2.InvokeRequest.SerializeToString,
                response_deserializer=gateway_pb2.InvokeResponse.FromString,
            )
        else:
            call = gateway_pb2_grpc.ToolGatewayServiceStub(channel).Invoke
        for _ in range(count):
            reply = await call(request())
            if reply.WhichOneof("outcome") != "result":
                raise RuntimeError(f"a read did not answer with a result: {str(reply)[:200]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reads", type=int, default=300, help="calls per counted window")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--settle", type=float, default=0.5)
    parser.add_argument("--base", type=Path, help="another source tree: its sidecar is counted too ('base')")
    args = parser.parse_args(argv)
    work = processes.workdir("countersign-read-ir-")
    procs: list[processes.Proc] = []
    load_start = os.getloadavg()
    try:
        redis, todo, registry, keys = processes.start_backends(work)
        procs += [redis, todo]
        os.environ["PYTHONHASHSEED"] = "0"
        servers: dict[str, tuple[processes.Proc, Path, bool]] = {}
        cmd = sidecar_cmd(registry, redis.info["url"], keys, FLAGS)
        proc, out = counted.start(cmd, work, "sidecar")
        procs.append(proc)
        servers["this"] = (proc, out, False)
        if args.base:
            base = str(args.base.resolve())
            boot = (
                f"import sys; sys.path.insert(0, {base!r}); from countersign.sidecar import cli; sys.exit(cli.main())"
            )
            proc, out = counted.start([sys.executable, "-c", boot, *cmd[3:]], work, "base")
            procs.append(proc)
            servers["base"] = (proc, out, False)
        ref = [sys.executable, str(ROOT / "bench" / "reference_server.py")]
        proc, out = counted.start([*ref, "--redis-url", redis.info["url"], "--todo-url", todo.info["url"]], work, "ref")
        procs.append(proc)
        servers["reference"] = (proc, out, True)
        for proc, _, is_ref in servers.values():
            asyncio.run(reads(proc.info["grpc"], args.warmup, is_ref))
            counted.instrument(proc.pid)
        print(
            f"read Invoke vs the bare hop, instructions (callgrind): {args.reads} reads at c=1 per window", flush=True
        )
        per: dict[str, dict[str, list[float]]] = {m: {name: [] for name in servers} for m in counted.MEASURES}
        names = list(servers)
        for n in range(args.rounds):
            for name in names if n % 2 == 0 else names[::-1]:
                proc, out, is_ref = servers[name]
                counted.zero(proc.pid)
                asyncio.run(reads(proc.info["grpc"], args.reads, is_ref))
                time.sleep(args.settle)
                window = counted.measures(counted.dump(proc.pid, out))
                for measure, total in window.items():
                    per[measure][name].append(total / args.reads)
                print(
                    f"  round {n + 1} {name:<9} " + ", ".join(f"{m} {v / args.reads:,.0f}" for m, v in window.items()),
                    flush=True,
                )
        print(f"\n{'measure':<25}" + "".join(f"{name:>14}" for name in names))
        means = {m: {name: sum(v) / len(v) for name, v in row.items()} for m, row in per.items()}
        for m, row in means.items():
            print(f"{m:<25}" + "".join(f"{row[name]:>14,.0f}" for name in names))
        load_end = os.getloadavg()
        print(f"loadavg at start {[round(x, 2) for x in load_start]}, at end {[round(x, 2) for x in load_end]}")
        RESULTS.mkdir(parents=True, exist_ok=True)
        path = RESULTS / f"read-ir-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
        summary = {
            "command": " ".join([Path(sys.executable).name, *sys.argv]),
            "instructions_per_read": per,
            "means": means,
            "reads_per_window": args.reads,
            "loadavg_start": load_start,
            "loadavg_end": load_end,
        }
        path.write_text(json.dumps(summary, indent=1) + "\n")
        print(f"results: {path.relative_to(ROOT)}")
        return 0
    finally:
        for proc in reversed(procs):
            proc.stop(timeout=60)


if __name__ == "__main__":
    sys.exit(main())
