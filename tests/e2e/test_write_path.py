"""The write path over real gRPC, real Redis and the real todo service (issue tests 2-4, 6)."""

from __future__ import annotations

import json
import time
import uuid

import grpc
import pytest
import redis

from countersign.testing import processes
from countersign.testing.calls import bad_request, ctx, error_info
from countersign.testing.stack import Stack, changed_registry
from countersign.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc, guard_pb2, guard_pb2_grpc


def invoke(stack: Stack, tool: str, args: dict[str, object], **context: object) -> gateway_pb2.InvokeResponse:
    return stack.stub().Invoke(
        gateway_pb2.InvokeRequest(context=ctx(**context), tool_name=tool, arguments_json=json.dumps(args))
    )


def confirm(stack: Stack, token: str, wait_ms: int = 0, **context: object) -> common_pb2.Action:
    return stack.stub().Confirm(gateway_pb2.ConfirmRequest(context=ctx(**context), token=token, wait_ms=wait_ms)).action


def rpc_error(call: object) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        call()  # type: ignore[operator]
    return info.value


def turn() -> str:
    return uuid.uuid4().hex


# -- policy over the wire (test 2) -------------------------------------------------------------


def test_unknown_tool_is_not_found_with_reason(stack: Stack) -> None:
    err = rpc_error(lambda: invoke(stack, "drop_database", {}))
    assert err.code() == grpc.StatusCode.NOT_FOUND
    assert error_info(err).reason == "TOOL_NOT_FOUND"
    assert error_info(err).domain == "countersign"


def test_extra_property_nested_and_top_level_is_invalid_with_field_violation(stack: Stack) -> None:
    err = rpc_error(lambda: invoke(stack, "create_todo", {"title": "x", "owner": "mallory"}))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error_info(err).reason == "ARGS_INVALID"
    assert any("owner" in v.description for v in bad_request(err).field_violations)


def test_aliases_are_normalised_before_validation(stack: Stack) -> None:
    card = invoke(stack, "create_todo", {"taskTitle": "买菜", "importance": 2}, request_id=turn()).confirmation
    assert json.loads(card.prepared_arguments_json) == {"title": "买菜", "priority": 2}


def test_role_not_allowed_and_subject_boundary_and_admin_readonly(stack: Stack) -> None:
    err = rpc_error(lambda: invoke(stack, "create_todo", {"title": "x"}, role="guest"))
    assert (err.code(), error_info(err).reason) == (grpc.StatusCode.PERMISSION_DENIED, "ROLE_NOT_ALLOWED")
    err = rpc_error(lambda: invoke(stack, "create_todo", {"title": "x"}, subject_id="bob"))
    assert (err.code(), error_info(err).reason) == (grpc.StatusCode.PERMISSION_DENIED, "SUBJECT_NOT_ALLOWED")
    err = rpc_error(
        lambda: invoke(
            stack,
            "create_todo",
            {"title": "x"},
            subject_id="bob",
            role="admin",
            admin_context_id="t1:ticket-1",
            admin_mode=common_pb2.ADMIN_MODE_READONLY,
        )
    )
    assert (err.code(), error_info(err).reason) == (grpc.StatusCode.PERMISSION_DENIED, "ADMIN_READONLY")
    # a read-only admin may still read
    assert invoke(
        stack,
        "list_todos",
        {},
        subject_id="bob",
        role="admin",
        admin_context_id="t1:ticket-1",
        admin_mode=common_pb2.ADMIN_MODE_READONLY,
    ).HasField("result")


def test_a_write_is_never_executed_by_invoke(stack: Stack) -> None:
    response = invoke(stack, "create_todo", {"title": "只是提议"}, request_id=turn())
    assert response.WhichOneof("outcome") == "confirmation"
    # the downstream was asked to prepare, never to create
    assert stack.todo.writes(response.confirmation.action_id) == []
    assert not [e for e in stack.todo.requests(path="/todos") if (e["body"] or {}).get("title") == "只是提议"]


