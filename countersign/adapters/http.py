"""The HTTP/JSON adapter: declarative method and URL from the registry, body = prepared arguments.

Classification (docs/design.md §8): a connection that could not be made is NOT_SENT (nothing left this
process); anything that fails after the request may have been written is UNKNOWN. Every answer is
read to its end under a cap (MAX_ANSWER_BYTES, or less: whatever segments, chunks or encoding it arrives in), and no
redirect is followed: a 3xx could land a write somewhere the registry never named.
"""

from __future__ import annotations

import json
import math
import ssl
from collections.abc import Mapping
from typing import Any, NamedTuple

import aiohttp
import yarl

from countersign.adapters.base import (
    MAX_ANSWER_BYTES,
    UPPER_SNAKE,
    CallMeta,
    Kind,
    Lookup,
    LookupKind,
    NotSendable,
    Outcome,
    Prepared,
    PrepareRefused,
    PrepareUnavailable,
    address,
    deadline,
    receipt_fields,
    render_url,
)
from countersign.canonical import loads
from countersign.reasons import Reason
from countersign.registry import HttpCall, Tool

__all__ = ["MAX_ANSWER_BYTES", "HttpAdapter", "classify"]

CONNECT_SHARE = 0.95  # of a call's deadline, the most it may wait for its connection


class Answer(NamedTuple):
    """What came back: the status, the parsed JSON body, and why the body is unusable ("" when it is not)."""

    status: int
    body: Any = None
    problem: str = ""


# a request's JSON body: json.dumps(v, ensure_ascii=False)'s bytes, from an encoder made once (dumps makes one per
# call when given an argument: ~9k instructions of every call)
_JSON_BODY = json.JSONEncoder(ensure_ascii=False)


class _Connector(aiohttp.TCPConnector):
    """aiohttp's pool, except that it never hands out an idle connection on which bytes arrived after its last
    answer was read. A downstream (or a proxy) that answers one request twice leaves the second answer queued on the
    idle connection, and aiohttp would give it to the next request sent there, another owner's call maybe: as its
    answer (a 4xx made an applied write FAILED; a 2xx handed over someone else's receipt). Such a connection is closed
    and the next one taken. (Bytes that arrive after the next request was written cannot be told from its answer:
    no HTTP/1.1 client can; they are rarer by far than bytes waiting on an idle connection.)"""

    async def _get(self, key: Any, traces: Any) -> Any:  # aiohttp's ConnectionKey, list[Trace], Connection | None
        while True:
            conn = await super()._get(key, traces)
            if conn is None or conn.protocol is None or not conn.protocol.should_close:
                return conn
            conn.close()


