"""``python -m examples.approval_service --host 127.0.0.1 --port 0 [--key-file PATH] [--inbox URL]``

The example app backend that shows a card to the signed-in user and signs their approval with its own
Ed25519 key. Binds, prints one JSON line ``{"event": "listening", "port": N, "url": ..., "issuer": ...,
"jwks_url": ..., "kid": ...}`` to stdout and serves until SIGTERM/SIGINT, then exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from pathlib import Path

from aiohttp import web

from .app import make_app
from .signing import Signer


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m examples.approval_service", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="HTTP port (0 = any free port)")
    parser.add_argument("--issuer", default="", help="the iss claim (default: this service's URL)")
    parser.add_argument("--audience", default="countersign", help="the aud claim: the sidecar, as we name it")
    parser.add_argument("--key-file", type=Path, default=None, help="Ed25519 PEM; created when absent")
    parser.add_argument("--ttl", type=int, default=120, help="seconds an approval is valid")
    parser.add_argument("--inbox", default="", help="also POST each approval to this URL")
    return parser.parse_args(argv)


async def serve(args: argparse.Namespace) -> None:
    key = Signer.load_or_create(args.key_file)
    signer = Signer(key, issuer=args.issuer or "pending", audience=args.audience, ttl=args.ttl)
    runner = web.AppRunner(make_app(signer, inbox=args.inbox), access_log=None, shutdown_timeout=0.25)
    await runner.setup()
    site = web.TCPSite(runner, args.host, args.port)
    await site.start()
    port = int(runner.addresses[0][1])
    url = f"http://{args.host}:{port}"
    signer.issuer = args.issuer or url  # known only once bound
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    listening = {
        "event": "listening",
        "port": port,
        "url": url,
        "issuer": signer.issuer,
        "jwks_url": f"{url}/.well-known/jwks.json",
        "kid": signer.kid,
    }
    sys.stdout.write(json.dumps(listening) + "\n")
    sys.stdout.flush()
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


def main(argv: list[str] | None = None) -> int:
    asyncio.run(serve(_parse_args(argv)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
