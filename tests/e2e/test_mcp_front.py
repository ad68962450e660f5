"""The MCP front door (issue 15 items 1, 2 and 4): the official Python SDK client over real Streamable HTTP against
a sidecar process with --mcp-listen, a real redis-server and the recording todo service. Every write is counted
where it lands: in the todo service's request log."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
from mcp.shared.exceptions import MCPError

from countersign.testing.calls import ctx
from countersign.testing.mcp_front import Elicitations, client, identity
from countersign.testing.stack import Stack, start_stack
from countersign.v1 import common_pb2, gateway_pb2


@pytest.fixture(scope="module")
def mstack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    yield from start_stack(tmp_path_factory.mktemp("mcp"), ["--mcp-listen", "127.0.0.1:0"])


def url(stack: Stack) -> str:
    return str(stack.sidecar.info["mcp"])


def turn() -> dict[str, Any]:
    return {"io.countersign/turn": "turn-" + uuid.uuid4().hex}


def title() -> str:
    return "milk " + uuid.uuid4().hex[:8]


def created(stack: Stack, name: str) -> list[dict[str, Any]]:
    """The todo service's writes of a todo with this title."""
    return [
        e
        for e in stack.todo.requests(path="/todos")
        if e.get("method") == "POST" and (e.get("body") or {}).get("title") == name
    ]


async def test_the_endpoint_listens_on_loopback_at_mcp(mstack: Stack) -> None:
    assert url(mstack).startswith("http://127.0.0.1:") and url(mstack).endswith("/mcp")


async def test_tools_list_is_the_registrys_enabled_tools_with_their_closed_schemas(mstack: Stack) -> None:
    async with client(url(mstack)) as c:
        tools = {t.name: t for t in (await c.list_tools()).tools}
    assert set(tools) == {"list_todos", "create_todo", "set_todo_status", "delete_todo"}  # not delete_note/_account
    create = tools["create_todo"]
    assert create.input_schema["additionalProperties"] is False
    assert create.input_schema["required"] == ["title"]
    assert create.annotations is not None and create.annotations.read_only_hint is False
    assert tools["list_todos"].annotations is not None and tools["list_todos"].annotations.read_only_hint is True
    assert create.meta is not None and create.meta["io.countersign/risk"] == "low"
    assert (
        tools["delete_todo"].meta is not None and tools["delete_todo"].meta["io.countersign/confirmation"] == "always"
    )


@pytest.mark.parametrize(
    ("tool", "guidance"),
    [("delete_note", "Delete notes from the notes page for now."), ("delete_account", "The assistant may not")],
)
async def test_a_planned_or_forbidden_capability_answers_its_guidance(mstack: Stack, tool: str, guidance: str) -> None:
    async with client(url(mstack)) as c:
        result = await c.call_tool(tool, {"id": "n1"})
    assert result.is_error
    assert guidance in result.content[0].text  # type: ignore[union-attr]
    assert result.structured_content["state"] == "REFUSED"


async def test_a_read_runs_at_once(mstack: Stack) -> None:
    async with client(url(mstack)) as c:
        result = await c.call_tool("list_todos", {"status": "open"})
    assert not result.is_error, result
    assert "todos" in result.structured_content
    assert any(e["path"].startswith("/todos") and e["method"] == "GET" for e in mstack.todo.requests())


async def test_a_write_confirmed_through_form_elicitation_runs_once_and_returns_its_receipt(mstack: Stack) -> None:
    name = title()
    asked = Elicitations("accept")
    async with client(url(mstack), elicit=asked) as c:
        result = await c.call_tool("create_todo", {"title": name}, meta=turn())
    assert not result.is_error, result
    action = result.structured_content["action"]
    assert result.structured_content["state"] == "SUCCEEDED"
    assert action["receipt"]["resource_id"]
    assert len(asked.asked) == 1 and name in asked.asked[0].message  # the card's preview was shown
    writes = mstack.todo.writes(action["action_id"])
    assert len(writes) == 1, writes
    assert name in result.content[0].text  # type: ignore[union-attr]  # the receipt's summary


async def test_a_declined_write_is_rejected_and_nothing_runs(mstack: Stack) -> None:
    name = title()
    async with client(url(mstack), elicit=Elicitations("decline")) as c:
        result = await c.call_tool("create_todo", {"title": name}, meta=turn())
    assert result.is_error
    assert result.structured_content["state"] == "REJECTED"
    assert result.structured_content["action"]["error"]["reason"] == "REJECTED"
    assert mstack.todo.writes(result.structured_content["action"]["action_id"]) == []
    assert created(mstack, name) == []


