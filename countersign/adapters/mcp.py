"""The MCP adapter (the back door): a tool of an MCP server, reached over Streamable HTTP with the official SDK,
as the downstream call (docs/design.md §8). The wire (sessions, headers, caps, what happened) is mcp_wire.py.

A write's call carries the action id in ``_meta`` (``io.countersign/idempotency-key``) and as the
``Idempotency-Key`` header, with the headers every adapter sends. Its answer is classified:

    SUCCEEDED   a CallToolResult, not isError, whose answer yields every declared receipt field. The answer is
                ``structuredContent`` when the result has it, else its first text content parsed as JSON.
    FAILED      isError: the reason is the structured answer's ``reason`` (UPPER_SNAKE), else MCP_TOOL_ERROR;
                a JSON-RPC error that proves the call was not processed (-32601 method not found, -32602 invalid
                params, e.g. an unknown tool): MCP_REQUEST_REFUSED; an HTTP 4xx (but 408, 429) to the POST itself,
                the HTTP layer refusing before any tool ran: HTTP_<status>. NOT_SENT (the card goes back to READY)
                when no connection could be made, no session could be initialised, or the call was given up
                before it left this process.
    UNKNOWN     the call may have landed: the answer was lost (reset, cut, timeout) or came unusable (not a
                CallToolResult, oversize, a redirect, lacking a declared receipt field: RECEIPT_INVALID), or any
                other JSON-RPC error (DOWNSTREAM_MCP_ERROR). For a read, an unusable answer is FAILED.

Nothing is re-sent, with one exception that cannot double a write: when the server answers 404 to a session it
dropped (the spec: the request was not taken) or the session broke before the call was sent, the call is sent once
more on a new session. The lookup tool is called with ``{idempotency_key, fence?}``; its contract is in
``Mcp.lookup``. Lookups and prepares carry no Idempotency-Key (a server that answers a repeated key from its cache
would answer them with the write's result).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

import httpx2
from mcp.client.session import ClientSession
from mcp.shared.exceptions import MCPError
from mcp_types import (
    CONNECTION_CLOSED,
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    REQUEST_TIMEOUT,
    CallToolRequest,
    CallToolRequestParams,
    CallToolResult,
    RequestParamsMeta,
    TextContent,
)

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
)
from countersign.adapters.mcp_wire import PROBE, Probe, Session, SessionFailed, Wire
from countersign.canonical import not_json
from countersign.reasons import Reason
from countersign.registry import Tool

KEY_META = "io.countersign/idempotency-key"
REFUSALS = frozenset({METHOD_NOT_FOUND, INVALID_PARAMS})  # JSON-RPC errors raised before any tool ran


@dataclass(frozen=True)
class Answer:
    """What one tools/call came to: a result, a JSON-RPC error, or neither (the probe says what happened)."""

    probe: Probe
    result: CallToolResult | None = None
    error: MCPError | None = None
    failure: str = ""  # the answer could not be read as a CallToolResult
    not_sent: str = ""  # no session could be had: nothing was sent


class McpAdapter:
    """One MCP session per server URL, opened on first use and reused; a new one after the server drops it."""

    def __init__(self, *, max_answer_bytes: int = MAX_ANSWER_BYTES) -> None:
        # the SDK logs a server's garbage with a traceback at ERROR: each call's outcome says it once, in our words
        logging.getLogger("mcp.client").setLevel(logging.CRITICAL)
        self.max_answer_bytes = max_answer_bytes
        self._client: httpx2.AsyncClient | None = None
        self._sessions: dict[str, Session] = {}
        self._closing: set[asyncio.Task[None]] = set()

    def _http(self) -> httpx2.AsyncClient:
        if self._client is None:
            self._client = httpx2.AsyncClient(
                transport=Wire(), trust_env=False, follow_redirects=False, timeout=httpx2.Timeout(5.0)
            )
        return self._client

    async def close(self) -> None:
        for held in list(self._sessions.values()):
            await held.stop()
        self._sessions.clear()
        if self._closing:
            await asyncio.wait(self._closing, timeout=3)
        if self._client is not None:
            await self._client.aclose()

    async def _session(self, url: str, until: float) -> tuple[Session, ClientSession]:
        held = self._sessions.get(url)
        if held is None or held.closed:
            held = Session(url, Probe({}, until, self.max_answer_bytes))
            self._sessions[url] = held
            held.start(self._http(), self.max_answer_bytes)
        try:
            return held, await asyncio.wait_for(asyncio.shield(held.ready), max(until - time.monotonic(), 0.001))
        except TimeoutError as exc:
            raise SessionFailed("the MCP session was not initialised before the deadline") from exc

    def _drop(self, url: str, held: Session) -> None:
        """Forget a session the server dropped (or that broke), and close it in the background."""
        if self._sessions.get(url) is held:
            del self._sessions[url]
        task = asyncio.get_running_loop().create_task(held.stop())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def call(
        self,
        url: str,
        name: str,
        arguments: Mapping[str, Any],
        headers: Mapping[str, str],
        timeout: float,
        key: str = "",
    ) -> Answer:
        """One tools/call; sent a second time only when the first provably never reached a tool."""
        until = time.monotonic() + timeout
        meta = cast(RequestParamsMeta, {KEY_META: key}) if key else None
        request = CallToolRequest(params=CallToolRequestParams(name=name, arguments=dict(arguments), _meta=meta))
        for attempt in (1, 2):
            try:
                held, session = await self._session(url, until)
            except SessionFailed as exc:
                return Answer(Probe(dict(headers), until, self.max_answer_bytes), not_sent=str(exc))
            probe = Probe(dict(headers), until, self.max_answer_bytes)
            token = PROBE.set(probe)
            try:
                left = max(until - time.monotonic(), 0.001)
                async with asyncio.timeout(left + 1.0):  # the SDK's own read timeout comes first
                    answer = Answer(probe, result=await session.send_request(request, CallToolResult, left))
            except MCPError as exc:
                answer = Answer(probe, error=exc)
            except TimeoutError:
                answer = Answer(probe, error=MCPError(REQUEST_TIMEOUT, "no answer before the deadline"))
            except Exception as exc:  # e.g. pydantic's ValidationError: an answer that is no CallToolResult
                answer = Answer(probe, failure=f"{type(exc).__name__}: {str(exc)[:200]}")
            finally:
                probe.abandoned = True  # from here on, a POST of this call that has not started never will
                PROBE.reset(token)
            untouched = not probe.entered or (probe.status == 404 and probe.session)
            if untouched or probe.not_sent:  # the session broke, the server dropped it, or the server is away
                self._drop(url, held)
            if untouched and attempt == 1 and until - time.monotonic() > 0.05:
                continue
            return answer
        raise AssertionError("unreachable")  # pragma: no cover

    # -- the adapter protocol --------------------------------------------------------------------------------

    async def prepare(self, tool: Tool, arguments: Mapping[str, Any], meta: CallMeta, timeout: float) -> Prepared:
        spec = tool.adapter
        if not spec.mcp_prepare:
            return Prepared(dict(arguments))
        where = f"prepare for {tool.name!r} at {address(tool)}"
        context = {"tenant_id": meta.tenant_id, "actor_id": meta.actor_id, "subject_id": meta.subject_id}
        try:
            headers = _headers(meta, key=False)
        except NotSendable as exc:
            raise PrepareRefused(exc.reason, exc.message) from exc
        answer = await self.call(
            spec.target,
            spec.mcp_prepare,
            {"tool": spec.mcp_tool, "arguments": dict(arguments), "context": {**context, "locale": meta.locale}},
            headers,
            deadline(tool, timeout),
        )
        result = answer.result
        if result is None:
            outcome = classify(tool, answer, write=False)
            if outcome.kind is Kind.FAILED and outcome.reason not in (
                Reason.NOT_SENT,
                Reason.DOWNSTREAM_ANSWER_INVALID,
            ):
                raise PrepareRefused(outcome.reason, f"{where}: {outcome.message}")
            raise PrepareUnavailable(f"{where} failed: {outcome.message}")
        if result.is_error:
            refused = _refusal(result, answer_of(result)[0])
            raise PrepareRefused(refused.reason, refused.message)
        got = answer_of(result)[0]
        version = got.get("resource_version") if isinstance(got, dict) else None
        if not (
            isinstance(got, dict)
            and isinstance(got.get("arguments"), dict)
            and (version is None or (isinstance(version, (str, int)) and not isinstance(version, bool)))
        ):
            raise PrepareUnavailable(f"{where} answered, but not {{arguments, resource_version?, preview?}}")
        preview = got.get("preview")
        return Prepared(
            got["arguments"], "" if version is None else str(version), preview if isinstance(preview, dict) else None
        )

    async def execute(self, tool: Tool, arguments: Mapping[str, Any], meta: CallMeta, timeout: float) -> Outcome:
        spec = tool.adapter
        key = meta.idempotency_key if tool.is_write else ""
        try:
            headers = _headers(meta, key=bool(key))
        except NotSendable as exc:
            return Outcome(Kind.FAILED, exc.reason, exc.message)
        answer = await self.call(spec.target, spec.mcp_tool, arguments, headers, deadline(tool, timeout), key=key)
        return classify(tool, answer, write=tool.is_write)

    async def lookup(self, tool: Tool, meta: CallMeta, fence: bool, timeout: float) -> Lookup:
        """The lookup tool, called with ``{"idempotency_key": A}`` (and ``"fence": true`` when it fences), answers:

        - ``{"found": false}``: no record of the key (proves nothing); with ``"fenced": true`` to a fence: the
          key is fenced, never to be applied (the only proof of "not applied")
        - the write's own answer (its receipt fields): APPLIED, SUCCEEDED
        - isError with ``{"found": true, "reason", "message"?}``: the write was refused: APPLIED, FAILED
        - any other isError, a JSON-RPC error or no answer: the lookup failed, ask again later
        """
        spec = tool.adapter
        if not spec.mcp_lookup:
            return Lookup(LookupKind.UNREACHABLE, message="no lookup declared")
        try:
            headers = _headers(meta, key=False)
        except NotSendable as exc:
            return Lookup(LookupKind.UNREADABLE, message=exc.message)
        ask: dict[str, Any] = {"idempotency_key": meta.idempotency_key}
        if fence:
            ask["fence"] = True
        answer = await self.call(spec.target, spec.mcp_lookup, ask, headers, timeout)
        result = answer.result
        if result is None:
            outcome = classify(tool, answer, write=True)
            no_verdict = outcome.kind is Kind.FAILED and outcome.reason != Reason.NOT_SENT  # refused: misconfigured
            if no_verdict or outcome.reason in (Reason.RECEIPT_INVALID, Reason.DOWNSTREAM_REDIRECT):
                return Lookup(LookupKind.UNREADABLE, message=f"{outcome.reason}: {outcome.message}")
            return Lookup(LookupKind.UNREACHABLE, message=f"{outcome.reason}: {outcome.message}")
        body = answer_of(result)[0]
        found = body.get("found") if isinstance(body, dict) else None
        if result.is_error and found is not True:
            return Lookup(LookupKind.UNREACHABLE, message=f"the lookup failed: {_refusal(result, body).message}")
        if found is False:
            fenced = fence and isinstance(body, dict) and body.get("fenced") is True
            return Lookup(LookupKind.ABSENT_FENCED if fenced else LookupKind.ABSENT_UNFENCED)
        outcome = _from_result(tool, result, write=True)
        if outcome.kind is Kind.UNKNOWN:
            return Lookup(LookupKind.UNREADABLE, message=f"{outcome.reason}: {outcome.message}")
        return Lookup(LookupKind.APPLIED, outcome)


def _headers(meta: CallMeta, *, key: bool) -> dict[str, str]:
    """The call's HTTP headers (the key only on a write's execute); raises NotSendable for one that cannot be
    written as a header (nothing is sent)."""
    headers = meta.wire_headers()
    if not key:
        headers.pop("Idempotency-Key", None)
    for name, value in headers.items():
        if any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
            raise NotSendable(Reason.REQUEST_NOT_BUILDABLE, f"the header {name} cannot be sent (a control character)")
    return headers


def answer_of(result: CallToolResult) -> tuple[Any, str]:
    """The answer a receipt is read from: structuredContent, else the first text content as JSON (else the text
    itself); and why no JSON came ("" when it did)."""
    if result.structured_content is not None:
        return result.structured_content, ""
    texts = [block.text for block in result.content if isinstance(block, TextContent)]
    if not texts:
        return None, "it carries neither structured nor text content"
    try:
        return json.loads(texts[0], parse_constant=not_json), ""
    except (ValueError, RecursionError):
        return "\n".join(texts), "its text content is not JSON"


def _refusal(result: CallToolResult, body: Any) -> Outcome:
    """An isError result: FAILED with the answer's reason (UPPER_SNAKE) else MCP_TOOL_ERROR, and its message."""
    reason = body.get("reason") if isinstance(body, dict) else None
    message = body.get("message") if isinstance(body, dict) else None
    if not isinstance(message, str) or not message:
        message = (
            next((b.text for b in result.content if isinstance(b, TextContent)), "") or "the tool answered isError"
        )
    if not isinstance(reason, str) or not UPPER_SNAKE.match(reason):
        reason = Reason.MCP_TOOL_ERROR
    return Outcome(Kind.FAILED, reason, message[:500], status="isError", body=body)