def test_read_runs_at_once(stack: Stack) -> None:
    result = invoke(stack, "list_todos", {"status": "open"}).result
    assert result.tool_name == "list_todos"
    assert "todos" in json.loads(result.result_json)


def test_planned_and_forbidden_capabilities_are_refusals_in_the_callers_locale(stack: Stack) -> None:
    planned = invoke(stack, "delete_note", {}).refusal
    assert (planned.capability_id, planned.status) == ("note.delete", common_pb2.CAPABILITY_STATUS_PLANNED)
    assert planned.guidance == "当前请前往笔记页面手动删除。"
    forbidden = invoke(stack, "account.delete", {}, locale="en").refusal
    assert forbidden.status == common_pb2.CAPABILITY_STATUS_FORBIDDEN
    assert forbidden.guidance == "The assistant may not delete accounts."


def test_session_modes(stack: Stack) -> None:
    err = rpc_error(
        lambda: invoke(stack, "create_todo", {"title": "x"}, session_mode=common_pb2.SESSION_MODE_READ_ONLY)
    )
    assert error_info(err).reason == "SESSION_MODE_FORBIDS"
    err = rpc_error(lambda: invoke(stack, "list_todos", {}, session_mode=common_pb2.SESSION_MODE_CHAT_ONLY))
    assert error_info(err).reason == "SESSION_MODE_FORBIDS"


# -- the card (test 3) ----------------------------------------------------------------------------


def test_the_registry_preview_is_in_the_callers_locale(stack: Stack) -> None:
    """A tool whose downstream prepares no preview shows the registry's, in the caller's locale: the exact tag,
    then its language, else the registry's default (here Chinese)."""
    created = confirm(stack, invoke(stack, "create_todo", {"title": "locale"}, request_id=turn()).confirmation.token)
    todo = created.receipt.resource_id
    previews = {
        locale: invoke(stack, "delete_todo", {"id": todo}, locale=locale, request_id=turn()).confirmation.preview
        for locale in ("en", "en-GB", "zh-CN", "fr")
    }
    assert previews["en"].title == previews["en-GB"].title == "Delete a to-do"
    assert previews["en"].impact == "Confirming deletes this to-do; it cannot be undone."
    assert previews["zh-CN"].title == previews["fr"].title == "删除待办"
    assert previews["en"].target == previews["zh-CN"].target == todo


def test_card_shows_the_prepared_concrete_arguments(stack: Stack) -> None:
    card = invoke(
        stack, "create_todo", {"taskTitle": "交报告", "deadline": "明天 9 点"}, request_id=turn()
    ).confirmation
    prepared = json.loads(card.prepared_arguments_json)
    assert prepared["title"] == "交报告"
    assert prepared["dueAt"].endswith("+08:00") and "T09:00:00" in prepared["dueAt"]
    assert card.preview.target == "交报告"
    assert card.risk == common_pb2.RISK_LEVEL_LOW
    assert card.expires_at.seconds > time.time()


def test_prepare_refusal_yields_no_card(stack: Stack) -> None:
    rid = turn()
    err = rpc_error(
        lambda: invoke(stack, "create_todo", {"title": "x", "dueAt": "2020-01-01T00:00:00+08:00"}, request_id=rid)
    )
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert error_info(err).reason == "TODO_DUE_AT_SUSPICIOUS"
    # nothing was stored: the same call again asks prepare again and is refused again
    err = rpc_error(
        lambda: invoke(stack, "create_todo", {"title": "x", "dueAt": "2020-01-01T00:00:00+08:00"}, request_id=rid)
    )
    assert error_info(err).reason == "TODO_DUE_AT_SUSPICIOUS"


def test_same_call_same_turn_same_card_new_turn_new_card(stack: Stack) -> None:
    rid = turn()
    first = invoke(stack, "create_todo", {"title": "同一个"}, request_id=rid).confirmation
    again = invoke(stack, "create_todo", {"taskTitle": "同一个"}, request_id=rid).confirmation
    assert (again.action_id, again.token) == (first.action_id, first.token)
    other = invoke(stack, "create_todo", {"title": "同一个"}, request_id=turn()).confirmation
    assert other.action_id != first.action_id


