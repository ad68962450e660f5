"""The MCP adapter (issue 15, the back door) against servers on loopback that write exactly the bytes a test
scripts: initialize, the tools/call answer (JSON or an SSE stream, whole, cut, oversize, encoded, redirected,
refused), a session the server dropped. Classification as docs/design.md §8 says it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from countersign import registry
from countersign.adapters import mcp
from countersign.adapters.base import CallMeta, Kind, LookupKind, PrepareRefused, PrepareUnavailable
from countersign.registry import Registry
from countersign.testing.downstreams import Raw, Seen, Step, answer
from countersign.testing.faults import free_port

KEY = "k" * 32
TRACE = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
META = CallMeta(
    idempotency_key=KEY,
    policy_version="mcp.1",
    tenant_id="t1",
    actor_id="alice",
    subject_id="alice",
    trace_headers=lambda: {"traceparent": TRACE},
)
TODO = {"id": "t_1", "version": 3, "title": "t"}


@pytest.fixture
async def adapter() -> AsyncIterator[mcp.McpAdapter]:
    a = mcp.McpAdapter(max_answer_bytes=64 * 1024)
    yield a
    await a.close()


def tools(url: str) -> Registry:
    closed = {"type": "object", "additionalProperties": False, "properties": {"title": {"type": "string"}}}
    doc = {
        "policy_version": "mcp.1",
        "capabilities": [
            {"id": "thing.create", "status": "enabled", "tool": "create_thing", "risk": "low"},
            {"id": "thing.read", "status": "enabled", "tool": "read_things", "risk": "low"},
            {"id": "plain.create", "status": "enabled", "tool": "create_plain", "risk": "low"},
        ],
        "tools": [
            {
                "name": "create_thing",
                "capability": "thing.create",
                "is_write": True,
                "roles": ["user"],
                "schema": closed,
                "adapter": {
                    "kind": "mcp",
                    "url": f"{url}/mcp",
                    "tool": "make_thing",
                    "lookup": {"tool": "find_thing", "fence": True},
                    "prepare": {"tool": "prepare_thing"},
                },
                "receipt": {"resource_id": "id", "resource_version": "version"},
            },
            {
                "name": "read_things",
                "capability": "thing.read",
                "is_write": False,
                "roles": ["user"],
                "schema": closed,
                "adapter": {"kind": "mcp", "url": f"{url}/mcp", "tool": "list_things"},
            },
            {
                "name": "create_plain",
                "capability": "plain.create",
                "is_write": True,
                "roles": ["user"],
                "schema": closed,
                "adapter": {"kind": "mcp", "url": f"{url}/mcp", "tool": "make_plain"},
            },
        ],
    }
    return registry.build(doc, "mcp.yaml")


Answer = Callable[[dict[str, Any]], list[Step]]


def rpc(message: dict[str, Any], result: Any, **kw: Any) -> list[Step]:
    return answer(200, {"jsonrpc": "2.0", "id": message["id"], "result": result}, **kw)


def tool_result(structured: Any = None, text: str | None = None, is_error: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {"content": [{"type": "text", "text": text if text is not None else json.dumps(structured)}]}
    if structured is not None:
        out["structuredContent"] = structured
    if is_error:
        out["isError"] = True
    return out


class Server:
    """An MCP server by hand: it initialises sessions (s-1, s-2, ...), refuses the GET stream, accepts
    notifications, and answers each tools/call with ``on_call(message)``; ``drop`` forgets every session."""

    def __init__(self, raw: Raw, on_call: Answer) -> None:
        self.raw, self.on_call, self.sessions, self.live = raw, on_call, 0, set[str]()
        raw.script = self.script

    def script(self, seen: Seen) -> list[Step]:
        if seen.method in ("GET", "DELETE"):
            return answer(405, b"")
        message = json.loads(seen.body)
        if message.get("method") == "initialize":
            self.sessions += 1
            self.live.add(f"s-{self.sessions}")
            result = {
                "protocolVersion": "2025-11-25",
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "by-hand", "version": "1"},
            }
            return rpc(message, result, headers={"Mcp-Session-Id": f"s-{self.sessions}"})
        if seen.headers.get("mcp-session-id") not in self.live:
            return answer(
                404, {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": "Session not found"}}
            )
        if "id" not in message:
            return answer(202, b"")
        return self.on_call(message)

    def calls(self) -> list[tuple[Seen, dict[str, Any]]]:
        out = []
        for seen in self.raw.seen:
            if seen.method == "POST" and json.loads(seen.body).get("method") == "tools/call":
                out.append((seen, json.loads(seen.body)))
        return out


def serve(raw: Raw, on_call: Answer) -> Server:
    return Server(raw, on_call)


async def create(adapter: mcp.McpAdapter, raw: Raw, tool: str = "create_thing", timeout: float = 10.0) -> Any:
    return await adapter.execute(tools(raw.url).tools[tool], {"title": "t"}, META, timeout)


# -- what a write's call carries ----------------------------------------------------------------------------


async def test_a_write_carries_the_key_in_meta_and_as_a_header_with_the_headers_every_adapter_sends(
    raw: Raw, adapter: mcp.McpAdapter
) -> None:
    server = serve(raw, lambda m: rpc(m, tool_result(TODO)))
    meta = META._replace(if_match="7")
    outcome = await adapter.execute(tools(raw.url).tools["create_thing"], {"title": "t"}, meta, 2.0)
    assert (outcome.kind, outcome.resource_id, outcome.resource_version) == (Kind.SUCCEEDED, "t_1", "3")
    [(seen, message)] = server.calls()
    assert message["params"]["name"] == "make_thing" and message["params"]["arguments"] == {"title": "t"}
    # the key, and the trace context when a tracer provider records spans (another test may have set one up)
    meta = message["params"]["_meta"]
    assert meta["io.countersign/idempotency-key"] == KEY and set(meta) <= {mcp.KEY_META, "traceparent", "tracestate"}
    headers = seen.headers
    assert headers["idempotency-key"] == f'"{KEY}"' and headers["x-countersign-action"] == KEY
    assert headers["traceparent"] == TRACE and headers["if-match"] == '"7"'
    assert (headers["x-countersign-tenant"], headers["x-countersign-actor"], headers["x-countersign-subject"]) == (
        "t1",
        "alice",
        "alice",
    )
    assert headers["x-countersign-policy-version"] == "mcp.1" and headers["x-countersign-attempt"] == "1"
    assert headers["accept-encoding"] == "identity" and headers["mcp-session-id"] == "s-1"
    assert [s.method for s in raw.seen].count("GET") == 0, "no standalone stream is opened"
    initialize = json.loads(raw.seen[0].body)
    assert initialize["method"] == "initialize" and "idempotency-key" not in raw.seen[0].headers


async def test_one_session_serves_many_calls_and_twenty_at_once(raw: Raw, adapter: mcp.McpAdapter) -> None:
    server = serve(raw, lambda m: rpc(m, tool_result({**TODO, "id": m["params"]["_meta"][mcp.KEY_META]})))
    tool = tools(raw.url).tools["create_thing"]
    keys = [f"{i:032d}" for i in range(20)]
    outcomes = await asyncio.gather(
        *(adapter.execute(tool, {"title": "t"}, CallMeta(idempotency_key=k), 3.0) for k in keys)
    )
    assert [o.resource_id for o in outcomes] == keys
    assert server.sessions == 1 and len(server.calls()) == 20


async def test_an_answer_lost_on_one_call_leaves_the_other_calls_on_the_session_alone(
    raw: Raw, adapter: mcp.McpAdapter
) -> None:
    def on_call(m: dict[str, Any]) -> list[Step]:
        if m["params"]["arguments"]["title"] == "cut":
            return [*answer(200, {"jsonrpc": "2.0", "id": m["id"], "result": tool_result(TODO)}, length=5000)]
        return [0.3, *rpc(m, tool_result(TODO))]

    serve(raw, on_call)
    tool = tools(raw.url).tools["create_thing"]
    cut, fine = await asyncio.gather(
        adapter.execute(tool, {"title": "cut"}, META, 2.0), adapter.execute(tool, {"title": "fine"}, META, 2.0)
    )
    assert (cut.kind, cut.reason) == (Kind.UNKNOWN, "DOWNSTREAM_CONNECTION_LOST"), cut
    assert fine.kind is Kind.SUCCEEDED, fine


# -- the answer ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "result",
    [
        tool_result(TODO),
        tool_result(text=json.dumps(TODO)),  # no structuredContent: the first text block as JSON
        {"content": [{"type": "text", "text": json.dumps(TODO)}, {"type": "text", "text": "and more"}]},
    ],
    ids=["structured", "JSON text", "JSON text first"],
)
async def test_the_receipt_comes_from_structured_content_else_from_the_json_text(
    raw: Raw, adapter: mcp.McpAdapter, result: dict[str, Any]
) -> None:
    serve(raw, lambda m: rpc(m, result))
    outcome = await create(adapter, raw)
    assert (outcome.kind, outcome.resource_id, outcome.resource_version, outcome.status) == (
        Kind.SUCCEEDED,
        "t_1",
        "3",
        "result",
    )


@pytest.mark.parametrize(
    ("result", "reason", "message"),
    [
        (tool_result({"reason": "THING_QUOTA", "message": "too many"}, is_error=True), "THING_QUOTA", "too many"),
        (tool_result(text="it broke", is_error=True), "MCP_TOOL_ERROR", "it broke"),
        (tool_result({"reason": "not upper snake"}, text="odd", is_error=True), "MCP_TOOL_ERROR", "odd"),
    ],
)
async def test_is_error_is_failed_with_the_answers_reason(
    raw: Raw, adapter: mcp.McpAdapter, result: dict[str, Any], reason: str, message: str
) -> None:
    serve(raw, lambda m: rpc(m, result))
    for tool in ("create_thing", "read_things"):
        outcome = await create(adapter, raw, tool)
        assert (outcome.kind, outcome.reason, outcome.message, outcome.status) == (
            Kind.FAILED,
            reason,
            message,
            "isError",
        )


def _sse(message: dict[str, Any], result: Any, pad: int = 0, split: tuple[int, ...] = ()) -> list[Step]:
    """The answer as an SSE stream: a comment (``pad`` bytes of it), then the event with the result."""
    event = b"event: message\ndata: " + json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}).encode()
    body = b": " + b"x" * pad + b"\n\n" + event + b"\n\n"
    return answer(200, body, headers={"Content-Type": "text/event-stream"}, split=split, chunked=bool(split))


BROKEN: dict[str, Answer] = {
    "lacks the receipt field": lambda m: rpc(m, tool_result({"version": 1})),
    "text that is not JSON": lambda m: rpc(m, tool_result(text="created!")),
    "no CallToolResult": lambda m: rpc(m, {"hello": "world"}),
    "not JSON-RPC": lambda m: answer(200, b"<html>created</html>"),
    "not JSON at all, as text/html": lambda m: answer(
        200, b"<html>created</html>", headers={"Content-Type": "text/html"}
    ),
    "empty": lambda m: answer(200, b""),
    "oversize by Content-Length": lambda m: answer(200, b"{}", length=64 * 1024 + 1),
    "oversize, chunked": lambda m: rpc(
        m, tool_result({**TODO, "pad": "x" * 70_000}), split=(100, 30_000), chunked=True
    ),
    "oversize, in an SSE stream": lambda m: _sse(m, tool_result(TODO), pad=70_000),
    "content-encoded": lambda m: rpc(m, tool_result(TODO), gzipped=True),
    "a JSON-RPC error whose code says nothing": lambda m: answer(
        200, {"jsonrpc": "2.0", "id": m["id"], "error": {"code": -32099, "message": "server error"}}
    ),
    "500": lambda m: answer(500, b"oops"),
}
UNKNOWN_REASON = {
    "not JSON-RPC": "RECEIPT_INVALID",
    "no CallToolResult": "RECEIPT_INVALID",
    "a JSON-RPC error whose code says nothing": "DOWNSTREAM_MCP_ERROR",
    "500": "DOWNSTREAM_MCP_ERROR",
    "empty": "RECEIPT_INVALID",
    "not JSON at all, as text/html": "DOWNSTREAM_MCP_ERROR",
}


@pytest.mark.parametrize("how", list(BROKEN))
async def test_an_unusable_answer_to_a_write_is_unknown(raw: Raw, adapter: mcp.McpAdapter, how: str) -> None:
    server = serve(raw, BROKEN[how])
    outcome = await create(adapter, raw)
    assert (outcome.kind, outcome.reason) == (Kind.UNKNOWN, UNKNOWN_REASON.get(how, "RECEIPT_INVALID")), outcome
    assert outcome.resource_id == ""
    assert len(server.calls()) == 1, "never re-sent"


@pytest.mark.parametrize("how", ["text that is not JSON", "oversize, chunked", "oversize, in an SSE stream"])
async def test_an_answer_a_read_can_use_or_not(raw: Raw, adapter: mcp.McpAdapter, how: str) -> None:
    serve(raw, BROKEN[how])
    outcome = await create(adapter, raw, "read_things")
    if how == "text that is not JSON":  # a read's answer may be plain text
        assert (outcome.kind, outcome.body) == (Kind.SUCCEEDED, "created!")
    else:
        assert (outcome.kind, outcome.reason) == (Kind.FAILED, "DOWNSTREAM_ANSWER_INVALID"), outcome


@pytest.mark.parametrize(
    "how",
    [
        lambda m: rpc(m, tool_result(TODO), split=(7,), pause=0.1),
        lambda m: rpc(m, tool_result(TODO), split=(1, 2, 30, 31), chunked=True),
        lambda m: _sse(m, tool_result(TODO), split=(3, 30, 31, 60)),
    ],
    ids=["two segments", "chunked in pieces", "an SSE stream"],
)
async def test_an_answer_in_pieces_is_read_whole(raw: Raw, adapter: mcp.McpAdapter, how: Answer) -> None:
    serve(raw, how)
    outcome = await create(adapter, raw)
    assert (outcome.kind, outcome.resource_id) == (Kind.SUCCEEDED, "t_1"), outcome


async def test_a_stream_that_trickles_past_the_deadline_is_closed_and_unknown(
    raw: Raw, adapter: mcp.McpAdapter
) -> None:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    comment = b"3\r\n:\n\n\r\n"
    serve(raw, lambda m: [head, *([comment, 0.2] * 100)])  # 20 s of keep-alive comments, never an answer
    started = asyncio.get_running_loop().time()
    outcome = await create(adapter, raw, timeout=1.0)
    assert (outcome.kind, outcome.reason) == (Kind.UNKNOWN, "DOWNSTREAM_TIMEOUT"), outcome
    if raw.handlers:  # each handler ends when a write to its connection fails
        await asyncio.wait(set(raw.handlers), timeout=8)
    assert not raw.handlers, "the connection was closed: the server's writes failed"
    assert asyncio.get_running_loop().time() - started < 5, "soon after the deadline, not when the server stops"


async def test_an_answer_to_another_request_is_no_answer(raw: Raw, adapter: mcp.McpAdapter) -> None:
    serve(raw, lambda m: rpc({**m, "id": 999}, tool_result(TODO)))
    outcome = await create(adapter, raw, timeout=1.0)
    assert (outcome.kind, outcome.reason) == (Kind.UNKNOWN, "DOWNSTREAM_TIMEOUT"), outcome


async def test_a_write_that_declares_no_receipt_accepts_any_result(raw: Raw, adapter: mcp.McpAdapter) -> None:
    serve(raw, lambda m: rpc(m, tool_result(text="done")))
    assert (await create(adapter, raw, "create_plain")).kind is Kind.SUCCEEDED


@pytest.mark.parametrize("code", [-32601, -32602])
async def test_a_json_rpc_error_raised_before_any_tool_ran_is_failed(
    raw: Raw, adapter: mcp.McpAdapter, code: int
) -> None:
    serve(raw, lambda m: answer(200, {"jsonrpc": "2.0", "id": m["id"], "error": {"code": code, "message": "no"}}))
    outcome = await create(adapter, raw)
    assert (outcome.kind, outcome.reason) == (Kind.FAILED, "MCP_REQUEST_REFUSED"), outcome


@pytest.mark.parametrize("status", [400, 401, 403, 413])
async def test_an_http_refusal_of_the_post_is_failed(raw: Raw, adapter: mcp.McpAdapter, status: int) -> None:
    serve(raw, lambda m: answer(status, {"error": "no"}))
    outcome = await create(adapter, raw)
    assert (outcome.kind, outcome.reason) == (Kind.FAILED, f"HTTP_{status}"), outcome


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
async def test_a_redirect_is_never_followed(
    raw: Raw, adapter: mcp.McpAdapter, elsewhere: tuple[str, list[str]], status: int
) -> None:
    there, seen = elsewhere
    for location in (f"{raw.url}/mcp-moved", f"{there}/mcp"):
        serve(raw, lambda m, to=location: answer(status, b"", headers={"Location": to}))
        write = await create(adapter, raw)
        assert (write.kind, write.reason) == (Kind.UNKNOWN, "DOWNSTREAM_REDIRECT"), write
        read = await create(adapter, raw, "read_things")
        assert (read.kind, read.reason) == (Kind.FAILED, "DOWNSTREAM_REDIRECT"), read
        found = await adapter.lookup(tools(raw.url).tools["create_thing"], META, True, 2.0)
        assert found.kind is LookupKind.UNREADABLE
    assert not [s for s in raw.seen if s.target != "/mcp"], "the moved-to path saw nothing"
    assert seen == [], "the host the redirect named saw nothing"


# -- nothing sent, something sent -------------------------------------------------------------------------


async def test_a_server_that_is_not_there_is_not_sent(adapter: mcp.McpAdapter) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    outcome = await adapter.execute(tools(url).tools["create_thing"], {"title": "t"}, META, 2.0)
    assert (outcome.kind, outcome.reason, outcome.retryable) == (Kind.FAILED, "NOT_SENT", True), outcome
    assert "cannot connect" in outcome.message and f"{url}/mcp" in outcome.message


async def test_a_server_gone_under_a_live_session_is_not_sent_and_the_next_call_opens_a_new_one(
    adapter: mcp.McpAdapter,
) -> None:
    raw = await Raw().start()
    port = int(raw.url.rsplit(":", 1)[1])
    serve(raw, lambda m: rpc(m, tool_result(TODO)))
    assert (await create(adapter, raw)).kind is Kind.SUCCEEDED
    await raw.stop()  # the port refuses connections now
    tool = tools(f"http://127.0.0.1:{port}").tools["create_thing"]
    outcome = await adapter.execute(tool, {"title": "t"}, META, 2.0)
    assert (outcome.kind, outcome.reason) == (Kind.FAILED, "NOT_SENT"), outcome
    assert "cannot connect" in outcome.message
    again = Raw()
    again.server = await asyncio.start_server(again._serve, "127.0.0.1", port)
    try:
        server = serve(again, lambda m: rpc(m, tool_result(TODO)))
        assert (await adapter.execute(tool, {"title": "t"}, META, 2.0)).kind is Kind.SUCCEEDED
        assert next(json.loads(s.body).get("method") for s in again.seen if s.method == "POST") == "initialize"
        assert server.sessions == 1 and len(server.calls()) == 1
    finally:
        await again.stop()


@pytest.mark.parametrize(
    "initialize",
    [lambda m: answer(500, b"no"), lambda m: answer(200, b"garbage"), lambda m: [5.0]],
    ids=["500", "garbage", "no answer"],
)
async def test_a_session_that_cannot_be_initialised_sends_no_call(
    raw: Raw, adapter: mcp.McpAdapter, initialize: Answer
) -> None:
    server = serve(raw, lambda m: rpc(m, tool_result(TODO)))
    raw.script = lambda seen: initialize(json.loads(seen.body)) if seen.method == "POST" else answer(405, b"")
    outcome = await create(adapter, raw, timeout=1.0)
    assert (outcome.kind, outcome.reason) == (Kind.FAILED, "NOT_SENT"), outcome
    assert server.calls() == []


async def test_a_call_that_gets_no_answer_is_unknown_not_unsent(raw: Raw, adapter: mcp.McpAdapter) -> None:
    server = serve(raw, lambda m: [5.0])
    outcome = await create(adapter, raw, timeout=1.0)
    assert (outcome.kind, outcome.reason) == (Kind.UNKNOWN, "DOWNSTREAM_TIMEOUT"), outcome
    assert len(server.calls()) == 1


async def test_a_session_the_server_dropped_is_opened_again_and_the_call_sent_once_more(
    raw: Raw, adapter: mcp.McpAdapter
) -> None:
    server = serve(raw, lambda m: rpc(m, tool_result(TODO)))
    assert (await create(adapter, raw)).kind is Kind.SUCCEEDED
    server.live.clear()  # the server forgets its sessions: it answers 404 to s-1, before any tool runs
    outcome = await create(adapter, raw)
    assert outcome.kind is Kind.SUCCEEDED, outcome
    sessions = [seen.headers["mcp-session-id"] for seen, _ in server.calls()]
    assert sessions == ["s-1", "s-1", "s-2"] and server.sessions == 2
    server.live.clear()
    server.on_call = lambda m: answer(404, b"")  # a 404 to the new session too: not a third try
    outcome = await create(adapter, raw)
    assert (outcome.kind, outcome.reason) == (Kind.FAILED, "HTTP_404"), outcome
    assert len(server.calls()) == 5


async def test_a_header_that_cannot_be_written_sends_nothing(raw: Raw, adapter: mcp.McpAdapter) -> None:
    serve(raw, lambda m: rpc(m, tool_result(TODO)))
    tool = tools(raw.url).tools["create_thing"]
    bad = await adapter.execute(tool, {"title": "t"}, CallMeta(idempotency_key=KEY, tenant_id="t\r\nX-Evil: 1"), 2.0)
    assert (bad.kind, bad.reason) == (Kind.FAILED, "REQUEST_NOT_BUILDABLE")
    version = await adapter.execute(tool, {"title": "t"}, CallMeta(idempotency_key=KEY, if_match='a"b'), 2.0)
    assert (version.kind, version.reason) == (Kind.FAILED, "RESOURCE_VERSION_INVALID")
    assert raw.seen == []


# -- lookup and prepare -------------------------------------------------------------------------------------


LOOKUPS: list[tuple[str, Answer, bool, LookupKind]] = [
    ("not found", lambda m: rpc(m, tool_result({"found": False})), False, LookupKind.ABSENT_UNFENCED),
    ("fenced", lambda m: rpc(m, tool_result({"found": False, "fenced": True})), True, LookupKind.ABSENT_FENCED),
    (
        "fenced, not asked",
        lambda m: rpc(m, tool_result({"found": False, "fenced": True})),
        False,
        LookupKind.ABSENT_UNFENCED,
    ),
    ("applied", lambda m: rpc(m, tool_result(TODO)), True, LookupKind.APPLIED),
    ("applied, lacks the receipt", lambda m: rpc(m, tool_result({"title": "t"})), True, LookupKind.UNREADABLE),
    ("the lookup failed", lambda m: rpc(m, tool_result(text="db down", is_error=True)), True, LookupKind.UNREACHABLE),
    (
        "refused by the tool",
        lambda m: rpc(m, tool_result({"found": True, "reason": "THING_INVALID"}, is_error=True)),
        True,
        LookupKind.APPLIED,
    ),
    (
        "no such tool",
        lambda m: answer(200, {"jsonrpc": "2.0", "id": m["id"], "error": {"code": -32602, "message": "unknown"}}),
        True,
        LookupKind.UNREADABLE,
    ),
    ("oversize", BROKEN["oversize, chunked"], True, LookupKind.UNREADABLE),
    ("no answer", lambda m: [5.0], True, LookupKind.UNREACHABLE),
]


@pytest.mark.parametrize(("name", "script", "fence", "kind"), LOOKUPS, ids=[c[0] for c in LOOKUPS])
async def test_the_lookup_contract(
    raw: Raw, adapter: mcp.McpAdapter, name: str, script: Answer, fence: bool, kind: LookupKind
) -> None:
    server = serve(raw, script)
    found = await adapter.lookup(tools(raw.url).tools["create_thing"], META, fence, 1.0)
    assert found.kind is kind, found
    [(seen, message)] = server.calls()
    assert message["params"]["name"] == "find_thing"
    assert message["params"]["arguments"] == {"idempotency_key": KEY, **({"fence": True} if fence else {})}
    meta = message["params"].get("_meta", {})
    assert "idempotency-key" not in seen.headers and mcp.KEY_META not in meta, "a lookup carries no key"
    assert set(meta) <= {"traceparent", "tracestate"}
    if name == "applied":
        assert found.outcome is not None and (found.outcome.kind, found.outcome.resource_id) == (Kind.SUCCEEDED, "t_1")
    if name == "refused by the tool":
        assert found.outcome is not None and (found.outcome.kind, found.outcome.reason) == (
            Kind.FAILED,
            "THING_INVALID",
        )


async def test_a_lookup_of_a_server_that_is_not_there_is_unreachable(adapter: mcp.McpAdapter) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    found = await adapter.lookup(tools(url).tools["create_thing"], META, True, 1.0)
    assert found.kind is LookupKind.UNREACHABLE


async def test_prepare_calls_the_prepare_tool_and_passes_on_its_refusal(raw: Raw, adapter: mcp.McpAdapter) -> None:
    prepared = {"arguments": {"title": "T"}, "resource_version": 4, "preview": {"title": "Make", "target": "T"}}
    server = serve(raw, lambda m: rpc(m, tool_result(prepared)))
    tool = tools(raw.url).tools["create_thing"]
    got = await adapter.prepare(tool, {"title": "t"}, CallMeta(locale="en"), 2.0)
    assert (got.arguments, got.resource_version, got.preview) == ({"title": "T"}, "4", {"title": "Make", "target": "T"})
    [(_seen, message)] = server.calls()
    assert message["params"]["name"] == "prepare_thing"
    assert message["params"]["arguments"]["tool"] == "make_thing"
    assert message["params"]["arguments"]["context"]["locale"] == "en"
    server.on_call = lambda m: rpc(m, tool_result({"reason": "THING_DUE_AT_PAST", "message": "past"}, is_error=True))
    with pytest.raises(PrepareRefused) as info:
        await adapter.prepare(tool, {"title": "t"}, CallMeta(), 2.0)
    assert (info.value.reason, info.value.message) == ("THING_DUE_AT_PAST", "past")
    server.on_call = lambda m: rpc(m, tool_result({"nothing": "useful"}))
    with pytest.raises(PrepareUnavailable):
        await adapter.prepare(tool, {"title": "t"}, CallMeta(), 2.0)
    with pytest.raises(PrepareUnavailable):
        await adapter.prepare(tools(f"http://127.0.0.1:{free_port()}").tools["create_thing"], {}, CallMeta(), 1.0)


async def test_the_example_registry_names_the_example_servers_tools() -> None:
    from countersign.testing.processes import MCP_REGISTRY

    spec = registry.load(str(MCP_REGISTRY)).tools["create_todo"].adapter
    assert (spec.kind, spec.mcp_tool, spec.mcp_lookup, spec.mcp_fence, spec.mcp_prepare) == (
        "mcp",
        "create_todo",
        "find_todo_by_key",
        True,
        "prepare_todo",
    )
    assert spec.can_lookup and spec.can_fence
