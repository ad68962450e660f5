"""Hostile input over MCP (issue 15, tests): the property-based attack of tests/e2e/test_hostile_input.py (arbitrary
JSON arguments, arbitrary tool names, arbitrary bytes as the body), sent as raw JSON-RPC over Streamable HTTP to a
real sidecar process with --mcp-listen. Properties:

* every answer is a JSON-RPC response: an error with a code other than -32603 (internal error) and a message, or a
  tool result; a tool error names an UPPER_SNAKE reason (or is a refusal with its guidance);
* the HTTP status is 200, 202, 400, 404 or 413, never 5xx;
* the downstream saw no write during the whole run (prepares and by-key lookups only): a client that declares no
  elicitation gets cards, and no hostile input confirms one.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from countersign.testing.mcp_front import identity
from countersign.testing.stack import Stack, start_stack

REASON = re.compile(r"^[A-Z][A-Z0-9]*(_[A-Z0-9]+)*$")
TOOLS = ["create_todo", "set_todo_status", "delete_todo", "list_todos", "delete_note", "delete_account"]
KEYS = ["title", "taskTitle", "dueAt", "deadline", "priority", "importance", "id", "status", "version"]
HOSTILE = settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
)

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=2**53, max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40)
)
json_keys = st.sampled_from(KEYS) | st.text(max_size=16)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(json_keys, inner, max_size=4),
    max_leaves=25,
)
tool_names = st.sampled_from(TOOLS) | st.text(max_size=64)


class Session:
    """One MCP session spoken by hand: initialize, then any message, answers parsed from JSON or SSE."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.http = httpx2.Client(timeout=30)
        self.headers = {
            **identity(),
            "Accept": "application/json, text/event-stream",
            "Content-Type": "application/json",
        }
        status, init = self.send(
            {
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {},
                    "clientInfo": {"name": "h", "version": "0"},
                },
            }
        )
        assert status == 200 and "result" in init, init
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, message: Any) -> tuple[int, Any]:
        return self.post(json.dumps(message).encode())

    def post(self, body: bytes) -> tuple[int, Any]:
        response = self.http.post(self.url, content=body, headers=self.headers)
        if "mcp-session-id" in response.headers:
            self.headers["Mcp-Session-Id"] = response.headers["mcp-session-id"]
        if response.status_code == 202 or not response.content:
            return response.status_code, None
        if response.headers.get("content-type", "").startswith("text/event-stream"):
            # SSE lines end at CR, LF or CRLF only (str.splitlines would also cut at U+0085 or U+2028 in the JSON)
            lines = re.split(r"\r\n|\r|\n", response.text)
            data = [line[5:].strip() for line in lines if line.startswith("data:")]
            return response.status_code, json.loads(data[-1])
        return response.status_code, response.json()


@pytest.fixture(scope="module")
def mcp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Stack, Session]]:
    stacks = start_stack(tmp_path_factory.mktemp("mcp-hostile"), ["--mcp-listen", "127.0.0.1:0"])
    stack = next(stacks)
    yield stack, Session(str(stack.sidecar.info["mcp"]))
    next(stacks, None)


def check(status: int, answer: Any) -> None:
    assert status in (200, 202, 400, 404, 413), (status, answer)
    if answer is None:
        return
    assert isinstance(answer, dict) and answer.get("jsonrpc") == "2.0", answer
    if "error" in answer:
        assert isinstance(answer["error"].get("code"), int) and answer["error"]["code"] != -32603, answer
        assert answer["error"].get("message"), answer
        return
    result = answer["result"]
    if result.get("isError"):
        found = result.get("structuredContent") or {}
        if "error" in found:
            assert REASON.match(found["error"]["reason"]) and found["error"]["message"], found
        else:
            assert found.get("state") in ("REFUSED", "REJECTED"), found


@HOSTILE
@given(tool=tool_names, value=json_values | st.dictionaries(json_keys, json_values, max_size=6))
def test_arbitrary_tools_and_arguments(mcp: tuple[Stack, Session], tool: str, value: Any) -> None:
    _, session = mcp
    message = {
        "jsonrpc": "2.0",
        "id": uuid.uuid4().hex,
        "method": "tools/call",
        "params": {"name": tool, "arguments": value, "_meta": {"io.countersign/turn": uuid.uuid4().hex}},
    }
    check(*session.send(message))


@HOSTILE
@given(body=st.binary(max_size=512) | st.text(max_size=256).map(str.encode))
def test_arbitrary_bodies(mcp: tuple[Stack, Session], body: bytes) -> None:
    _, session = mcp
    check(*session.post(body))


def test_no_write_reached_the_downstream(mcp: tuple[Stack, Session]) -> None:
    stack, _ = mcp
    writes = [
        e
        for e in stack.todo.requests()
        if e["method"] in ("POST", "PUT", "PATCH", "DELETE")
        and e["path"] != "/todos/prepare"
        and "/by-key/" not in e["path"]
    ]
    assert writes == []
    assert stack.sidecar.alive()