def test_same_call_after_settlement_replays_the_outcome(stack: Stack) -> None:
    rid = turn()
    card = invoke(stack, "create_todo", {"title": "结算后"}, request_id=rid).confirmation
    settled = confirm(stack, card.token)
    replay = invoke(stack, "create_todo", {"title": "结算后"}, request_id=rid).replay
    assert replay.replayed and replay.receipt == settled.receipt


# -- tokens (test 4) ------------------------------------------------------------------------------


def test_another_owners_token_is_denied_without_preview_or_arguments(stack: Stack) -> None:
    card = stack.card(request_id=turn(), title="alice 的秘密")
    for other in (
        {"actor_id": "mallory", "subject_id": "mallory"},
        {"session_id": "s-other"},
        {"tenant_id": "t-other"},
    ):
        err = rpc_error(lambda other=other: confirm(stack, card.token, **other))  # type: ignore[misc]
        assert err.code() == grpc.StatusCode.PERMISSION_DENIED
        assert error_info(err).reason == "CONFIRMATION_BINDING_MISMATCH"
        assert "alice 的秘密" not in (err.details() or "")
        assert "秘密" not in str(rpc_error_trailers(err))
    # the card is untouched: its owner still executes it once
    assert confirm(stack, card.token).state == common_pb2.ACTION_STATE_SUCCEEDED
    assert len(stack.todo.writes(card.action_id)) == 1


def rpc_error_trailers(err: grpc.RpcError) -> object:
    return err.trailing_metadata()  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "mangle",
    [
        lambda t: t[:-1] + ("A" if t[-1] != "A" else "B"),  # forged MAC
        lambda t: t[: len(t) // 2],  # truncated
        lambda t: "cs2" + t[3:],  # wrong version
        lambda t: t.replace(".k1.", ".zz."),  # unknown key id
        lambda t: "not a token",
        lambda t: t + "." + "x" * 200,
    ],
)
def test_malformed_or_forged_token_is_invalid_argument(stack: Stack, mangle: object) -> None:
    token = mangle(stack.card(request_id=turn()).token)  # type: ignore[operator]
    err = rpc_error(lambda: confirm(stack, token))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error_info(err).reason == "CONFIRMATION_TOKEN_INVALID"


def test_token_of_another_key_that_is_still_listed_verifies(stack: Stack) -> None:
    from countersign.keyring import Keyring

    keys = Keyring.from_file(str(stack.keys))
    card = stack.card(request_id=turn())
    token = keys.token(card.action_id, "k0")  # k0 is listed but not active: its MAC verifies
    err = rpc_error(lambda: confirm(stack, token))
    # a valid token under k0 binds with k0: the card was bound under k1, so the binding differs
    assert error_info(err).reason == "CONFIRMATION_BINDING_MISMATCH"


def test_never_issued_token_is_not_found(stack: Stack) -> None:
    from countersign.keyring import Keyring

    token = Keyring.from_file(str(stack.keys)).token("0" * 32)
    err = rpc_error(lambda: confirm(stack, token))
    assert (err.code(), error_info(err).reason) == (grpc.StatusCode.NOT_FOUND, "CONFIRMATION_EXPIRED")


def test_expired_card_is_not_found(stack: Stack) -> None:
    sidecar = stack.start_sidecar(flags=["--confirm-ttl", "300ms"])
    try:
        stub = stack.stub(sidecar.info["grpc"])
        card = stack.card(stub, request_id=turn())
        time.sleep(0.6)
        with pytest.raises(grpc.RpcError) as info:
            stub.Confirm(gateway_pb2.ConfirmRequest(context=ctx(), token=card.token))
        assert (info.value.code(), error_info(info.value).reason) == (grpc.StatusCode.NOT_FOUND, "CONFIRMATION_EXPIRED")
        assert stack.todo.writes(card.action_id) == []
    finally:
        sidecar.stop()


