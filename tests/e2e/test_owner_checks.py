"""Who may see or change an action (docs/design.md §12), with --verified-context off (the default): an admin context
is honoured only with role admin and only inside its own tenant, and every RPC that reveals or changes an action
checks its owner or such an admin. Nothing of another owner's receipt is in a refusal.

Real gRPC, real Redis, the real todo service recording what reached it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml

from countersign.testing.calls import ctx, error_info
from countersign.testing.stack import Stack
from countersign.v1 import common_pb2, continuation_pb2, continuation_pb2_grpc, gateway_pb2, guard_pb2, guard_pb2_grpc

MAINTAIN = common_pb2.ADMIN_MODE_MAINTAIN


def turn() -> str:
    return uuid.uuid4().hex


def refused(call: Callable[[], Any]) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        call()
    return info.value


def settled(stack: Stack, title: str) -> tuple[gateway_pb2.ConfirmationCard, common_pb2.Action]:
    """alice's todo, confirmed and SUCCEEDED."""
    card = stack.card(request_id=turn(), title=title)
    action = stack.stub().Confirm(gateway_pb2.ConfirmRequest(context=ctx(), token=card.token)).action
    assert action.state == common_pb2.ACTION_STATE_SUCCEEDED
    return card, action


def reveals_nothing(err: grpc.RpcError, action: common_pb2.Action) -> None:
    """No receipt bytes of the action anywhere in the refusal: message, details, trailers."""
    text = str(err.details()) + repr(err.trailing_metadata())
    for secret in (action.receipt.resource_id, action.receipt.summary, action.receipt.evidence_json):
        assert secret and secret not in text


def test_a_self_asserted_admin_with_role_user_reads_no_other_owner_s_receipt_through_reconcile(stack: Stack) -> None:
    _, action = settled(stack, "mallory 想看的")
    mallory = ctx(actor_id="mallory", subject_id="alice", role="user", admin_context_id="t1:ops", admin_mode=MAINTAIN)
    err = refused(
        lambda: stack.stub().Reconcile(gateway_pb2.ReconcileRequest(context=mallory, action_id=action.action_id))
    )
    assert err.code() == grpc.StatusCode.PERMISSION_DENIED
    assert (error_info(err).reason, error_info(err).metadata["check"]) == ("CONTEXT_MISMATCH", "admin_role")
    reveals_nothing(err, action)


def test_an_admin_of_another_tenant_reads_no_receipt_through_reconcile(stack: Stack) -> None:
    _, action = settled(stack, "t1 的待办")
    other = ctx(tenant_id="t2", actor_id="eve", subject_id="alice", role="admin", admin_context_id="t2:ops")
    other.admin_mode = MAINTAIN
    err = refused(
        lambda: stack.stub().Reconcile(gateway_pb2.ReconcileRequest(context=other, action_id=action.action_id))
    )
    assert err.code() == grpc.StatusCode.PERMISSION_DENIED
    reveals_nothing(err, action)
    # the admin context id of t1 sent from tenant t2: refused by the admin rule itself
    t1_id = ctx(tenant_id="t2", actor_id="eve", subject_id="alice", role="admin", admin_context_id="t1:ops")
    t1_id.admin_mode = MAINTAIN
    err = refused(
        lambda: stack.stub().Reconcile(gateway_pb2.ReconcileRequest(context=t1_id, action_id=action.action_id))
    )
    assert (error_info(err).reason, error_info(err).metadata["check"]) == ("CONTEXT_MISMATCH", "admin_tenant")
    reveals_nothing(err, action)


def test_an_admin_of_t1_acting_in_t2_creates_nothing(stack: Stack) -> None:
    before = len(stack.todo.requests())
    context = ctx(tenant_id="t2", actor_id="eve", subject_id="bob", role="admin", admin_context_id="t1:ops")
    context.admin_mode = MAINTAIN
    err = refused(
        lambda: stack.stub().Invoke(
            gateway_pb2.InvokeRequest(context=context, tool_name="create_todo", arguments_json='{"title": "bob 的"}')
        )
    )
    assert (err.code(), error_info(err).reason) == (grpc.StatusCode.PERMISSION_DENIED, "CONTEXT_MISMATCH")
    assert len(stack.todo.requests()) == before, "not even a prepare reached the downstream"


def test_a_self_asserted_admin_with_role_user_proposes_nothing_for_another_subject(stack: Stack) -> None:
    before = len(stack.todo.requests())
    context = ctx(actor_id="mallory", subject_id="bob", role="user", admin_context_id="t1:ops", admin_mode=MAINTAIN)
    err = refused(
        lambda: stack.stub().Invoke(
            gateway_pb2.InvokeRequest(context=context, tool_name="create_todo", arguments_json='{"title": "bob 的"}')
        )
    )
    assert (error_info(err).reason, error_info(err).metadata["check"]) == ("CONTEXT_MISMATCH", "admin_role")
    assert len(stack.todo.requests()) == before