class HttpAdapter:
    """One pooled aiohttp session for every HTTP downstream."""

    def __init__(
        self,
        *,
        pool_size: int = 128,
        max_answer_bytes: int = MAX_ANSWER_BYTES,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self._pool_size = pool_size
        self.max_answer_bytes = max_answer_bytes
        # https:// downstreams: this CA bundle and client certificate (--downstream-ca, --downstream-cert); None:
        # the system's CAs, no client certificate. Always verified: a handshake that fails is NOT_SENT.
        self._ssl: ssl.SSLContext | bool = ssl_context if ssl_context is not None else True
        self._session: aiohttp.ClientSession | None = None
        self._timeouts: dict[float, aiohttp.ClientTimeout] = {}  # one (frozen) ClientTimeout per deadline in use

    def _timeout(self, total: float) -> aiohttp.ClientTimeout:
        """The call's ClientTimeout (a frozen value: made once per deadline; the registry's tools have a few)."""
        found = self._timeouts.get(total)
        if found is None:
            if len(self._timeouts) >= 64:  # deadlines come from the registry and the settings: a handful
                self._timeouts.clear()
            # connect (a pooled connection waited for, or a new one made) ends a little before the whole call:
            # past it aiohttp raises ConnectionTimeoutError with nothing written (NOT_SENT, the card READY again),
            # where the call's own deadline would leave an action UNKNOWN that never reached the downstream.
            # ceil_threshold: aiohttp rounds a deadline of 5 s or more up to a whole second of the loop's clock,
            # up to a second past the deadline the lease was sized for; never here
            found = self._timeouts[total] = aiohttp.ClientTimeout(
                total=total, connect=total * CONNECT_SHARE, ceil_threshold=math.inf
            )
        return found

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = _Connector(limit=self._pool_size, keepalive_timeout=30, ttl_dns_cache=60, ssl=self._ssl)
            self._session = aiohttp.ClientSession(
                connector=connector,
                json_serialize=_JSON_BODY.encode,
                auto_decompress=True,
                raise_for_status=False,
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def _send(
        self, call: HttpCall, values: Mapping[str, Any], body: Any, meta: CallMeta, timeout: float
    ) -> Answer:
        """One request, its answer read whole; raises NotSendable before anything is sent."""
        # encoded=True: every value is percent-encoded already, and yarl must not decode %2E or fold dot segments
        url = yarl.URL(render_url(call.url, values), encoded=True)
        headers = meta.wire_headers()
        kwargs: dict[str, Any] = {
            "headers": headers,
            "timeout": self._timeout(timeout),
            "allow_redirects": False,
        }
        if call.method != "GET" and body is not None:
            kwargs["json"] = body
        async with self._client().request(call.method, url, **kwargs) as resp:
            return Answer(resp.status, *await _read(resp, self.max_answer_bytes))

    async def prepare(self, tool: Tool, arguments: Mapping[str, Any], meta: CallMeta, timeout: float) -> Prepared:
        call = tool.adapter.prepare
        if call is None:
            return Prepared(dict(arguments))
        body = {
            "tool": tool.name,
            "arguments": dict(arguments),
            "context": {
                "tenant_id": meta.tenant_id,
                "actor_id": meta.actor_id,
                "subject_id": meta.subject_id,
                "locale": meta.locale,
            },
        }
        try:
            answer = await self._send(call, arguments, body, meta, deadline(tool, timeout))
        except NotSendable as exc:
            raise PrepareRefused(exc.reason, exc.message) from exc
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError, TypeError) as exc:
            raise PrepareUnavailable(
                f"prepare for {tool.name!r} at {address(tool, call)} failed: {_failure(exc)}"
            ) from exc
        status, got = answer.status, answer.body
        if 300 <= status < 400:
            raise PrepareRefused(
                Reason.DOWNSTREAM_REDIRECT,
                f"prepare for {tool.name!r} at {address(tool, call)} answered {status}; redirects are never followed",
            )
        if 200 <= status < 300:
            version = got.get("resource_version") if isinstance(got, dict) else None
            shaped = (
                isinstance(got, dict)
                and isinstance(got.get("arguments"), dict)
                and (version is None or (isinstance(version, (str, int)) and not isinstance(version, bool)))
            )
            if answer.problem or not shaped:
                raise PrepareUnavailable(
                    f"prepare for {tool.name!r} at {address(tool, call)} answered {status} "
                    f"but {answer.problem or 'not {arguments, resource_version?, preview?}'}"
                )
            preview = got.get("preview")
            return Prepared(
                got["arguments"],
                "" if version is None else str(version),
                preview if isinstance(preview, dict) else None,
            )
        if 400 <= status < 500:
            reason, message = _reason(got, status)
            raise PrepareRefused(reason, message)
        raise PrepareUnavailable(f"prepare for {tool.name!r} at {address(tool, call)} answered {status}")

    async def execute(self, tool: Tool, arguments: Mapping[str, Any], meta: CallMeta, timeout: float) -> Outcome:
        call = tool.adapter.execute
        assert call is not None  # the registry guarantees it for http adapters
        values = {**arguments, "idempotency_key": meta.idempotency_key, "action_id": meta.idempotency_key}
        try:
            answer = await self._send(call, values, dict(arguments), meta, deadline(tool, timeout))
        except NotSendable as exc:
            return Outcome(Kind.FAILED, exc.reason, exc.message)
        except aiohttp.ClientConnectorError as exc:
            # DNS failure, connection refused, or a TLS handshake that failed (an untrusted certificate, a client
            # certificate refused): the request never left this process.
            return Outcome(Kind.FAILED, Reason.NOT_SENT, f"could not connect: {exc.os_error}", retryable=True)
        except aiohttp.ConnectionTimeoutError:
            # the deadline passed before a connection was had (every pooled one busy, a connect or TLS handshake
            # that hung): aiohttp raises this only from its connect step, before a byte of the request is written
            return Outcome(Kind.FAILED, Reason.NOT_SENT, "no connection before the deadline", retryable=True)
        except (ValueError, TypeError) as exc:
            # The request could not even be built (a header or URL aiohttp refuses): nothing was sent, but
            # unlike NOT_SENT (which gives the card back) it would fail the same way on every retry: FAILED.
            return Outcome(
                Kind.FAILED,
                Reason.REQUEST_NOT_BUILDABLE,
                f"the request could not be built: {str(exc)[:120]}",
                retryable=False,
            )
        except (TimeoutError, aiohttp.ServerTimeoutError):
            return Outcome(Kind.UNKNOWN, Reason.DOWNSTREAM_TIMEOUT, "no answer before the deadline")
        except (aiohttp.ClientError, OSError) as exc:
            return Outcome(Kind.UNKNOWN, Reason.DOWNSTREAM_CONNECTION_LOST, f"{type(exc).__name__} after send")
        return classify(tool, answer)

    async def lookup(self, tool: Tool, meta: CallMeta, fence: bool, timeout: float) -> Lookup:
        call = tool.adapter.fence if fence else tool.adapter.lookup
        if call is None:
            return Lookup(LookupKind.UNREACHABLE, message="no lookup declared")
        values = {"idempotency_key": meta.idempotency_key, "action_id": meta.idempotency_key}
        try:
            answer = await self._send(call, values, None, meta, timeout)
        except NotSendable as exc:
            return Lookup(LookupKind.UNREADABLE, message=exc.message)
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError, TypeError) as exc:
            return Lookup(LookupKind.UNREACHABLE, message=type(exc).__name__)
        status = answer.status
        if fence and status == 410:
            return Lookup(LookupKind.ABSENT_FENCED)
        if status == 404:
            return Lookup(LookupKind.ABSENT_UNFENCED)
        if status >= 500 or status in (408, 429):
            return Lookup(LookupKind.UNREACHABLE, message=f"lookup answered {status}")
        outcome = classify(tool, answer)
        if outcome.kind is Kind.UNKNOWN:
            # an answer, but no verdict: a redirect, or an "applied" whose receipt cannot be read
            return Lookup(LookupKind.UNREADABLE, message=f"{outcome.reason}: {outcome.message}")
        return Lookup(LookupKind.APPLIED, outcome)


