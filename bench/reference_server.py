"""The ceiling for a Python sidecar's Confirm on this machine: the same I/O, none of the logic.

``python bench/reference_server.py --redis-url unix:///path/redis.sock --todo-url http://127.0.0.1:PORT``

A bare grpc.aio server with one unary method, ``/countersign.bench.Reference/Confirm`` (request and
response are the real ``ConfirmRequest`` / ``ConfirmResponse`` messages, so the bytes on the wire match
the sidecar's). Each call does exactly the round trips a won Confirm does:

1. one EVALSHA of a tiny "claim" script (HSET + PEXPIRE on one key),
2. one HTTP POST /todos with a fresh ``Idempotency-Key`` (pooled aiohttp session),
3. one EVALSHA of a tiny "settle" script (HSET + PEXPIRE),

and nothing else: no policy, no MAC, no card or outcome record, no metrics.

A second method, ``/countersign.bench.Reference/Read`` (``InvokeRequest`` in, ``InvokeResponse`` out, as the
sidecar's Invoke), is the bare gRPC hop of a read: one HTTP GET /todos?status=done as the request's subject
(the header bench/write_path.py's direct GET sends), its body passed back as ``result_json`` without decoding,
and nothing else: no policy, no quota, no turn fact in Redis. What a read Invoke costs over a direct GET beyond
this is the sidecar's own. Prints one JSON line
``{"event": "listening", "grpc": "127.0.0.1:N"}`` on stdout when ready; stops on SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
from typing import Any

import aiohttp
import grpc
import redis.asyncio as aioredis

from countersign.v1 import common_pb2, gateway_pb2

SERVICE = "countersign.bench.Reference"
METHOD = f"/{SERVICE}/Confirm"
READ_METHOD = f"/{SERVICE}/Read"

CLAIM = """
redis.call('HSET', KEYS[1], 'st', 'running', 'claim', ARGV[1], 'lease', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return {'won'}
"""
SETTLE = """
redis.call('HSET', KEYS[1], 'st', 'settled', 'out', ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {'ok'}
"""


class Reference:
    def __init__(self, redis_url: str, todo_url: str) -> None:
        self.redis = aioredis.Redis.from_url(
            redis_url, decode_responses=False, max_connections=256, health_check_interval=0
        )
        self.claim = self.redis.register_script(CLAIM)
        self.settle = self.redis.register_script(SETTLE)
        self.url = todo_url.rstrip("/") + "/todos"
        self.session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        connector = aiohttp.TCPConnector(limit=128, keepalive_timeout=30)
        self.session = aiohttp.ClientSession(connector=connector, raise_for_status=False)

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()
        await self.redis.aclose()

    async def confirm(self, request: gateway_pb2.ConfirmRequest, context: Any) -> gateway_pb2.ConfirmResponse:
        assert self.session is not None
        action_id = os.urandom(16).hex()
        key = f"ref:{{{action_id}}}:run"
        await self.claim(keys=[key], args=[os.urandom(12).hex(), 30000, 86400000])
        async with self.session.post(
            self.url, json={"title": request.token or "bench"}, headers={"Idempotency-Key": f'"{action_id}"'}
        ) as resp:
            body = await resp.read()
            status = resp.status
        await self.settle(keys=[key], args=[body, 86400000])
        state = common_pb2.ACTION_STATE_SUCCEEDED if 200 <= status < 300 else common_pb2.ACTION_STATE_FAILED
        return gateway_pb2.ConfirmResponse(action=common_pb2.Action(action_id=action_id, state=state))

    async def read(self, request: gateway_pb2.InvokeRequest, context: Any) -> gateway_pb2.InvokeResponse:
        assert self.session is not None
        headers = {"X-Countersign-Subject": request.context.subject_id}
        async with self.session.get(self.url, params={"status": "done"}, headers=headers) as resp:
            body = await resp.read()
            status = resp.status
        if status != 200:
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"GET /todos answered {status}")
        return gateway_pb2.InvokeResponse(
            result=gateway_pb2.ToolResult(tool_name=request.tool_name, result_json=body.decode())
        )


async def serve(args: argparse.Namespace) -> None:
    ref = Reference(args.redis_url, args.todo_url)
    await ref.start()
    handlers = {
        "Confirm": grpc.unary_unary_rpc_method_handler(
            ref.confirm,
            request_deserializer=gateway_pb2.ConfirmRequest.FromString,
            response_serializer=gateway_pb2.ConfirmResponse.SerializeToString,
        ),
        "Read": grpc.unary_unary_rpc_method_handler(
            ref.read,
            request_deserializer=gateway_pb2.InvokeRequest.FromString,
            response_serializer=gateway_pb2.InvokeResponse.SerializeToString,
        ),
    }
    server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    host, _, port = args.listen.rpartition(":")
    bound = server.add_insecure_port(f"{host}:{port}")
    await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(json.dumps({"event": "listening", "grpc": f"{host}:{bound}"}), flush=True)
    try:
        await stop.wait()
    finally:
        await server.stop(1.0)
        await ref.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--redis-url", required=True, help="unix:///path/to/redis.sock (as the sidecar uses)")
    parser.add_argument("--todo-url", required=True, help="base URL of the example todo service")
    parser.add_argument("--listen", default="127.0.0.1:0")
    asyncio.run(serve(parser.parse_args(argv)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