def test_card_changed_in_redis_is_data_loss_and_nothing_executes(stack: Stack) -> None:
    card = stack.card(request_id=turn(), title="原来的标题")
    r = redis.Redis(unix_socket_path=stack.redis.info["socket"])
    key = f"cs:{{{card.action_id}}}:card"
    body = r.hget(key, "body")
    assert body is not None and "原来的标题".encode() in body
    r.hset(key, "body", body.replace("原来的标题".encode(), "被篡改的标题".encode()))
    err = rpc_error(lambda: confirm(stack, card.token))
    assert (err.code(), error_info(err).reason) == (grpc.StatusCode.DATA_LOSS, "CONFIRMATION_TAMPERED")
    assert stack.todo.writes(card.action_id) == []
    # duplicates are told the same (the record carries the changed card, so it is not trusted), nothing runs
    err = rpc_error(lambda: confirm(stack, card.token))
    assert (err.code(), error_info(err).reason) == (grpc.StatusCode.DATA_LOSS, "CONFIRMATION_TAMPERED")
    assert stack.todo.writes(card.action_id) == []


def test_reject_then_confirm_is_rejected(stack: Stack) -> None:
    card = stack.card(request_id=turn())
    rejected = stack.stub().Reject(gateway_pb2.RejectRequest(context=ctx(), token=card.token)).action
    assert rejected.state == common_pb2.ACTION_STATE_REJECTED
    late = confirm(stack, card.token)
    assert late.state == common_pb2.ACTION_STATE_REJECTED and late.replayed
    assert stack.todo.writes(card.action_id) == []


def test_confirm_from_a_context_that_may_not_write_leaves_the_card_ready(stack: Stack) -> None:
    card = stack.card(request_id=turn())
    for context in (
        {"session_mode": common_pb2.SESSION_MODE_READ_ONLY},
        {"session_mode": common_pb2.SESSION_MODE_CHAT_ONLY},
        {"role": "guest"},
    ):
        err = rpc_error(lambda context=context: confirm(stack, card.token, **context))  # type: ignore[misc]
        assert err.code() == grpc.StatusCode.PERMISSION_DENIED
    state = stack.stub().GetAction(gateway_pb2.GetActionRequest(context=ctx(), action_id=card.action_id)).action
    assert state.state == common_pb2.ACTION_STATE_READY
    assert confirm(stack, card.token).state == common_pb2.ACTION_STATE_SUCCEEDED


def test_get_action_is_owner_only(stack: Stack) -> None:
    card = stack.card(request_id=turn())
    err = rpc_error(
        lambda: stack.stub().GetAction(
            gateway_pb2.GetActionRequest(
                context=ctx(actor_id="mallory", subject_id="mallory"), action_id=card.action_id
            )
        )
    )
    assert error_info(err).reason == "CONFIRMATION_BINDING_MISMATCH"
    err = rpc_error(lambda: stack.stub().GetAction(gateway_pb2.GetActionRequest(context=ctx(), action_id="nope")))
    assert (err.code(), error_info(err).reason) == (grpc.StatusCode.INVALID_ARGUMENT, "REQUEST_INVALID")


# -- outcomes (test 6) ----------------------------------------------------------------------------


def test_success_has_a_receipt_and_a_confirm_after_settle_replays_it_byte_for_byte(stack: Stack) -> None:
    card = stack.card(request_id=turn(), title="回执")
    first = confirm(stack, card.token)
    assert first.state == common_pb2.ACTION_STATE_SUCCEEDED and not first.replayed
    assert first.receipt.status == common_pb2.RECEIPT_STATUS_SUCCEEDED
    assert first.receipt.resource_id.startswith("t_") and first.receipt.summary == "待办「回执」已创建。"
    second = confirm(stack, card.token)
    assert second.replayed
    second.replayed = False
    assert second.SerializeToString(deterministic=True) == first.SerializeToString(deterministic=True)
    assert len(stack.todo.writes(card.action_id)) == 1
    sent = stack.todo.writes(card.action_id)[0]["headers"]
    assert sent["idempotency-key"] == f'"{card.action_id}"'
    assert sent["x-countersign-action"] == card.action_id
    assert sent["x-countersign-attempt"] == "1" and sent["x-countersign-policy-version"] == "2026-11-29.1"
    assert sent["traceparent"].startswith("00-")


