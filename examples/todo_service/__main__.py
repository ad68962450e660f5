"""``python -m examples.todo_service --host 127.0.0.1 --port 0 [--db PATH] [--grpc-port 0] [--tls-cert C --tls-key K
[--tls-client-ca CA]]``

Binds, prints one JSON line ``{"event": "listening", "port": N[, "grpc_port": M]}`` to stdout and serves
until SIGTERM/SIGINT, then exits 0. With --tls-cert/--tls-key, HTTP and gRPC are served over TLS only (https://);
with --tls-client-ca, a client certificate signed by it is required.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import ssl
import sys
from datetime import datetime
from pathlib import Path

import grpc
from aiohttp import web

from .app import ServiceControls, make_app
from .due import SERVICE_TZ, Clock
from .store import TodoStore


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m examples.todo_service", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="HTTP port (0 = any free port)")
    parser.add_argument("--db", default=":memory:", help="SQLite database path (default in-memory)")
    parser.add_argument("--grpc-port", type=int, default=None, help="also serve ToolBackendService on this port")
    parser.add_argument("--now", default=None, help="freeze the clock at this ISO-8601 time (for tests)")
    parser.add_argument("--tls-cert", default="", help="serve over TLS with this certificate chain (PEM)")
    parser.add_argument("--tls-key", default="", help="... and its private key (PEM)")
    parser.add_argument("--tls-client-ca", default="", help="require client certificates signed by this CA (PEM)")
    return parser.parse_args(argv)


def _tls(args: argparse.Namespace) -> tuple[ssl.SSLContext | None, grpc.ServerCredentials | None]:
    if not args.tls_cert:
        return None, None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(args.tls_cert, args.tls_key)
    client_ca = None
    if args.tls_client_ca:
        context.load_verify_locations(args.tls_client_ca)
        context.verify_mode = ssl.CERT_REQUIRED
        client_ca = Path(args.tls_client_ca).read_bytes()
    pair = (Path(args.tls_key).read_bytes(), Path(args.tls_cert).read_bytes())
    return context, grpc.ssl_server_credentials(
        [pair], root_certificates=client_ca, require_client_auth=bool(client_ca)
    )


def _fixed_clock(text: str) -> Clock:
    frozen = datetime.fromisoformat(text)
    if frozen.tzinfo is None:
        frozen = frozen.replace(tzinfo=SERVICE_TZ)
    return lambda: frozen


async def serve(args: argparse.Namespace) -> None:
    store = TodoStore(args.db, clock=_fixed_clock(args.now) if args.now else None)
    controls = ServiceControls()
    runner = web.AppRunner(make_app(store, controls=controls), access_log=None, shutdown_timeout=0.25)
    await runner.setup()
    context, credentials = _tls(args)
    site = web.TCPSite(runner, args.host, args.port, ssl_context=context)
    await site.start()
    port = int(runner.addresses[0][1])
    listening: dict[str, object] = {"event": "listening", "port": port}
    grpc_server = None
    if args.grpc_port is not None:
        from .grpc_backend import start_grpc_server

        grpc_server, grpc_port = await start_grpc_server(
            store, controls, host=args.host, port=args.grpc_port, credentials=credentials
        )
        listening["grpc_port"] = grpc_port

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    sys.stdout.write(json.dumps(listening) + "\n")
    sys.stdout.flush()
    try:
        await stop.wait()
    finally:
        if grpc_server is not None:
            await grpc_server.stop(grace=0.5)
        await runner.cleanup()
        store.close()


def main(argv: list[str] | None = None) -> int:
    asyncio.run(serve(_parse_args(argv)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
