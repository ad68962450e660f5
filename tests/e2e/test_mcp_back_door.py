"""The back door (issue 15, item 5): an MCP server as a downstream, through the MCP adapter. Real processes: the
example MCP todo server (built with the official SDK), redis-server and the sidecar over gRPC. What the server saw
is its own request log and its own todos."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator

import grpc
import pytest

from countersign.testing.calls import ctx, error_info
from countersign.testing.mcp import McpStack, start_mcp_stack
from countersign.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc

S = common_pb2
Stub = gateway_pb2_grpc.ToolGatewayServiceStub


@pytest.fixture(scope="module")
def mcp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[McpStack]:
    """The MCP stack; its sidecar's background reconciler idle (a test that wants one starts its own)."""
    yield from start_mcp_stack(
        tmp_path_factory.mktemp("mcp"), ["--reconcile-interval", "1h", "--downstream-deadline", "1500ms"]
    )


def turn() -> str:
    return uuid.uuid4().hex


def card(stub: Stub, title: str, **context: str) -> gateway_pb2.ConfirmationCard:
    context.setdefault("request_id", turn())
    response = stub.Invoke(
        gateway_pb2.InvokeRequest(
            context=ctx(**context), tool_name="create_todo", arguments_json=json.dumps({"title": title})
        )
    )
    assert response.WhichOneof("outcome") == "confirmation", response
    return response.confirmation


def confirm(stub: Stub, token: str) -> common_pb2.Action:
    return stub.Confirm(gateway_pb2.ConfirmRequest(context=ctx(), token=token)).action


def get(stub: Stub, action_id: str) -> common_pb2.Action:
    return stub.GetAction(gateway_pb2.GetActionRequest(context=ctx(), action_id=action_id)).action


def reconcile(stub: Stub, action_id: str) -> common_pb2.Action:
    return stub.Reconcile(gateway_pb2.ReconcileRequest(context=ctx(), action_id=action_id)).action


# -- a write through the back door ----------------------------------------------------------------------------


def test_a_write_runs_once_with_the_key_in_meta_and_in_the_header_and_a_second_confirm_replays(
    mcp: McpStack,
) -> None:
    stub = mcp.stub()
    issued = card(stub, "经由 MCP 买牛奶")
    action = confirm(stub, issued.token)
    assert action.state == S.ACTION_STATE_SUCCEEDED, action
    [todo] = mcp.mcp.todos("经由 MCP 买牛奶")
    assert action.receipt.resource_id == todo["id"] and action.receipt.resource_version == "1"
    assert action.receipt.summary == "待办「经由 MCP 买牛奶」已创建。"
    [call] = mcp.mcp.calls("create_todo", issued.action_id)
    assert call["meta"] == {"io.countersign/idempotency-key": issued.action_id}
    assert call["header_key"] == issued.action_id
    headers = call["headers"]
    assert headers["idempotency-key"] == f'"{issued.action_id}"'
    assert headers["x-countersign-action"] == issued.action_id
    assert headers["x-countersign-tenant"] == "t1" and headers["x-countersign-subject"] == "alice"
    assert headers["x-countersign-policy-version"] == "2026-12-01.1" and headers["traceparent"].startswith("00-")
    assert call["arguments"] == {"title": "经由 MCP 买牛奶"}, "the prepared arguments, as the tool's arguments"
    assert todo["owner"] == "alice"

    replay = confirm(stub, issued.token)
    assert replay.replayed and replay.receipt == action.receipt
    assert len(mcp.mcp.calls("create_todo", issued.action_id)) == 1, "a replay never reaches the server"
    assert len(mcp.mcp.todos("经由 MCP 买牛奶")) == 1


def test_the_prepare_tool_makes_the_card(mcp: McpStack) -> None:
    response = mcp.stub().Invoke(
        gateway_pb2.InvokeRequest(
            context=ctx(request_id=turn()),
            tool_name="create_todo",
            arguments_json=json.dumps({"title": "经由 MCP 准备", "dueAt": "明天 9 点"}),
        )
    )
    issued = response.confirmation
    assert "T09:00:00" in json.loads(issued.prepared_arguments_json)["dueAt"], "the server resolved the time"
    assert "截止于" in issued.preview.impact
    [call] = [c for c in mcp.mcp.requests("prepare_todo") if c["arguments"]["arguments"]["title"] == "经由 MCP 准备"]
    assert call["arguments"]["tool"] == "create_todo" and call["arguments"]["context"]["locale"] == "zh-CN"
    assert "idempotency-key" not in call["headers"], "a prepare carries no idempotency key"


