"""The HTTP front doors' side: uvicorn on a socket bound here (port 0 works, the address is known), the guard that
keeps the MCP endpoint in the handshake era (docs/mcp-front-door.md), and the gRPC listener's --tls-allowed-peers
check on every request (AllowedPeers, from the client certificate ClientCertificate hands to the app)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import ssl
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import mcp_types as types
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from countersign.errors import CountersignError, PermissionDenied, SettingsError
from countersign.sidecar.identity import Identity, certificate_names

log = logging.getLogger("countersign.mcp")


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


def jsonrpc_refusal(error: CountersignError) -> dict[str, Any]:
    """A refusal before the MCP session as a JSON-RPC error (an SDK client raises it with its message and data)."""
    return {
        "jsonrpc": "2.0",
        "id": None,
        "error": {
            "code": types.INVALID_REQUEST,
            "message": f"{error.reason}: {error.message}",
            "data": {"reason": error.reason},
        },
    }


class AllowedPeers:
    """--tls-allowed-peers on an HTTP front door, as the gRPC server checks it on every RPC: a request whose client
    certificate (the ASGI TLS extension's client_cert_chain) names none of the allowed peers is answered 403 with
    ``body(refusal)`` before the app sees it, so nothing runs and nothing is recorded."""

    def __init__(
        self, app: ASGIApp, identity: Identity, body: Callable[[CountersignError], dict[str, Any]], door: str
    ) -> None:
        self.app, self.identity, self.body, self.door = app, identity, body, door

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            chain = scope.get("extensions", {}).get("tls", {}).get("client_cert_chain") or ()
            try:
                self.identity.check_names(certificate_names(chain[0]) if chain else set())
            except PermissionDenied as refused:
                log.info(
                    "refused",
                    extra={"event": "refused", "transport": self.door, "reason": refused.reason, "code": "403"},
                )
                await JSONResponse(self.body(refused), status_code=403)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def client_certificate_protocol() -> type[Any]:
    """uvicorn's HTTP/1.1 protocol, handing each connection's client certificate to the app as the ASGI TLS
    extension (``scope["extensions"]["tls"]["client_cert_chain"]``, PEM), which uvicorn does not fill itself.
    The TLS handshake has completed when connection_made is called, so the certificate is known then."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class ClientCertificate(H11Protocol):
        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            ssl_object = transport.get_extra_info("ssl_object")
            der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
            chain = [ssl.DER_cert_to_PEM_cert(der)] if der else []
            self.app = _WithClientCertificate(self.app, chain)

    return ClientCertificate


class _WithClientCertificate:
    """One connection's app: the app, with the connection's client certificate in every request's scope."""

    def __init__(self, app: Any, chain: list[str]) -> None:
        self.app, self.chain = app, chain

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            scope.setdefault("extensions", {})["tls"] = {"client_cert_chain": self.chain}
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


async def listen(
    app: ASGIApp, host: str, port: int, *, ssl: Mapping[str, Any] | None = None, flag: str = "mcp-listen"
) -> HttpListener:
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
        raise SettingsError(f"--{flag}: cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    sock.listen(128)
    sock.setblocking(False)
    _Uvicorn = _uvicorn_server()
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on", **(ssl or {}))
    server = _Uvicorn(config)
    task = asyncio.ensure_future(server.serve(sockets=[sock]))
    while not server.started:
        if task.done():
            task.result()  # raises what stopped it
            raise OSError(f"--{flag} {host}:{port} stopped at start")
        await asyncio.sleep(0.01)
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if family == socket.AF_INET6 else host
    return HttpListener(f"{shown}:{bound}", server, task)