def test_an_admin_of_the_action_s_tenant_may_reconcile_and_read_it(stack: Stack) -> None:
    _, action = settled(stack, "管理员可查")
    admin = ctx(actor_id="ann", subject_id="alice", role="admin", admin_context_id="t1:ops", admin_mode=MAINTAIN)
    got = stack.stub().Reconcile(gateway_pb2.ReconcileRequest(context=admin, action_id=action.action_id)).action
    assert got.receipt == action.receipt
    seen = stack.stub().GetAction(gateway_pb2.GetActionRequest(context=admin, action_id=action.action_id)).action
    assert seen.receipt == action.receipt


@pytest.mark.parametrize(
    "who",
    [
        pytest.param({"actor_id": "bob", "subject_id": "bob"}, id="another-actor"),
        pytest.param({"session_id": "s2"}, id="another-session"),
        pytest.param({"tenant_id": "t2"}, id="another-tenant"),
    ],
)
def test_every_rpc_that_reveals_or_changes_an_action_refuses_another_owner(stack: Stack, who: dict[str, str]) -> None:
    card, action = settled(stack, f"只给 alice 看 {uuid.uuid4().hex[:6]}")
    other = ctx(**who)
    channel = grpc.insecure_channel(stack.address)
    gateway = stack.stub()
    continuations = continuation_pb2_grpc.ContinuationServiceStub(channel)  # type: ignore[no-untyped-call]
    guard = guard_pb2_grpc.ReplyGuardServiceStub(channel)  # type: ignore[no-untyped-call]
    opened = continuations.OpenContinuation(
        continuation_pb2.OpenContinuationRequest(context=ctx(), action_id=action.action_id)
    ).continuation
    calls: dict[str, Callable[[], Any]] = {
        "GetAction": lambda: gateway.GetAction(gateway_pb2.GetActionRequest(context=other, action_id=action.action_id)),
        "Reconcile": lambda: gateway.Reconcile(gateway_pb2.ReconcileRequest(context=other, action_id=action.action_id)),
        "Compensate": lambda: gateway.Compensate(
            gateway_pb2.CompensateRequest(context=other, action_id=action.action_id)
        ),
        "Confirm": lambda: gateway.Confirm(gateway_pb2.ConfirmRequest(context=other, token=card.token)),
        "Reject": lambda: gateway.Reject(gateway_pb2.RejectRequest(context=other, token=card.token)),
        "OpenContinuation": lambda: continuations.OpenContinuation(
            continuation_pb2.OpenContinuationRequest(context=other, action_id=action.action_id)
        ),
        "ClaimContinuation": lambda: continuations.ClaimContinuation(
            continuation_pb2.ClaimContinuationRequest(context=other, token=opened.token)
        ),
        "CheckReply": lambda: guard.CheckReply(
            guard_pb2.CheckReplyRequest(context=other, reply_text="已创建。", action_ids=[action.action_id])
        ),
    }
    for name, call in calls.items():
        err = refused(call)
        assert err.code() == grpc.StatusCode.PERMISSION_DENIED, name
        reveals_nothing(err, action)
    channel.close()
    # and nothing was undone
    assert [
        e for e in stack.todo.requests() if e["method"] == "DELETE" and action.receipt.resource_id in e["path"]
    ] == []
    assert json.loads(action.receipt.evidence_json)["status"]


def test_reconcile_passes_the_same_policy_step_as_every_entry(stack: Stack, tmp_path: Path) -> None:
    """An admin of the action's tenant in MAINTAIN mode, but of a role the tool does not list, is refused by
    Reconcile as by any other entry (ROLE_NOT_ALLOWED), and hears nothing of the receipt."""
    _, action = settled(stack, f"角色不符 {uuid.uuid4().hex[:6]}")
    doc = yaml.safe_load(stack.registry.read_text(encoding="utf-8"))
    next(t for t in doc["tools"] if t["name"] == "create_todo")["roles"] = ["user"]
    users_only = tmp_path / "users-only.yaml"
    users_only.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
    sidecar = stack.start_sidecar(registry=users_only)
    try:
        admin = ctx(actor_id="ann", subject_id="alice", role="admin", admin_context_id="t1:ops", admin_mode=MAINTAIN)
        request = gateway_pb2.ReconcileRequest(context=admin, action_id=action.action_id)
        err = refused(lambda: stack.stub(sidecar.info["grpc"]).Reconcile(request))
    finally:
        sidecar.stop()
    assert (err.code(), error_info(err).reason) == (grpc.StatusCode.PERMISSION_DENIED, "ROLE_NOT_ALLOWED")
    reveals_nothing(err, action)
