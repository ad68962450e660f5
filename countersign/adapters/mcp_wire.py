"""The MCP adapter's wire: one MCP session per server URL (the official SDK's Streamable HTTP client and
ClientSession, held open by a task of its own), and what happened on the wire to each call (a Probe).

The SDK's transport sends each request from a task of its own, in the context of the task that made the call, so
a context variable carries the call's Probe down to ``Wire``, the HTTP transport under the SDK's client. There
the call's headers (Idempotency-Key, traceparent, X-Countersign-*) are put on its POST, and its facts are written
down: was a connection ever made (a refused connection sent nothing: NOT_SENT), what status came back, was the
answer cut, oversize, encoded or a redirect. The classification (mcp.py) reads those facts, not the SDK's
exception, which says "connection closed" for a refused connection and for a reset after the write alike.

``Wire`` never lets a transport failure of one call escape into the SDK: the SDK would end the whole session with
it, and every other call in flight on it. It answers the SDK a JSON-RPC error for that one request instead (the
Probe holds the truth). It follows no redirect, asks for no content encoding, reads every answer under a cap,
and opens no standalone GET stream (the adapter takes no server-initiated requests).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import cast

import httpx2
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CONNECTION_CLOSED, Implementation

CLIENT = Implementation(name="countersign", version="1")
LINGER = 1.0  # seconds an answer may still arrive after its call's deadline (the caller has given up by then)
# an idle connection is dropped before the usual server keep-alive (uvicorn's and node's are 5 s) can close it
# under a request being written: such a request would be lost after send (UNKNOWN) though nothing reached a tool
KEEPALIVE = 4.0
DRAIN_SECONDS, DRAIN_BYTES = 1.0, 64 << 10  # the most of an answer stream's rest read to keep its connection


@dataclass
class Probe:
    """One call as the wire saw it (only its first POST counts: later ones are the SDK's cancellations)."""

    headers: dict[str, str]
    deadline: float  # time.monotonic() by which every read of this call ends
    cap: int  # the most bytes of answer read
    entered: bool = False  # the POST reached the HTTP client: from here on it may have been sent
    abandoned: bool = False  # the caller gave up: a POST not yet entered is never sent
    not_sent: str = ""  # why no connection could be made (nothing of the request left this process)
    status: int = 0  # the HTTP status of the answer (0: none came)
    session: bool = False  # the POST carried an MCP session id
    lost: str = ""  # the request may have been written; its answer was lost (reset, cut, read timeout)
    problem: str = ""  # an answer came, but cannot be used (oversize, encoded, a redirect)
    read: int = 0  # bytes of answer read so far


PROBE: contextvars.ContextVar[Probe | None] = contextvars.ContextVar("countersign_mcp_probe", default=None)


class _Oversize(Exception):
    pass


def _failed(request: httpx2.Request, message: str) -> httpx2.Response:
    """What the SDK is told when this request got no usable answer: a JSON-RPC error (the Probe says why)."""
    body = {"jsonrpc": "2.0", "id": None, "error": {"code": CONNECTION_CLOSED, "message": message}}
    return httpx2.Response(502, headers={"content-type": "application/json"}, json=body, request=request)


class _Capped(httpx2.AsyncByteStream):
    """An answer stream (SSE) read under the call's cap; a cut is noted as lost. Closed before its end, its rest
    is read (briefly, a little) so that its connection can serve the next call."""

    def __init__(self, stream: httpx2.AsyncByteStream, probe: Probe, first: bool) -> None:
        self.stream, self.probe, self.first = stream, probe, first
        self.chunks = aiter(stream)  # one iterator, so that the drain at close goes on where the SDK stopped
        self.ended = False  # read to its end, or given up on (oversize, past the deadline, cut): no drain

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self.chunks:
                self.probe.read += len(chunk)
                if self.probe.read > self.probe.cap:
                    self.ended = True
                    self.probe.problem = self.probe.problem or f"the answer is larger than {self.probe.cap} bytes"
                    raise _Oversize(self.probe.problem)  # the SDK ends this call's stream (and only it)
                if time.monotonic() > self.probe.deadline + LINGER:
                    # a stream that trickles on past the deadline is closed: no call holds a connection for ever
                    self.ended = True
                    raise httpx2.ReadTimeout("the answer was still streaming at the deadline")
                yield chunk
            self.ended = True
        except httpx2.TransportError as exc:
            self.ended = True
            if self.first:
                self.probe.lost = self.probe.lost or _lost(exc)
            raise

    async def aclose(self) -> None:
        # The SDK closes the stream as soon as it holds the result, before the server's end of the stream (the
        # last chunk, sent right after) is read; a connection whose answer was not read to its end is not reused,
        # so every call opened a new one. The answer is already on its way to the caller: this waits for no one.
        try:
            if not self.ended:
                with contextlib.suppress(Exception):  # a timeout or a cut: the connection is closed, as it was
                    async with asyncio.timeout(DRAIN_SECONDS):
                        left = DRAIN_BYTES
                        async for chunk in self.chunks:
                            left -= len(chunk)
                            if left < 0:
                                break
        finally:  # also when the SDK cancels its task: the pool must hear of the stream's end
            await self.stream.aclose()


def _lost(exc: BaseException) -> str:
    return "no answer before the deadline" if isinstance(exc, httpx2.TimeoutException) else type(exc).__name__


class Wire(httpx2.AsyncBaseTransport):
    """The HTTP transport under the SDK's client: headers in, facts out, failures kept to their own call."""

    def __init__(self) -> None:
        self.inner = httpx2.AsyncHTTPTransport(
            trust_env=False, limits=httpx2.Limits(max_connections=128, keepalive_expiry=KEEPALIVE)
        )

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        probe = PROBE.get()
        if request.method == "GET" and "last-event-id" not in request.headers:
            # the standalone stream of server-initiated messages: never opened (the spec's 405 says "none")
            return httpx2.Response(405, request=request)
        if probe is None or request.method not in ("POST", "GET"):
            return await self.inner.handle_async_request(request)
        first = request.method == "POST" and not probe.entered
        if probe.abandoned and not probe.entered:
            return _failed(request, "the call was given up before it was sent")
        if first:
            probe.entered = True
            probe.session = "mcp-session-id" in request.headers
        # as UTF-8 bytes, as the HTTP adapter writes them: httpx encodes a str value as ASCII and raised on an id
        # such as 张三, out of this transport and into the SDK, which ended the session and every call on it
        request.headers.update({name.encode("ascii"): value.encode("utf-8") for name, value in probe.headers.items()})
        request.headers["accept-encoding"] = "identity"
        # the call's own POST ends by its deadline; the SDK's later ones (a cancellation, an answer to a server's
        # ping) get a few seconds more, whatever is left of it
        left = max(probe.deadline - time.monotonic(), 0.001 if first else 5.0)
        request.extensions["timeout"] = {"connect": left, "read": left, "write": left, "pool": left}
        try:
            response = await self.inner.handle_async_request(request)
        except (httpx2.ConnectError, httpx2.ConnectTimeout, httpx2.PoolTimeout) as exc:
            if first:  # no connection was made: nothing of this request was written
                probe.not_sent = f"cannot connect ({type(exc).__name__}: {str(exc)[:120]})"
            return _failed(request, "could not connect")
        except httpx2.TransportError as exc:
            if first:
                probe.lost = probe.lost or _lost(exc)
            return _failed(request, "the answer was lost")
        if first:
            probe.status = response.status_code
        if 300 <= response.status_code < 400 or response.headers.get("content-encoding", "identity") != "identity":
            await response.aclose()
            if first:
                probe.problem = (
                    f"the server answered {response.status_code} (a redirect); redirects are never followed"
                    if response.status_code < 400
                    else "the answer is content-encoded although identity was asked for"
                )
            return _failed(request, "unusable answer")
        if response.headers.get("content-type", "").lower().startswith("text/event-stream"):
            response.stream = _Capped(cast(httpx2.AsyncByteStream, response.stream), probe, first)
            return response
        return await self._whole(request, response, probe, first)

    async def _whole(
        self, request: httpx2.Request, response: httpx2.Response, probe: Probe, first: bool
    ) -> httpx2.Response:
        """A JSON (or any other non-stream) answer read to its end under the cap, before the SDK sees it."""
        announced = response.headers.get("content-length", "")
        body = bytearray()
        try:
            if announced.isdigit() and probe.read + int(announced) > probe.cap:
                raise _Oversize(f"the answer announces {announced} bytes (the cap is {probe.cap})")
            async for chunk in cast(httpx2.AsyncByteStream, response.stream):
                body += chunk
                if probe.read + len(body) > probe.cap:
                    raise _Oversize(f"the answer is larger than {probe.cap} bytes")
                if time.monotonic() > probe.deadline + LINGER:
                    raise httpx2.ReadTimeout("the answer was still arriving at the deadline")
        except _Oversize as exc:
            if first:
                probe.problem = str(exc)
            return _failed(request, "oversize answer")
        except httpx2.TransportError as exc:
            if first:
                probe.lost = probe.lost or f"the answer was cut ({type(exc).__name__})"
            return _failed(request, "the answer was cut")
        finally:
            await response.aclose()
        probe.read += len(body)
        headers = [(k, v) for k, v in response.headers.multi_items() if k.lower() not in _FRAMING]
        return httpx2.Response(response.status_code, headers=headers, content=bytes(body), request=request)


_FRAMING = ("content-length", "transfer-encoding", "content-encoding")


class SessionFailed(Exception):
    """No MCP session could be had with the server (nothing of the call was sent)."""


@dataclass
class Session:
    """One MCP session with one server, held open by its own task until stop() or the server drops it."""

    url: str
    probe: Probe  # the initialize's
    ready: asyncio.Future[ClientSession] = field(default_factory=lambda: asyncio.get_running_loop().create_future())
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    closed: bool = False
    task: asyncio.Task[None] | None = None

    def start(self, client: httpx2.AsyncClient, cap: int) -> None:
        # a context of its own: the session must not carry the headers (or the span) of the call that opened it
        self.task = asyncio.get_running_loop().create_task(self._hold(client, cap), context=contextvars.Context())

    async def _hold(self, client: httpx2.AsyncClient, cap: int) -> None:
        PROBE.set(self.probe)
        try:
            async with (
                streamable_http_client(self.url, http_client=client, max_sse_event_size=cap) as (read, write),
                ClientSession(read, write, client_info=CLIENT) as session,
            ):
                async with asyncio.timeout(max(self.probe.deadline - time.monotonic(), 0.001)):
                    await session.initialize()
                self.ready.set_result(session)
                await self.stopping.wait()
        except Exception as exc:  # the SDK raises groups of anything; none may escape this task
            if not self.ready.done():
                self.ready.set_exception(SessionFailed(self._why(exc)))
        finally:
            self.closed = True
            if not self.ready.done():
                self.ready.set_exception(SessionFailed("the MCP session closed before it was ready"))
            # a failure nobody awaited must not be logged as "exception never retrieved"
            if self.ready.done() and not self.ready.cancelled():
                self.ready.exception()

    def _why(self, exc: BaseException) -> str:
        probe = self.probe
        if probe.not_sent:
            return f"{probe.not_sent}: is the MCP server running?"
        if isinstance(exc, TimeoutError):
            return "the MCP session could not be initialised before the deadline"
        detail = probe.problem or probe.lost or _first(exc)
        return f"the MCP session could not be initialised ({detail[:200]})"

    async def stop(self) -> None:
        self.stopping.set()
        if self.task is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(self.task), 2.0)
            if not self.task.done():
                self.task.cancel()


def _first(exc: BaseException) -> str:
    """The first leaf of an exception group, as a short text."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {str(exc)[:160]}"