def test_a_read_tool_answers_its_structured_result(mcp: McpStack) -> None:
    stub = mcp.stub()
    title = f"读取 {turn()[:6]}"
    assert confirm(stub, card(stub, title).token).state == S.ACTION_STATE_SUCCEEDED
    response = stub.Invoke(
        gateway_pb2.InvokeRequest(context=ctx(request_id=turn()), tool_name="list_todos", arguments_json="{}")
    )
    result = json.loads(response.result.result_json)
    assert title in [t["title"] for t in result["todos"]] and result["count"] == len(result["todos"])
    [call] = [c for c in mcp.mcp.requests("list_todos")][-1:]
    assert call["meta"] == {} and "idempotency-key" not in call["headers"], "a read carries no key"


def test_calls_answered_as_sse_streams_share_one_connection(mcp: McpStack) -> None:
    stub = mcp.stub()
    read = gateway_pb2.InvokeRequest(context=ctx(request_id=turn()), tool_name="list_todos", arguments_json="{}")
    stub.Invoke(read)  # the session and its connection are open
    before = len(mcp.mcp.requests("list_todos"))
    for _ in range(6):
        stub.Invoke(read)
    peers = {e["peer"] for e in mcp.mcp.requests("list_todos")[before:]}
    # the SDK stops reading an answer's SSE stream at its result; unless the adapter reads the stream's end, the
    # connection cannot be reused and every call opens a new one (a TCP handshake, and its latency, per call)
    assert len(peers) <= 2, f"6 calls, one after the other, came over {len(peers)} connections"


# -- what the answer says -----------------------------------------------------------------------------------------


def test_is_error_is_failed_not_retryable_with_the_tools_reason_and_nothing_written(mcp: McpStack) -> None:
    stub = mcp.stub()
    issued = card(stub, "被拒绝")
    mcp.mcp.fault(tool="create_todo", mode="error", reason="TODO_QUOTA_REACHED")
    action = confirm(stub, issued.token)
    assert (action.state, action.error.reason) == (S.ACTION_STATE_FAILED, "TODO_QUOTA_REACHED")
    # the tool ran and refused: the action is over (a new attempt is a new card, with a new key)
    assert not action.error.retryable, "a tool's refusal is not retryable"
    again = confirm(stub, issued.token)
    assert again.replayed and (again.state, again.error.reason) == (S.ACTION_STATE_FAILED, "TODO_QUOTA_REACHED")
    assert len(mcp.mcp.calls("create_todo", issued.action_id)) == 1, "a second Confirm never re-sends"
    assert mcp.mcp.todos("被拒绝") == []


def test_a_result_without_the_receipt_field_is_unknown_receipt_invalid(mcp: McpStack) -> None:
    stub = mcp.stub()
    issued = card(stub, "没有回执")
    mcp.mcp.fault(tool="create_todo", mode="no_receipt")
    action = confirm(stub, issued.token)
    assert (action.state, action.error.reason) == (S.ACTION_STATE_UNKNOWN, "RECEIPT_INVALID")
    assert len(mcp.mcp.todos("没有回执")) == 1, "it was written: only a lookup may say what became of it"


@pytest.mark.parametrize(
    ("code", "state", "reason"),
    [(-32602, S.ACTION_STATE_FAILED, "MCP_REQUEST_REFUSED"), (-32603, S.ACTION_STATE_UNKNOWN, "DOWNSTREAM_MCP_ERROR")],
)
def test_a_json_rpc_error_is_failed_only_when_it_proves_nothing_ran(
    mcp: McpStack, code: int, state: int, reason: str
) -> None:
    stub = mcp.stub()
    issued = card(stub, f"JSON-RPC {code}")
    mcp.mcp.fault(tool="create_todo", mode="jsonrpc_error", code=code)
    action = confirm(stub, issued.token)
    assert (action.state, action.error.reason) == (state, reason)


# -- hostile and broken answers -------------------------------------------------------------------------------