async def test_a_cancelled_elicitation_leaves_the_card_ready(mstack: Stack) -> None:
    name = title()
    async with client(url(mstack), elicit=Elicitations("cancel")) as c:
        result = await c.call_tool("create_todo", {"title": name}, meta=turn())
    assert not result.is_error
    assert result.structured_content["state"] == "CONFIRMATION_REQUIRED"
    card = result.structured_content["card"]
    found = mstack.stub().GetAction(
        gateway_pb2.GetActionRequest(context=ctx(session_id="s-mcp", locale="en"), action_id=card["action_id"])
    )
    assert found.action.state == common_pb2.ACTION_STATE_READY
    assert mstack.todo.writes(card["action_id"]) == []


async def test_without_elicitation_the_card_is_returned_and_nothing_runs_until_confirmed(mstack: Stack) -> None:
    name = title()
    meta = turn()
    async with client(url(mstack)) as c:  # declares no elicitation
        result = await c.call_tool("create_todo", {"title": name}, meta=meta)
        again = await c.call_tool("create_todo", {"title": name}, meta=meta)
    assert not result.is_error
    assert result.structured_content["state"] == "CONFIRMATION_REQUIRED"
    card = result.structured_content["card"]
    assert card["preview"]["target"] == name and card["expires_at"] and card["token"]
    assert again.structured_content["card"]["action_id"] == card["action_id"]  # the same call, the same card
    assert mstack.todo.writes(card["action_id"]) == []
    # the host confirms out of band, over gRPC, with the card's token: it runs once
    confirmed = mstack.stub().Confirm(
        gateway_pb2.ConfirmRequest(
            context=ctx(session_id="s-mcp", locale="en", request_id=meta["io.countersign/turn"]), token=card["token"]
        )
    )
    assert confirmed.action.state == common_pb2.ACTION_STATE_SUCCEEDED
    assert len(mstack.todo.writes(card["action_id"])) == 1
    async with client(url(mstack)) as c:  # and the call made again now returns that receipt
        replay = await c.call_tool("create_todo", {"title": name}, meta=meta)
    assert replay.structured_content["state"] == "SUCCEEDED"
    assert replay.structured_content["action"]["receipt"] == json.loads(json.dumps(result_receipt(confirmed.action)))
    assert len(mstack.todo.writes(card["action_id"])) == 1


def result_receipt(action: common_pb2.Action) -> dict[str, Any]:
    from google.protobuf import json_format

    out: dict[str, Any] = json_format.MessageToDict(action.receipt, preserving_proto_field_name=True)
    return out


async def test_twenty_concurrent_retries_of_one_call_execute_once_with_one_receipt(mstack: Stack) -> None:
    name = title()
    meta = turn()
    async with client(url(mstack), elicit=Elicitations("accept")) as c:
        results = await asyncio.gather(*(c.call_tool("create_todo", {"title": name}, meta=meta) for _ in range(20)))
    assert all(not r.is_error for r in results), [r for r in results if r.is_error][:1]
    ids = {r.structured_content["action"]["action_id"] for r in results}
    receipts = {json.dumps(r.structured_content["action"]["receipt"], sort_keys=True) for r in results}
    assert len(ids) == 1 and len(receipts) == 1
    assert len(mstack.todo.writes(ids.pop())) == 1
    assert len(created(mstack, name)) == 1


async def test_retries_from_new_connections_without_a_turn_land_on_the_same_action(mstack: Stack) -> None:
    """No _meta turn: the X-Countersign-Request header is the turn; without it, the MCP session and the window."""
    name = title()
    headers = identity(**{"X-Countersign-Request": "hdr-" + uuid.uuid4().hex})
    outcomes = []
    for _ in range(3):  # three connections (a host that reconnected), the same turn header
        async with client(url(mstack), headers, elicit=Elicitations("accept")) as c:
            outcomes.append(await c.call_tool("create_todo", {"title": name}))
    ids = {o.structured_content["action"]["action_id"] for o in outcomes}
    assert len(ids) == 1
    assert [o.structured_content["action"]["replayed"] for o in outcomes[1:]] == [True, True]
    assert len(created(mstack, name)) == 1
    name = title()
    async with client(url(mstack), elicit=Elicitations("accept")) as c:  # one session, no turn at all
        first = await c.call_tool("create_todo", {"title": name})
        second = await c.call_tool("create_todo", {"title": name})
    assert first.structured_content["action"]["action_id"] == second.structured_content["action"]["action_id"]
    assert len(created(mstack, name)) == 1


# -- hostile input ---------------------------------------------------------------------------------


async def test_unknown_tool_is_a_jsonrpc_error_and_nothing_runs(mstack: Stack) -> None:
    before = len(mstack.todo.requests())
    async with client(url(mstack), elicit=Elicitations("accept")) as c:
        with pytest.raises(MCPError) as err:
            await c.call_tool("drop_database", {})
    assert err.value.error.code == -32602 and "drop_database" in err.value.error.message
    assert len(mstack.todo.requests()) == before