def test_stale_version_is_failed_and_nothing_is_overwritten(stack: Stack) -> None:
    created = confirm(stack, stack.card(request_id=turn(), title="版本").token).receipt
    todo_id = created.resource_id
    stack.todo.post(f"/todos/{todo_id}/status", {"status": "done", "version": 1}, key=uuid.uuid4().hex)
    card = invoke(
        stack, "set_todo_status", {"id": todo_id, "status": "open", "version": 1}, request_id=turn()
    ).confirmation
    action = confirm(stack, card.token)
    assert action.state == common_pb2.ACTION_STATE_FAILED
    assert action.error.reason == "TODO_VERSION_CONFLICT" and not action.error.retryable
    assert action.receipt.status == common_pb2.RECEIPT_STATUS_FAILED
    assert stack.todo.get(f"/todos/{todo_id}")["status"] == "done"


def test_commit_then_hang_is_unknown_and_never_sent_twice(stack: Stack) -> None:
    sidecar = stack.start_sidecar(flags=["--downstream-deadline", "500ms", "--lease", "5s"])
    try:
        stub = stack.stub(sidecar.info["grpc"])
        card = stack.card(stub, request_id=turn(), title="提交后挂起")
        stack.todo.fault(path="/todos", method="POST", mode="hang_after_commit", seconds=2.0, times=1)
        action = stub.Confirm(gateway_pb2.ConfirmRequest(context=ctx(), token=card.token)).action
        assert action.state == common_pb2.ACTION_STATE_UNKNOWN
        assert action.error.reason == "DOWNSTREAM_TIMEOUT"
        for _ in range(5):  # the user clicks again, the agent retries: the claim stays held
            again = stub.Confirm(gateway_pb2.ConfirmRequest(context=ctx(), token=card.token, wait_ms=100)).action
            assert again.state == common_pb2.ACTION_STATE_UNKNOWN and again.replayed
        time.sleep(2.0)
        assert len(stack.todo.writes(card.action_id)) == 1
        # it did land: the downstream has it by key (reconciliation will find it)
        assert stack.todo.get(f"/todos/by-key/{card.action_id}")["title"] == "提交后挂起"
    finally:
        stack.todo.clear_faults()
        sidecar.stop()


def test_downstream_5xx_is_unknown(stack: Stack) -> None:
    card = stack.card(request_id=turn())
    stack.todo.fault(path="/todos", method="POST", mode="status", status=503, times=1)
    try:
        action = confirm(stack, card.token)
    finally:
        stack.todo.clear_faults()
    assert action.state == common_pb2.ACTION_STATE_UNKNOWN and action.error.reason == "DOWNSTREAM_503"


def test_lapsed_lease_is_reported_and_stored_as_unknown_never_ready(stack: Stack) -> None:
    card = stack.card(request_id=turn())
    r = redis.Redis(unix_socket_path=stack.redis.info["socket"])
    run = f"cs:{{{card.action_id}}}:run"
    # a sidecar that claimed and died: the card is consumed (into the run record, as claim.lua does), the run
    # record's lease is in the past
    sealed = r.hgetall(f"cs:{{{card.action_id}}}:card")
    r.hset(
        run,
        mapping={
            "st": "running",
            "claim": "dead",
            "lease": 1,
            "b": "x",
            "tool": "create_todo",
            "kid": "k1",
            "card": sealed[b"body"],
            "cmac": sealed[b"mac"],
        },
    )
    r.delete(f"cs:{{{card.action_id}}}:card")
    err = rpc_error(lambda: confirm(stack, card.token))
    assert error_info(err).reason == "CONFIRMATION_BINDING_MISMATCH"  # b is not ours: refused, untouched
    from countersign.keyring import Keyring
    from countersign.path.cards import owner

    keys = Keyring.from_file(str(stack.keys))
    r.hset(run, "b", keys.binding("k1", owner(ctx())))
    action = confirm(stack, card.token)
    assert action.state == common_pb2.ACTION_STATE_UNKNOWN and action.error.reason == "LEASE_LAPSED"
    assert r.hget(run, "st") == b"unknown"
    assert stack.todo.writes(card.action_id) == []


