"""The metrics port: /metrics for Prometheus, /healthz and /readyz for the kubelet, 404 for anything else.

It is served from threads (prometheus_client's threading WSGI server), so a scrape or a probe never waits
for the event loop's turn. The two checks that need the loop hand it a tiny coroutine and wait a bounded
time for the answer: a wedged loop or a silent Redis is a 503 within that bound, never a hung probe.

  /healthz  alive: the gRPC server has started and the event loop answers within a second. Redis is not
            asked: a Redis outage must not make the kubelet restart every sidecar (they recover alone).
  /readyz   ready for traffic: gRPC serving (not starting, not draining after SIGTERM), Redis answers a
            PING within --redis-connect-timeout + --redis-timeout, and the registry is loaded. One check
            runs at a time and its answer is reused for a second, so a flood of probes is not a flood
            of PINGs.

Each answers one JSON object naming what it found (never the Redis URL: it may carry a password).
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any, Literal
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app

State = Literal["starting", "serving", "draining"]
StartResponse = Callable[[str, list[tuple[str, str]]], Any]

LOOP_WAIT = 1.0  # how long /healthz waits for the event loop to run a no-op
READY_REUSE = 1.0  # how long one /readyz answer is reused


class Probes:
    """What /healthz and /readyz report; app.py moves ``state`` as the sidecar starts and stops."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        ping: Callable[[], Awaitable[None]],
        *,
        redis_wait: float,
        policy_version: str,
    ) -> None:
        self.loop, self.ping, self.redis_wait, self.policy_version = loop, ping, redis_wait, policy_version
        self.state: State = "starting"
        self._lock = threading.Lock()
        self._last: tuple[float, int, dict[str, str]] | None = None

    def _on_loop(self, make: Callable[[], Awaitable[Any]], timeout: float) -> None:
        """Run a coroutine on the sidecar's loop from this thread; TimeoutError if it takes longer."""

        async def run() -> None:
            await make()

        future = asyncio.run_coroutine_threadsafe(run(), self.loop)
        try:
            future.result(timeout)
        except TimeoutError:
            future.cancel()
            raise

    def healthz(self) -> tuple[int, dict[str, str]]:
        if self.state == "starting":
            return 503, {"status": "starting"}
        try:
            self._on_loop(lambda: asyncio.sleep(0), LOOP_WAIT)
        except TimeoutError:
            return 503, {"status": "stuck", "loop": f"the event loop did not answer within {LOOP_WAIT:g}s"}
        return 200, {"status": "alive", "grpc": self.state}

    def readyz(self) -> tuple[int, dict[str, str]]:
        with self._lock:
            if self._last is not None and time.monotonic() - self._last[0] < READY_REUSE:
                return self._last[1], self._last[2]
            code, body = self._check()
            self._last = (time.monotonic(), code, body)
            return code, body

    def _check(self) -> tuple[int, dict[str, str]]:
        body = {"grpc": self.state, "registry": f"loaded, policy_version {self.policy_version}"}
        if self.state != "serving":
            return 503, {"status": "not ready", **body}
        try:
            self._on_loop(self.ping, self.redis_wait)
        except TimeoutError:
            return 503, {"status": "not ready", **body, "redis": f"no answer within {self.redis_wait:g}s"}
        except Exception as exc:  # any failure to PING is "not ready", named by its type
            return 503, {"status": "not ready", **body, "redis": f"unreachable: {type(exc).__name__}"}
        return 200, {"status": "ready", **body, "redis": "ok"}

    def app(self, registry: CollectorRegistry) -> Callable[[dict[str, Any], StartResponse], Iterable[bytes]]:
        """The WSGI application of the metrics port."""
        metrics = make_wsgi_app(registry)
        checks = {"/healthz": self.healthz, "/readyz": self.readyz}

        def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
            path = environ.get("PATH_INFO", "")
            if path == "/metrics":
                return metrics(environ, start_response)  # type: ignore[no-any-return]
            check = checks.get(path)
            if check is None:
                return _answer(start_response, 404, {"status": "not found", "paths": "/metrics /healthz /readyz"})
            if environ.get("REQUEST_METHOD") not in ("GET", "HEAD"):
                return _answer(start_response, 405, {"status": "method not allowed"})
            return _answer(start_response, *check())

        return app


_REASONS = {200: "OK", 404: "Not Found", 405: "Method Not Allowed", 503: "Service Unavailable"}


def _answer(start_response: StartResponse, code: int, body: dict[str, str]) -> list[bytes]:
    data = json.dumps(body).encode() + b"\n"
    start_response(
        f"{code} {_REASONS[code]}", [("Content-Type", "application/json"), ("Content-Length", str(len(data)))]
    )
    return [data]


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a request thread never holds the process open


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """No access log: probes every few seconds are not news."""


def serve_probes(host: str, port: int, app: Callable[..., Iterable[bytes]]) -> WSGIServer:
    """Start the metrics port in a daemon thread (what prometheus_client's start_http_server does, with our app)."""
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    server_class = type("MetricsServer", (_Server,), {"address_family": family})
    server: WSGIServer = make_server(host, port, app, server_class, handler_class=_Quiet)
    threading.Thread(target=server.serve_forever, name="countersign-metrics", daemon=True).start()
    return server