async def _read(resp: aiohttp.ClientResponse, cap: int) -> tuple[Any, str]:
    """The whole body as JSON (None when empty), or why it cannot be used: over the cap, cut, not JSON."""
    if resp.content_length is not None and resp.content_length > cap:
        return None, f"the answer announces {resp.content_length} bytes (the cap is {cap})"
    raw = bytearray()
    try:
        if resp.content_length is not None and "Content-Encoding" not in resp.headers:
            # as many bytes as announced, within the cap (above): the parser stops there (a compressed answer is
            # read chunk by chunk: its decompressed size is capped as it grows)
            raw += await resp.read()
        else:
            async for chunk in resp.content.iter_chunked(64 * 1024):
                raw += chunk
                if len(raw) > cap:
                    return None, f"the answer is larger than {cap} bytes"
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        return None, f"the answer was cut or could not be decoded ({type(exc).__name__})"
    if not raw.strip():
        return None, ""
    try:
        return loads(raw), ""
    except (ValueError, RecursionError):
        return None, "the answer is not JSON"


def classify(tool: Tool, answer: Answer) -> Outcome:
    """An HTTP answer as an outcome (docs/design.md §8)."""
    status, body = answer.status, answer.body
    if 300 <= status < 400:
        # never followed: for a write the request may have been applied before the redirect was sent
        return Outcome(
            Kind.UNKNOWN if tool.is_write else Kind.FAILED,
            Reason.DOWNSTREAM_REDIRECT,
            f"the downstream answered {status} (a redirect); redirects are never followed",
            status=str(status),
        )
    if 200 <= status < 300:
        lacking, resource_id, resource_version = receipt_fields(tool, body)
        problem = answer.problem or (lacking if tool.is_write else "")
        if problem and tool.is_write:
            return Outcome(
                Kind.UNKNOWN,
                Reason.RECEIPT_INVALID,
                f"the downstream answered {status} but {problem}; "
                "the write may have been applied: reconciliation will ask by idempotency key",
                status=str(status),
                body=body,
            )
        if problem:
            return Outcome(
                Kind.FAILED,
                Reason.DOWNSTREAM_ANSWER_INVALID,
                f"the downstream answered {status} but {problem}",
                status=str(status),
            )
        return Outcome(
            Kind.SUCCEEDED,
            status=str(status),
            body=body,
            resource_id=resource_id,
            resource_version=resource_version,
        )
    if status == 412:
        _, message = _reason(body, status)
        return Outcome(Kind.FAILED, Reason.RESOURCE_VERSION_CONFLICT, message, status=str(status), body=body)
    if 400 <= status < 500 and status not in (408, 429):
        reason, message = _reason(body, status)
        return Outcome(Kind.FAILED, reason, message, status=str(status), body=body)
    # 5xx, 408, 429 and anything odd: the request may have been applied.
    reason, message = _reason(body, status)
    return Outcome(Kind.UNKNOWN, f"DOWNSTREAM_{status}", message, status=str(status), body=body)


def _reason(answer: Any, status: int) -> tuple[str, str]:
    reason = answer.get("reason") if isinstance(answer, dict) else None
    message = answer.get("message") if isinstance(answer, dict) else None
    if not isinstance(reason, str) or not UPPER_SNAKE.match(reason):
        reason = f"HTTP_{status}"
    return reason, str(message or f"the downstream answered {status}")[:500]


def _failure(exc: BaseException) -> str:
    """Why a call got no answer, in words an operator can act on."""
    if isinstance(exc, aiohttp.ClientConnectorError):
        return f"cannot connect ({exc.os_error.strerror or type(exc.os_error).__name__}): is the service running?"
    if isinstance(exc, TimeoutError):
        return "no answer before the deadline"
    return type(exc).__name__
