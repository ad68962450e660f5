"""Faults, for the tests and the benchmarks alike: a controllable TCP proxy and a listener that cuts every
request.

    python -m countersign.testing.faults proxy --target 127.0.0.1:PORT

runs the proxy as its own process: it prints one JSON line ``{"event": "listening", "port": N,
"control": M}`` and forwards every connection to the target until SIGTERM. Commands arrive as JSON
lines on the control port (loopback), one answer line each:

    {"cmd": "mode", "mode": "delay", "seconds": 3, "delay": 1.6}   hold client data that long
    {"cmd": "mode", "mode": "drop_response", "seconds": 1.5}       forward, then reset instead of answering
    {"cmd": "mode", "mode": "reset_before", "seconds": 1.5}        reset without forwarding anything
    {"cmd": "cut"}                                                 reset every open connection now
    {"cmd": "stats"}

A delayed request is still delivered when its client has given up: it was "in the network".
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import socket
import struct
import sys
import threading
import time
from collections import Counter
from typing import Any


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile (nan when empty)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, int(q * len(ordered) + 0.999999) - 1))]


# ------------------------------------------------------------------------------------------------ proxy


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with an RST (SO_LINGER 0), not a FIN: the peer sees a reset connection."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class _Conn:
    def __init__(
        self,
        proxy: Proxy,
        creader: asyncio.StreamReader,
        cwriter: asyncio.StreamWriter,
        ureader: asyncio.StreamReader,
        uwriter: asyncio.StreamWriter,
    ) -> None:
        self.proxy = proxy
        self.creader, self.cwriter, self.ureader, self.uwriter = creader, cwriter, ureader, uwriter
        self.queue: asyncio.Queue[tuple[float, bytes] | None] = asyncio.Queue()
        self.drop = False
        self.client_gone = False
        self.dead = False

    def kill(self) -> None:
        self.dead = True
        _reset(self.cwriter)
        _reset(self.uwriter)

    async def run(self) -> None:
        sender = asyncio.create_task(self._send_upstream())
        back = asyncio.create_task(self._to_client())
        try:
            await self._from_client()
            # The client is gone (or half-closed): what is queued still goes out, then a moment for
            # the answer (discarded), then the upstream side is closed.
            self.queue.put_nowait(None)
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(sender), self.proxy.delay + 5)
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(back), 2)
        finally:
            for task in (sender, back):
                task.cancel()
            with contextlib.suppress(Exception):
                self.uwriter.close()
            with contextlib.suppress(Exception):
                self.cwriter.close()

    async def _from_client(self) -> None:
        last = 0.0
        while not self.dead:
            try:
                data = await self.creader.read(65536)
            except (OSError, asyncio.IncompleteReadError):
                break
            if not data:
                break
            mode = self.proxy.current_mode()
            self.proxy.stats["chunks_" + mode] += 1
            if mode == "reset_before":
                self.kill()
                return
            if mode == "drop_response":
                self.drop = True
            now = time.monotonic()
            at = max(last, now + (self.proxy.delay if mode == "delay" else 0.0))
            last = at
            self.queue.put_nowait((at, data))
        self.client_gone = True

    async def _send_upstream(self) -> None:
        while True:
            item = await self.queue.get()
            if item is None or self.dead:
                return
            at, data = item
            wait = at - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            if self.dead:
                return
            try:
                self.uwriter.write(data)
                await self.uwriter.drain()
            except OSError:
                return

    async def _to_client(self) -> None:
        while not self.dead:
            try:
                data = await self.ureader.read(65536)
            except OSError:
                break
            if not data:
                break
            if self.drop:
                self.proxy.stats["responses_dropped"] += 1
                self.drop = False
                _reset(self.cwriter)
                self.client_gone = True
                continue
            if self.client_gone:
                continue
            try:
                self.cwriter.write(data)
                await self.cwriter.drain()
            except OSError:
                self.client_gone = True
        if not self.client_gone:
            with contextlib.suppress(Exception):
                self.cwriter.close()


class Proxy:
    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.mode, self.until, self.delay = "pass", 0.0, 0.0
        self.conns: set[_Conn] = set()
        self.stats: Counter[str] = Counter()

    def current_mode(self) -> str:
        if self.mode != "pass" and time.monotonic() >= self.until:
            self.mode = "pass"
        return self.mode

    async def handle(self, creader: asyncio.StreamReader, cwriter: asyncio.StreamWriter) -> None:
        self.stats["connections"] += 1
        try:
            ureader, uwriter = await asyncio.open_connection(self.host, self.port)
        except OSError:
            _reset(cwriter)
            return
        conn = _Conn(self, creader, cwriter, ureader, uwriter)
        self.conns.add(conn)
        try:
            await conn.run()
        finally:
            self.conns.discard(conn)

    def command(self, msg: dict[str, Any]) -> dict[str, Any]:
        cmd = msg.get("cmd")
        if cmd == "mode":
            self.mode = str(msg.get("mode", "pass"))
            self.until = time.monotonic() + float(msg.get("seconds", 0.0))
            if "delay" in msg:
                self.delay = float(msg["delay"])
            self.stats["mode_" + self.mode] += 1
            return {"ok": True, "mode": self.mode}
        if cmd == "cut":
            conns = list(self.conns)
            for conn in conns:
                conn.kill()
            self.stats["cut"] += len(conns)
            return {"ok": True, "cut": len(conns)}
        if cmd == "stats":
            return {"ok": True, "stats": dict(self.stats), "open": len(self.conns)}
        return {"ok": False, "error": f"unknown command {cmd!r}"}

    async def control(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while line := await reader.readline():
                writer.write((json.dumps(self.command(json.loads(line))) + "\n").encode())
                await writer.drain()
        except (OSError, ValueError):
            pass
        finally:
            writer.close()


async def _serve_proxy(target: str) -> None:
    host, _, port = target.rpartition(":")
    proxy = Proxy(host, int(port))
    data = await asyncio.start_server(proxy.handle, "127.0.0.1", 0, backlog=512)
    ctl = await asyncio.start_server(proxy.control, "127.0.0.1", 0)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(
        json.dumps(
            {"event": "listening", "port": data.sockets[0].getsockname()[1], "control": ctl.sockets[0].getsockname()[1]}
        ),
        flush=True,
    )
    await stop.wait()
    data.close()
    ctl.close()
    for conn in list(proxy.conns):
        conn.kill()


class ProxyControl:
    """The soak's end of the control port (one connection, one line per command)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self._rw: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def send(self, **msg: Any) -> dict[str, Any]:
        if self._rw is None:
            self._rw = await asyncio.open_connection("127.0.0.1", self.port)
        reader, writer = self._rw
        writer.write((json.dumps(msg) + "\n").encode())
        await writer.drain()
        answer: dict[str, Any] = json.loads(await asyncio.wait_for(reader.readline(), 5))
        return answer

    async def close(self) -> None:
        if self._rw is not None:
            self._rw[1].close()
            self._rw = None


class Cutter:
    """A TCP listener that reads a request and closes the connection: the request never reaches anyone."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.cut = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            conn.recv(65536)
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            conn.close()
            self.cut += 1

    def close(self) -> None:
        self.sock.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="what", required=True)
    proxy = sub.add_parser("proxy", help="a TCP proxy to --target with a control port")
    proxy.add_argument("--target", required=True, help="host:port on loopback")
    args = parser.parse_args(argv)
    if not args.target.startswith(("127.", "localhost:", "[::1]")):
        parser.error("--target must be a loopback address")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve_proxy(args.target))
    return 0


if __name__ == "__main__":
    sys.exit(main())