# -- the claim re-checks policy; scripts survive SCRIPT FLUSH; one hash tag per action --------------


@pytest.mark.parametrize("change", ["planned", "risk"])
def test_policy_changed_at_claim_time_settles_failed_and_never_executes(stack: Stack, change: str) -> None:
    card = stack.card(request_id=turn(), title="政策变了")
    sidecar = stack.start_sidecar(registry=changed_registry(stack, change))
    try:
        stub = stack.stub(sidecar.info["grpc"])
        err = rpc_error(lambda: stub.Confirm(gateway_pb2.ConfirmRequest(context=ctx(), token=card.token)))
        assert (err.code(), error_info(err).reason) == (grpc.StatusCode.FAILED_PRECONDITION, "POLICY_CHANGED")
        action = stub.GetAction(gateway_pb2.GetActionRequest(context=ctx(), action_id=card.action_id)).action
        assert action.state == common_pb2.ACTION_STATE_FAILED and action.error.reason == "POLICY_CHANGED"
    finally:
        sidecar.stop()
    assert stack.todo.writes(card.action_id) == []
    again = confirm(stack, card.token)  # even the old registry cannot run it now: it settled FAILED
    assert again.state == common_pb2.ACTION_STATE_FAILED and again.replayed
    assert stack.todo.writes(card.action_id) == []


def test_scripts_are_reloaded_after_script_flush(stack: Stack) -> None:
    card = stack.card(request_id=turn())
    redis.Redis(unix_socket_path=stack.redis.info["socket"]).script_flush()
    assert confirm(stack, card.token).state == common_pb2.ACTION_STATE_SUCCEEDED
    assert len(stack.todo.writes(card.action_id)) == 1


def test_every_key_of_an_action_shares_its_hash_tag(stack: Stack) -> None:
    card = stack.card(request_id=turn())
    r = redis.Redis(unix_socket_path=stack.redis.info["socket"])
    tag = f"cs:{{{card.action_id}}}:"

    def keys() -> set[bytes]:
        time.sleep(0.2)  # audit events are written in the background
        return set(r.scan_iter(match=f"*{card.action_id}*"))

    assert keys() == {(tag + k).encode() for k in ("card", "audit", "events")}
    # owner and subject are stored as keyed hashes only
    stored = b"".join(r.hgetall(f"cs:{{{card.action_id}}}:card").values())
    assert b"alice" not in stored
    confirm(stack, card.token)
    assert keys() == {(tag + k).encode() for k in ("run", "audit", "events")}


def test_the_callers_traceparent_continues_to_the_downstream(stack: Stack) -> None:
    card = stack.card(request_id=turn())
    trace_id = uuid.uuid4().hex
    parent = f"00-{trace_id}-{uuid.uuid4().hex[:16]}-01"
    stack.stub().Confirm(
        gateway_pb2.ConfirmRequest(context=ctx(), token=card.token), metadata=(("traceparent", parent),)
    )
    sent = stack.todo.writes(card.action_id)[0]["headers"]["traceparent"]
    version, got_trace, span, flags = sent.split("-")
    assert (version, got_trace, flags) == ("00", trace_id, "01") and span != parent.split("-")[2]


