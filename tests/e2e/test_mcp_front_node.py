"""The MCP front door from a host written by others: the official TypeScript SDK (@modelcontextprotocol/sdk, run with
Node) over real Streamable HTTP, against a sidecar process, a real redis-server and the recording todo service
(issue 15, tests). A missing Node.js fails with what to install; it never skips."""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from countersign.testing.processes import ROOT
from countersign.testing.stack import Stack, start_stack

HOST_DIR = ROOT / "examples" / "clients" / "mcp-node"


@pytest.fixture(scope="module")
def mstack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    yield from start_stack(tmp_path_factory.mktemp("mcp-node"), ["--mcp-listen", "127.0.0.1:0"])


@pytest.fixture(scope="module")
def node() -> str:
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.fail("Node.js and npm are required (Debian: apt-get install nodejs npm; Node >= 18); .ci/run has them")
    lock, installed = HOST_DIR / "package-lock.json", HOST_DIR / "node_modules" / ".package-lock.json"
    if not installed.exists() or installed.stat().st_mtime < lock.stat().st_mtime:
        done = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund"], cwd=HOST_DIR, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, f"npm ci in {HOST_DIR}:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    return node


def host(node: str, stack: Stack, scenario: str, title: str = "", turn: str = "") -> dict[str, Any]:
    args = [node, "scenarios.mjs", str(stack.sidecar.info["mcp"]), scenario]
    args += [title or "ts " + uuid.uuid4().hex[:8], turn or "ts-" + uuid.uuid4().hex]
    done = subprocess.run(args, cwd=HOST_DIR, capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["protocol"] == "2025-11-25"
    return out


def creates(stack: Stack, title: str) -> list[dict[str, Any]]:
    return [
        e
        for e in stack.todo.requests(path="/todos")
        if e["method"] == "POST" and isinstance(e["body"], dict) and e["body"].get("title") == title
    ]


def test_ts_host_lists_the_enabled_tools_with_their_schemas(node: str, mstack: Stack) -> None:
    tools = {t["name"]: t for t in host(node, mstack, "list")["tools"]}
    assert set(tools) == {"list_todos", "create_todo", "set_todo_status", "delete_todo"}
    assert tools["create_todo"]["inputSchema"]["additionalProperties"] is False
    assert tools["list_todos"]["annotations"]["readOnlyHint"] is True
    assert tools["create_todo"]["meta"]["io.countersign/risk"] == "low"


def test_ts_host_reads_at_once(node: str, mstack: Stack) -> None:
    result = host(node, mstack, "read")["result"]
    assert result["isError"] is False and "todos" in result["structuredContent"]


def test_ts_host_write_through_form_elicitation_runs_once(node: str, mstack: Stack) -> None:
    title = "ts accept " + uuid.uuid4().hex[:8]
    out = host(node, mstack, "accept", title)
    assert len(out["asked"]) == 1 and title in out["asked"][0]["message"]
    result = out["result"]
    assert result["structuredContent"]["state"] == "SUCCEEDED", result
    action = result["structuredContent"]["action"]
    assert action["receipt"]["resource_id"]
    assert len(creates(mstack, title)) == 1
    assert len(mstack.todo.writes(action["action_id"])) == 1


def test_ts_host_decline_is_rejected_and_nothing_runs(node: str, mstack: Stack) -> None:
    title = "ts decline " + uuid.uuid4().hex[:8]
    result = host(node, mstack, "decline", title)["result"]
    assert result["isError"] is True and result["structuredContent"]["state"] == "REJECTED"
    assert creates(mstack, title) == []


def test_ts_host_without_elicitation_gets_the_card_and_nothing_runs(node: str, mstack: Stack) -> None:
    title = "ts none " + uuid.uuid4().hex[:8]
    turn = "ts-" + uuid.uuid4().hex
    first = host(node, mstack, "none", title, turn)["result"]
    again = host(node, mstack, "none", title, turn)["result"]  # another process, the same call: the same card
    assert first["structuredContent"]["state"] == "CONFIRMATION_REQUIRED"
    card = first["structuredContent"]["card"]
    assert card["preview"]["target"] == title and card["expires_at"]
    assert again["structuredContent"]["card"]["action_id"] == card["action_id"]
    assert creates(mstack, title) == []