def test_a_huge_answer_is_capped_unknown_for_a_write_and_a_clear_failure_for_a_read(mcp: McpStack) -> None:
    stub = mcp.stub()
    issued = card(stub, "巨大的回答")
    mcp.mcp.fault(tool="create_todo", mode="huge", size=8 << 20)
    action = confirm(stub, issued.token)
    assert (action.state, action.error.reason) == (S.ACTION_STATE_UNKNOWN, "RECEIPT_INVALID")
    assert "larger than" in action.error.message
    mcp.mcp.fault(tool="list_todos", mode="huge", size=8 << 20)
    with pytest.raises(grpc.RpcError) as info:
        stub.Invoke(
            gateway_pb2.InvokeRequest(context=ctx(request_id=turn()), tool_name="list_todos", arguments_json="{}")
        )
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert error_info(info.value).reason == "DOWNSTREAM_ANSWER_INVALID"


def test_garbage_after_the_write_is_unknown_and_reconciled(mcp: McpStack) -> None:
    stub = mcp.stub()
    issued = card(stub, "乱码回答")
    mcp.mcp.fault(tool="create_todo", mode="garbage_after_commit")
    action = confirm(stub, issued.token)
    assert (action.state, action.error.reason) == (S.ACTION_STATE_UNKNOWN, "RECEIPT_INVALID")
    settled = reconcile(stub, issued.action_id)
    assert settled.state == S.ACTION_STATE_SUCCEEDED
    assert settled.receipt.resource_id == mcp.mcp.todos("乱码回答")[0]["id"]


# -- the answer lost after the write: reconciled through the lookup tool, never re-sent -----------------------


def test_commit_then_drop_is_unknown_then_reconcile_resolves_it_through_the_lookup_tool(mcp: McpStack) -> None:
    stub = mcp.stub()
    issued = card(stub, "提交后断开")
    mcp.mcp.fault(tool="create_todo", mode="drop_after_commit")
    action = confirm(stub, issued.token)
    assert (action.state, action.error.reason) == (S.ACTION_STATE_UNKNOWN, "DOWNSTREAM_CONNECTION_LOST")
    assert confirm(stub, issued.token).state == S.ACTION_STATE_UNKNOWN, "a Confirm never re-sends"
    settled = reconcile(stub, issued.action_id)
    assert settled.state == S.ACTION_STATE_SUCCEEDED
    [todo] = mcp.mcp.todos("提交后断开")
    assert settled.receipt.resource_id == todo["id"]
    assert len(mcp.mcp.calls("create_todo", issued.action_id)) == 1, "one create reached the server"
    [lookup] = mcp.mcp.lookups(issued.action_id)
    assert lookup["arguments"] == {"idempotency_key": issued.action_id, "fence": True}
    assert "idempotency-key" not in lookup["headers"] and lookup["meta"] == {}, "a lookup carries no key"
    assert get(stub, issued.action_id).receipt == settled.receipt


