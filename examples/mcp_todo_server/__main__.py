"""``python -m examples.mcp_todo_server --host 127.0.0.1 --port 0 [--db PATH] [--json-response]``

Binds, prints one JSON line ``{"event": "listening", "port": N, "url": "http://127.0.0.1:N/mcp"}`` to stdout and
serves until SIGTERM/SIGINT, then exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import sys

import uvicorn

from examples.todo_service.store import TodoStore

from .app import make_app


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m examples.mcp_todo_server", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="HTTP port (0 = any free port)")
    parser.add_argument("--db", default=":memory:", help="SQLite database path (default in-memory)")
    parser.add_argument("--json-response", action="store_true", help="answer JSON instead of an SSE stream")
    return parser.parse_args(argv)


async def serve(args: argparse.Namespace) -> None:
    store = TodoStore(args.db)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # asyncio turns Nagle off only for sockets made with proto IPPROTO_TCP; the accepted ones inherit this. Without
    # it an SSE answer's event waits for the ACK of its head (a delayed ACK: ~40 ms) on a reused connection
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind((args.host, args.port))
    sock.listen(128)  # connections wait in the backlog until the server accepts: "listening" is true at once
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        make_app(store, json_response=args.json_response), log_level="warning", timeout_graceful_shutdown=1
    )
    server = uvicorn.Server(config)  # handles SIGTERM and SIGINT: a graceful stop
    sys.stdout.write(json.dumps({"event": "listening", "port": port, "url": f"http://{args.host}:{port}/mcp"}) + "\n")
    sys.stdout.flush()
    try:
        await server.serve(sockets=[sock])
    finally:
        store.close()


def main(argv: list[str] | None = None) -> int:
    asyncio.run(serve(_parse_args(argv)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
