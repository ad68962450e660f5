"""The HTTP/JSON adapter: declarative method and URL from the registry, body = prepared arguments.

Classification (DESIGN §8): a connection that could not be made is NOT_SENT (nothing left this
process); anything that fails after the request may have been written is UNKNOWN.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import aiohttp

from countersign.adapters.base import (
    UPPER_SNAKE,
    CallMeta,
    Kind,
    Lookup,
    LookupKind,
    Outcome,
    Prepared,
    PrepareRefused,
    PrepareUnavailable,
    address,
    field_of,
    render,
)
from countersign.sidecar.registry import HttpCall, Tool

MAX_ANSWER_BYTES = 1 << 20


class HttpAdapter:
    """One pooled aiohttp session for every HTTP downstream."""

    def __init__(self, *, pool_size: int = 128) -> None:
        self._pool_size = pool_size
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit=self._pool_size, keepalive_timeout=30, ttl_dns_cache=60)
            self._session = aiohttp.ClientSession(
                connector=connector, json_serialize=lambda v: json.dumps(v, ensure_ascii=False),
                auto_decompress=True, raise_for_status=False,
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def _send(
        self, call: HttpCall, values: Mapping[str, Any], body: Any, meta: CallMeta, timeout: float
    ) -> tuple[int, Any]:
        url = render(call.url, values, url=True)
        headers = meta.wire_headers()
        kwargs: dict[str, Any] = {"headers": headers, "timeout": aiohttp.ClientTimeout(total=timeout)}
        if call.method != "GET" and body is not None:
            kwargs["json"] = body
        async with self._client().request(call.method, url, **kwargs) as resp:
            raw = await resp.content.read(MAX_ANSWER_BYTES)
            try:
                answer = json.loads(raw) if raw else None
            except ValueError:
                answer = {"text": raw[:200].decode("utf-8", "replace")}
            return resp.status, answer

    async def prepare(
        self, tool: Tool, arguments: Mapping[str, Any], meta: CallMeta, timeout: float
    ) -> Prepared:
        call = tool.adapter.prepare
        if call is None:
            return Prepared(dict(arguments))
        body = {"tool": tool.name, "arguments": dict(arguments), "context": {
            "tenant_id": meta.tenant_id, "actor_id": meta.actor_id,
            "subject_id": meta.subject_id, "locale": meta.locale}}
        try:
            status, answer = await self._send(call, arguments, body, meta, _timeout(tool, timeout))
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError, TypeError) as exc:
            raise PrepareUnavailable(f"prepare for {tool.name!r} at {address(tool, call)} failed: "
                                     f"{_failure(exc)}") from exc
        if 200 <= status < 300 and isinstance(answer, dict) and isinstance(answer.get("arguments"), dict):
            preview = answer.get("preview")
            return Prepared(answer["arguments"], str(answer.get("resource_version") or ""),
                            preview if isinstance(preview, dict) else None)
        if 400 <= status < 500:
            reason, message = _reason(answer, status)
            raise PrepareRefused(reason, message)
        raise PrepareUnavailable(f"prepare for {tool.name!r} at {address(tool, call)} answered {status}")

    async def execute(
        self, tool: Tool, arguments: Mapping[str, Any], meta: CallMeta, timeout: float
    ) -> Outcome:
        call = tool.adapter.execute
        assert call is not None  # the registry guarantees it for http adapters
        values = {**arguments, "idempotency_key": meta.idempotency_key, "action_id": meta.idempotency_key}
        try:
            status, answer = await self._send(call, values, dict(arguments), meta, _timeout(tool, timeout))
        except aiohttp.ClientConnectorError as exc:
            # DNS failure or connection refused: the request never left this process.
            return Outcome(Kind.FAILED, "NOT_SENT", f"could not connect: {exc.os_error}", retryable=True)
        except (ValueError, TypeError) as exc:
            # The request could not even be built (a header or URL aiohttp refuses): nothing was sent.
            return Outcome(Kind.FAILED, "NOT_SENT", f"the request could not be built: {str(exc)[:120]}",
                           retryable=False)
        except (TimeoutError, aiohttp.ServerTimeoutError):
            return Outcome(Kind.UNKNOWN, "DOWNSTREAM_TIMEOUT", "no answer before the deadline")
        except (aiohttp.ClientError, OSError) as exc:
            return Outcome(Kind.UNKNOWN, "DOWNSTREAM_CONNECTION_LOST", f"{type(exc).__name__} after send")
        return classify(tool, status, answer)

    async def lookup(self, tool: Tool, meta: CallMeta, fence: bool, timeout: float) -> Lookup:
        call = tool.adapter.fence if fence else tool.adapter.lookup
        if call is None:
            return Lookup(LookupKind.UNREACHABLE, message="no lookup declared")
        values = {"idempotency_key": meta.idempotency_key, "action_id": meta.idempotency_key}
        try:
            status, answer = await self._send(call, values, None, meta, timeout)
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            return Lookup(LookupKind.UNREACHABLE, message=type(exc).__name__)
        if fence and status == 410:
            return Lookup(LookupKind.ABSENT_FENCED)
        if status == 404:
            return Lookup(LookupKind.ABSENT_UNFENCED)
        if status >= 500:
            return Lookup(LookupKind.UNREACHABLE, message=f"lookup answered {status}")
        return Lookup(LookupKind.APPLIED, classify(tool, status, answer))


def classify(tool: Tool, status: int, answer: Any) -> Outcome:
    """An HTTP answer as an outcome."""
    if 200 <= status < 300:
        return Outcome(Kind.SUCCEEDED, status=str(status), body=answer,
                       resource_id=field_of(answer, tool.receipt.resource_id),
                       resource_version=field_of(answer, tool.receipt.resource_version))
    if 400 <= status < 500 and status not in (408, 429):
        reason, message = _reason(answer, status)
        return Outcome(Kind.FAILED, reason, message, status=str(status), body=answer)
    # 5xx, 408, 429 and anything odd: the request may have been applied.
    reason, message = _reason(answer, status)
    return Outcome(Kind.UNKNOWN, f"DOWNSTREAM_{status}", message, status=str(status), body=answer)


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


def _timeout(tool: Tool, default: float) -> float:
    return tool.adapter.timeout_ms / 1000 if tool.adapter.timeout_ms else default
