"""How long `countersign audit verify` takes over N settled actions (issue 11, item 14).

    .venv/bin/python bench/audit_verify.py [--actions 2000] [--workers 16]

Starts redis-server, the example todo service and one sidecar as their own processes, settles N writes
through Invoke + Confirm, waits for their events, then runs the real CLI (`audit verify`) three times and
prints the wall time of each and the actions verified per second. Stops every process it started by PID.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
import uuid
from pathlib import Path

import grpc

from countersign.testing import processes
from countersign.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc

ROOT = Path(__file__).resolve().parent.parent


async def settle(address: str, count: int, workers: int) -> None:
    context = dict(tenant_id="t1", actor_id="alice", subject_id="alice", session_id="s1", role="user")
    queue = list(range(count))
    async with grpc.aio.insecure_channel(address) as channel:
        stub = gateway_pb2_grpc.ToolGatewayServiceStub(channel)

        async def worker() -> None:
            while queue:
                i = queue.pop()
                ctx = common_pb2.CallContext(request_id=uuid.uuid4().hex, **context)
                card = (
                    await stub.Invoke(
                        gateway_pb2.InvokeRequest(
                            context=ctx, tool_name="create_todo", arguments_json=json.dumps({"title": f"bench {i}"})
                        )
                    )
                ).confirmation
                await stub.Confirm(gateway_pb2.ConfirmRequest(context=ctx, token=card.token))

        await asyncio.gather(*(worker() for _ in range(workers)))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--actions", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=16)
    args = parser.parse_args()
    work = processes.workdir("audit-verify-")
    redis, todo, registry, keys = processes.start_backends(work)
    sidecar = None
    try:
        sidecar = processes.start_sidecar(
            work, registry, redis_url=redis.info["url"], keys=keys, flags=["--log-level", "warning"]
        )
        start = time.monotonic()
        asyncio.run(settle(sidecar.info["grpc"], args.actions, args.workers))
        print(f"settled {args.actions} actions in {time.monotonic() - start:.1f} s")
        time.sleep(1.0)  # the last events land (audit writes are asynchronous)
        cmd = [
            sys.executable,
            "-m",
            "countersign.sidecar.cli",
            "audit",
            "verify",
            "--redis-url",
            redis.info["url"],
            "--keys-file",
            str(keys),
        ]
        for _ in range(3):
            start = time.monotonic()
            done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=600, check=False)
            took = time.monotonic() - start
            print(
                f"audit verify: {took:.2f} s wall ({args.actions / took:.0f} actions/s, including the CLI's "
                f"start): {done.stdout.strip()}"
            )
            if done.returncode != 0:
                print(done.stderr, file=sys.stderr)
                return 1
        return 0
    finally:
        for proc in (sidecar, todo, redis):
            if proc is not None:
                proc.stop()


if __name__ == "__main__":
    sys.exit(main())
