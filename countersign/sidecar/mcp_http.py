"""The MCP front door's HTTP side: uvicorn on a socket bound here (port 0 works, the address is known), and the
guard that keeps the endpoint in the handshake era (docs/mcp-front-door.md)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import mcp_types as types
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.types import ASGIApp, Receive, Scope, Send

from countersign.errors import SettingsError


class HandshakeOnly:
    """Answers a request of the 2026-07-28 era (MCP-Protocol-Version not a handshake version) with a JSON-RPC
    error, so a client in auto mode falls back to the initialize handshake this server serves."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            version = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"mcp-protocol-version"), None)
            if version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS:
                body = json.dumps(
                    {
                        "jsonrpc": "2.0",
                        "id": None,
                        "error": {
                            "code": types.INVALID_REQUEST,
                            "message": f"protocol version {version[:32]!r} is not served: use the initialize "
                            f"handshake ({', '.join(HANDSHAKE_PROTOCOL_VERSIONS)})",
                        },
                    }
                ).encode()
                await send(
                    {
                        "type": "http.response.start",
                        "status": 400,
                        "headers": [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


@dataclass
class HttpListener:
    """The MCP endpoint's HTTP server (uvicorn on a socket bound here: port 0 works, the address is known)."""

    address: str
    server: Any
    task: asyncio.Task[Any]

    async def stop(self, grace: float) -> None:
        self.server.should_exit = True
        try:
            await asyncio.wait_for(asyncio.shield(self.task), grace)
        except TimeoutError:
            self.server.force_exit = True
            await asyncio.wait([self.task], timeout=1.0)


def _uvicorn_server() -> type[Any]:
    import uvicorn

    class Quiet(uvicorn.Server):
        """uvicorn without its signal handlers: the sidecar owns SIGTERM/SIGINT and stops this server itself."""

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    return Quiet


async def listen(app: ASGIApp, host: str, port: int, *, ssl: Mapping[str, Any] | None = None) -> HttpListener:
    """Serve ``app`` on host:port; a port that cannot be bound is a SettingsError, before the sidecar says it
    listens."""
    import uvicorn

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise SettingsError(f"--mcp-listen: cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    sock.listen(128)
    sock.setblocking(False)
    _Uvicorn = _uvicorn_server()
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on", **(ssl or {}))
    server = _Uvicorn(config)
    task = asyncio.ensure_future(server.serve(sockets=[sock]))
    while not server.started:
        if task.done():
            task.result()  # raises what stopped it
            raise OSError(f"the MCP endpoint on {host}:{port} stopped at start")
        await asyncio.sleep(0.01)
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if family == socket.AF_INET6 else host
    return HttpListener(f"{shown}:{bound}", server, task)