def _from_result(tool: Tool, result: CallToolResult, *, write: bool) -> Outcome:
    body, _ = answer_of(result)
    if result.is_error:
        return _refusal(result, body)
    problem, resource_id, resource_version = receipt_fields(tool, body)
    if problem and write:
        return _unusable(problem, write=True, status="result", body=body)
    return Outcome(
        Kind.SUCCEEDED, status="result", body=body, resource_id=resource_id, resource_version=resource_version
    )


def _unusable(problem: str, *, write: bool, status: str = "", body: Any = None) -> Outcome:
    if write:
        return Outcome(
            Kind.UNKNOWN,
            Reason.RECEIPT_INVALID,
            f"the MCP server answered but {problem}; the write may have been applied: reconciliation will ask by "
            "idempotency key",
            status=status,
            body=body,
        )
    return Outcome(
        Kind.FAILED, Reason.DOWNSTREAM_ANSWER_INVALID, f"the MCP server answered but {problem}", status=status
    )


def classify(tool: Tool, answer: Answer, *, write: bool) -> Outcome:
    """One tools/call as an outcome (docs/design.md §8); ``write`` when a lost answer leaves it UNKNOWN."""
    probe = answer.probe
    if answer.not_sent or probe.not_sent or not probe.entered:
        why = answer.not_sent or probe.not_sent or "the call was given up before it was sent"
        return Outcome(Kind.FAILED, Reason.NOT_SENT, f"{why} ({address(tool)})", retryable=True)
    if probe.problem and 300 <= probe.status < 400:
        return Outcome(
            Kind.UNKNOWN if write else Kind.FAILED, Reason.DOWNSTREAM_REDIRECT, probe.problem, status=str(probe.status)
        )
    if probe.problem:
        return _unusable(probe.problem, write=write, status=str(probe.status))
    if answer.result is not None:
        return _from_result(tool, answer.result, write=write)
    error = answer.error
    if error is not None and error.code in REFUSALS:
        return Outcome(
            Kind.FAILED,
            Reason.MCP_REQUEST_REFUSED,
            f"the MCP server refused the call before running it ({error.code}: {error.message[:300]})",
            status=f"error {error.code}",
        )
    if 400 <= probe.status < 500 and probe.status not in (408, 429):
        detail = f" ({error.message[:300]})" if error is not None else ""
        return Outcome(
            Kind.FAILED, f"HTTP_{probe.status}", f"the MCP endpoint refused the request: HTTP {probe.status}{detail}"
        )
    if probe.lost:
        timed_out = "deadline" in probe.lost
        reason = Reason.DOWNSTREAM_TIMEOUT if timed_out else Reason.DOWNSTREAM_CONNECTION_LOST
        return Outcome(Kind.UNKNOWN, reason, f"{probe.lost} after the call was sent")
    unreadable = error is not None and error.code == PARSE_ERROR and 200 <= probe.status < 300
    if answer.failure or unreadable:
        detail = answer.failure or (error.message if error is not None else "")
        return _unusable(f"not with a CallToolResult ({detail[:300]})", write=write, status=str(probe.status))
    assert error is not None
    if error.code == REQUEST_TIMEOUT:
        return Outcome(Kind.UNKNOWN, Reason.DOWNSTREAM_TIMEOUT, "no answer before the deadline")
    if error.code == CONNECTION_CLOSED:
        return Outcome(Kind.UNKNOWN, Reason.DOWNSTREAM_CONNECTION_LOST, f"the answer was lost: {error.message[:300]}")
    return Outcome(
        Kind.UNKNOWN,
        Reason.DOWNSTREAM_MCP_ERROR,
        f"the MCP server answered a JSON-RPC error {error.code}: {error.message[:300]}",
        status=f"error {error.code}",
    )