def test_a_settled_outcome_changed_in_redis_is_data_loss_not_a_replay(stack: Stack) -> None:
    card = stack.card(request_id=turn(), title="回执被改")
    confirm(stack, card.token)
    r = redis.Redis(unix_socket_path=stack.redis.info["socket"])
    run = f"cs:{{{card.action_id}}}:run"
    out = r.hget(run, "out")
    assert out is not None
    forged = common_pb2.Action.FromString(out)
    forged.receipt.resource_id = "t_forged"
    r.hset(run, "out", forged.SerializeToString())
    err = rpc_error(lambda: confirm(stack, card.token))
    assert (err.code(), error_info(err).reason) == (grpc.StatusCode.DATA_LOSS, "RECORD_TAMPERED")
    assert len(stack.todo.writes(card.action_id)) == 1


# -- intent_scope: what counts as "the same call" (issue 11) -------------------------------------------------


def _scoped(stack: Stack, scope: str) -> tuple[processes.Proc, gateway_pb2_grpc.ToolGatewayServiceStub]:
    registry = processes.write_registry(
        stack.work, stack.todo.url, source=stack.registry, **{"intent_scope: request": f"intent_scope: {scope}"}
    )
    sidecar = stack.start_sidecar(registry=registry)
    return sidecar, stack.stub(sidecar.info["grpc"])


def test_intent_scope_session_lands_the_same_call_in_another_turn_on_the_same_action(stack: Stack) -> None:
    sidecar, stub = _scoped(stack, "session")
    session, title = turn(), "会话内同一个"

    def call(request_id: str, session_id: str = session) -> gateway_pb2.InvokeResponse:
        return stub.Invoke(
            gateway_pb2.InvokeRequest(
                context=ctx(session_id=session_id, request_id=request_id),
                tool_name="create_todo",
                arguments_json=json.dumps({"title": title}),
            )
        )

    try:
        first = call(turn()).confirmation
        again = call(turn()).confirmation  # another turn of the same session: the same card
        assert (again.action_id, again.token) == (first.action_id, first.token)
        other = call(turn(), session_id=turn()).confirmation
        assert other.action_id != first.action_id, "another session is another action"
        done = stub.Confirm(gateway_pb2.ConfirmRequest(context=ctx(session_id=session), token=first.token)).action
        assert done.state == common_pb2.ACTION_STATE_SUCCEEDED
        later = turn()
        replay = call(later).replay  # a later turn: the settled outcome, not a new card
        assert replay.replayed and replay.receipt == done.receipt
        assert len(stack.todo.writes(first.action_id)) == 1
        # that turn's reply may say it is done: the replayed receipt backs it (no action id named)
        verdict = guard_pb2_grpc.ReplyGuardServiceStub(grpc.insecure_channel(sidecar.info["grpc"])).CheckReply(
            guard_pb2.CheckReplyRequest(
                context=ctx(session_id=session, request_id=later), reply_text=f"已经帮你创建好了待办「{title}」。"
            )
        )
        assert verdict.verdict == guard_pb2.GUARD_VERDICT_PASSED, verdict.reason
    finally:
        sidecar.stop()  # type: ignore[attr-defined]


def test_intent_scope_none_makes_every_invoke_a_new_card(stack: Stack) -> None:
    sidecar, stub = _scoped(stack, "none")
    rid = turn()
    try:
        cards = [
            stub.Invoke(
                gateway_pb2.InvokeRequest(
                    context=ctx(request_id=rid),
                    tool_name="create_todo",
                    arguments_json=json.dumps({"title": "每次都新"}),
                )
            ).confirmation
            for _ in range(2)
        ]
        assert cards[0].action_id != cards[1].action_id and cards[0].token != cards[1].token
        for card in cards:
            action = stub.Confirm(gateway_pb2.ConfirmRequest(context=ctx(), token=card.token)).action
            assert action.state == common_pb2.ACTION_STATE_SUCCEEDED
            assert len(stack.todo.writes(card.action_id)) == 1
        ids = {
            stub.GetAction(
                gateway_pb2.GetActionRequest(context=ctx(), action_id=c.action_id)
            ).action.receipt.resource_id
            for c in cards
        }
        assert len(ids) == 2, "two cards confirmed: two todos, each under its own idempotency key"
    finally:
        sidecar.stop()  # type: ignore[attr-defined]