def test_commit_then_drop_by_a_server_answering_json_is_unknown_and_reconciled(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """The same over a server that answers plain JSON, not an SSE stream (the other Streamable HTTP answer)."""
    stacks = start_mcp_stack(tmp_path_factory.mktemp("mcp-json"), ["--reconcile-interval", "1h"], json_response=True)
    stack = next(stacks)
    try:
        stub = stack.stub()
        issued = card(stub, "JSON 提交后断开")
        stack.mcp.fault(tool="create_todo", mode="drop_after_commit")
        action = confirm(stub, issued.token)
        assert (action.state, action.error.reason) == (S.ACTION_STATE_UNKNOWN, "DOWNSTREAM_CONNECTION_LOST")
        settled = reconcile(stub, issued.action_id)
        assert settled.state == S.ACTION_STATE_SUCCEEDED
        assert settled.receipt.resource_id == stack.mcp.todos("JSON 提交后断开")[0]["id"]
        assert len(stack.mcp.calls("create_todo", issued.action_id)) == 1
    finally:
        stacks.close()  # its processes stop, by PID


def test_the_background_reconciler_resolves_a_dropped_answer(mcp: McpStack) -> None:
    sidecar = mcp.start_sidecar(flags=["--reconcile-interval", "200ms", "--downstream-deadline", "1500ms"])
    try:
        stub = mcp.stub(sidecar.info["grpc"])
        issued = card(stub, "后台对账")
        mcp.mcp.fault(tool="create_todo", mode="drop_after_commit")
        assert confirm(stub, issued.token).state == S.ACTION_STATE_UNKNOWN
        deadline = time.monotonic() + 20
        action = get(stub, issued.action_id)
        while action.state == S.ACTION_STATE_UNKNOWN and time.monotonic() < deadline:
            time.sleep(0.2)
            action = get(stub, issued.action_id)
        assert action.state == S.ACTION_STATE_SUCCEEDED
        assert action.receipt.resource_id == mcp.mcp.todos("后台对账")[0]["id"]
        assert len(mcp.mcp.calls("create_todo", issued.action_id)) == 1
    finally:
        sidecar.stop()


def test_a_call_that_outlives_its_deadline_is_unknown_and_the_lookup_finds_what_it_did(mcp: McpStack) -> None:
    stub = mcp.stub()
    issued = card(stub, "提交后挂起")
    mcp.mcp.fault(tool="create_todo", mode="hang_after_commit", seconds=3.0)
    action = confirm(stub, issued.token)
    assert (action.state, action.error.reason) == (S.ACTION_STATE_UNKNOWN, "DOWNSTREAM_TIMEOUT")
    time.sleep(2.0)  # the server answers, late, to nobody
    settled = reconcile(stub, issued.action_id)
    assert settled.state == S.ACTION_STATE_SUCCEEDED and len(mcp.mcp.todos("提交后挂起")) == 1


# -- the server away, and back --------------------------------------------------------------------------------


def test_a_server_that_is_down_is_not_sent_the_card_stays_ready_and_runs_once_when_it_is_back(
    mcp: McpStack,
) -> None:
    stub = mcp.stub()
    issued = card(stub, "服务器宕机")
    assert confirm(stub, card(stub, "宕机之前").token).state == S.ACTION_STATE_SUCCEEDED, "a session is open"
    mcp.mcp.stop()
    try:
        with pytest.raises(grpc.RpcError) as info:
            confirm(stub, issued.token)
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE
        assert error_info(info.value).reason == "DOWNSTREAM_NOT_SENT"
        assert get(stub, issued.action_id).state == S.ACTION_STATE_READY, "the card is back"
    finally:
        mcp.mcp.restart()  # same port, same todos; the sidecar's old session is unknown to it now
    action = confirm(stub, issued.token)
    assert action.state == S.ACTION_STATE_SUCCEEDED and not action.replayed
    assert len(mcp.mcp.todos("服务器宕机")) == 1
    assert len(mcp.mcp.calls("create_todo", issued.action_id)) == 1


def test_a_server_restarted_under_a_live_session_takes_the_next_write_on_a_new_session(mcp: McpStack) -> None:
    stub = mcp.stub()
    issued = card(stub, "重启之后")
    mcp.mcp.restart()
    action = confirm(stub, issued.token)
    assert action.state == S.ACTION_STATE_SUCCEEDED
    assert len(mcp.mcp.todos("重启之后")) == 1
    # the first try carried the session the server no longer knows and was answered 404 before any tool ran;
    # the same call went again, once, on a new session
    first, second = mcp.mcp.calls("create_todo", issued.action_id)
    assert first["session"] and second["session"] and first["session"] != second["session"]
    methods = [e["method"] for e in mcp.mcp.requests()]
    assert methods == ["tools/call", "initialize", "notifications/initialized", "tools/call"]


def test_ids_beyond_ascii_write_once_through_the_back_door(mcp: McpStack) -> None:
    # printable ids that are not ASCII pass check_context and reach an HTTP downstream as UTF-8 headers; the MCP
    # client's httpx raised on them inside the SDK's transport, which ended the session: prepare was UNAVAILABLE
    # "the answer was lost", a write's execute would have been UNKNOWN though nothing was sent
    stub = mcp.stub()
    who = {"tenant_id": "租户", "actor_id": "张三", "subject_id": "张三", "session_id": "会话", "request_id": turn()}
    issued = card(stub, "张三的待办", **who)
    action = stub.Confirm(gateway_pb2.ConfirmRequest(context=ctx(**who), token=issued.token)).action
    assert (action.state, action.error.reason) == (S.ACTION_STATE_SUCCEEDED, "")
    [call] = mcp.mcp.calls("create_todo", issued.action_id)
    assert call["header_key"] == issued.action_id