@pytest.mark.parametrize(
    ("arguments", "reason"),
    [
        ({"title": ""}, "ARGS_INVALID"),  # minLength
        ({"title": "x", "owner": "mallory"}, "ARGS_INVALID"),  # closed schema
        ({"title": 42}, "ARGS_INVALID"),
        ({"title": "x" * 70_000}, "ARGS_INVALID"),  # over the 64 KiB argument cap
    ],
)
async def test_schema_violations_are_tool_errors_with_the_reason_and_nothing_runs(
    mstack: Stack, arguments: dict[str, Any], reason: str
) -> None:
    before = len(mstack.todo.requests())
    async with client(url(mstack), elicit=Elicitations("accept")) as c:
        result = await c.call_tool("create_todo", arguments, meta=turn())
    assert result.is_error
    assert result.structured_content["error"]["reason"] == reason
    assert len(mstack.todo.requests()) == before


async def test_missing_identity_is_a_tool_error_naming_the_fields(mstack: Stack) -> None:
    async with client(url(mstack), {"X-Countersign-Tenant": "t1"}, elicit=Elicitations("accept")) as c:
        result = await c.call_tool("create_todo", {"title": title()}, meta=turn())
    assert result.is_error
    error = result.structured_content["error"]
    assert error["reason"] == "REQUEST_INVALID" and "actor_id" in error["message"]


async def test_malformed_jsonrpc_and_oversized_bodies_are_refused_before_the_path(mstack: Stack) -> None:
    before = len(mstack.todo.requests())
    headers = {**identity(), "Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    async with httpx2.AsyncClient(timeout=10) as http:
        bad = await http.post(url(mstack), content=b'{"jsonrpc": "2.0", "method": ', headers=headers)
        assert bad.status_code == 400 and bad.json()["error"]["code"] == -32700
        not_rpc = await http.post(url(mstack), content=b'[1, 2, "three"]', headers=headers)
        assert not_rpc.status_code == 400 and "error" in not_rpc.json()
        huge = json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {"name": "create_todo", "arguments": {"title": "x" * (2 << 20)}},
            }
        )
        too_big = await http.post(url(mstack), content=huge.encode(), headers=headers)
        assert too_big.status_code == 413
        future = await http.post(
            url(mstack),
            content=b'{"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {}}',
            headers={**headers, "MCP-Protocol-Version": "2026-07-28"},
        )
        assert future.status_code == 400 and "handshake" in future.json()["error"]["message"]
    assert len(mstack.todo.requests()) == before


async def test_mcp_stdio_serves_the_same_tools_for_the_identity_in_its_environment(mstack: Stack) -> None:
    """`countersign mcp-stdio`: a local host starts the sidecar and speaks MCP on its stdin/stdout."""
    import os
    import sys

    from mcp import Client, StdioServerParameters

    from countersign.testing.processes import ROOT

    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "COUNTERSIGN_MCP_TENANT": "t1",
        "COUNTERSIGN_MCP_ACTOR": "alice",
        "COUNTERSIGN_MCP_SUBJECT": "alice",
        "COUNTERSIGN_MCP_ROLE": "user",
        "COUNTERSIGN_MCP_LOCALE": "en",
    }
    params = StdioServerParameters(
        command=sys.executable,
        args=[
            "-m",
            "countersign.sidecar.cli",
            "mcp-stdio",
            "--registry",
            str(mstack.registry),
            "--redis-url",
            mstack.redis.info["url"],
            "--keys-file",
            str(mstack.keys),
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "",
            "--log-level",
            "warning",
        ],
        env=env,
        cwd=str(ROOT),
    )
    name = title()
    async with Client(params, elicitation_callback=Elicitations("accept"), read_timeout_seconds=30) as c:
        assert "create_todo" in {t.name for t in (await c.list_tools()).tools}
        read = await c.call_tool("list_todos", {})
        write = await c.call_tool("create_todo", {"title": name}, meta=turn())
    assert not read.is_error, read
    assert write.structured_content["state"] == "SUCCEEDED", write
    assert len(created(mstack, name)) == 1


async def test_an_elicitation_nobody_answers_leaves_the_card_ready_after_the_wait(mstack: Stack) -> None:
    """ATTACKS: elicitation answered never. The call is bounded by --approval-wait; the card stays READY."""
    proc = mstack.start_sidecar(flags=["--mcp-listen", "127.0.0.1:0", "--approval-wait", "1s"])
    try:

        async def never(params: Any) -> str:
            await asyncio.sleep(30)
            return "accept"

        name = title()
        async with client(str(proc.info["mcp"]), elicit=Elicitations(never)) as c:
            result = await asyncio.wait_for(c.call_tool("create_todo", {"title": name}, meta=turn()), 20)
        assert result.structured_content["state"] == "CONFIRMATION_REQUIRED", result
        assert "did not answer" in result.content[0].text  # type: ignore[union-attr]
        assert created(mstack, name) == []
    finally:
        proc.stop()
