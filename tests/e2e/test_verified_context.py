"""Verified context (issue 13, item 5; docs/design.md §12): with --verified-context required, who calls comes from a
context assertion signed by a configured issuer (gRPC metadata ``authorization: Bearer <JWS>``), not from the
CallContext the agent sends; with optional, from the assertion when there is one. Every refusal names its check and
reveals nothing of another owner's action.

Real gRPC, real Redis, the real todo service recording what reached it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import pytest

from countersign.testing import processes
from countersign.testing.approval_issuer import CardIssuer, start_issuer
from countersign.testing.approvals import SigningKey
from countersign.testing.calls import ctx, error_info
from countersign.testing.stack import Todo
from countersign.v1 import (
    common_pb2,
    continuation_pb2,
    continuation_pb2_grpc,
    gateway_pb2,
    gateway_pb2_grpc,
    guard_pb2,
    guard_pb2_grpc,
)

MAINTAIN = common_pb2.ADMIN_MODE_MAINTAIN


@dataclass
class Verified:
    todo: Todo
    issuer: CardIssuer
    required: str  # the address of a sidecar with --verified-context required
    optional: str  # ... optional

    def gateway(self, address: str | None = None) -> gateway_pb2_grpc.ToolGatewayServiceStub:
        return gateway_pb2_grpc.ToolGatewayServiceStub(grpc.insecure_channel(address or self.required))  # type: ignore[no-untyped-call]


@pytest.fixture(scope="module")
def verified(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Verified]:
    work = tmp_path_factory.mktemp("verified")
    issuer = start_issuer(work)
    redis_proc, todo, registry, keys = processes.start_backends(work)
    started: list[processes.Proc] = []
    try:
        for mode in ("required", "optional"):
            flags = ["--log-level", "warning", "--approvals", str(issuer.settings), "--verified-context", mode]
            started.append(
                processes.start_sidecar(work, registry, redis_url=redis_proc.info["url"], keys=keys, flags=flags)
            )
        yield Verified(Todo(todo), issuer, started[0].info["grpc"], started[1].info["grpc"])
    finally:
        for proc in (*started, todo, redis_proc):
            proc.stop()


def bearer(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


def refused(call: Callable[[], Any]) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        call()
    return info.value


def invoke(stub: Any, context: common_pb2.CallContext, metadata: Any = (), title: str = "") -> Any:
    request = gateway_pb2.InvokeRequest(
        context=context, tool_name="create_todo", arguments_json=json.dumps({"title": title or uuid.uuid4().hex[:8]})
    )
    return stub.Invoke(request, metadata=metadata)


def alice_settled(v: Verified) -> tuple[gateway_pb2.ConfirmationCard, common_pb2.Action]:
    """alice's todo, proposed and confirmed with her verified session."""
    session = bearer(v.issuer.context())
    stub = v.gateway()
    card = invoke(stub, ctx(request_id=uuid.uuid4().hex), session).confirmation
    action = stub.Confirm(gateway_pb2.ConfirmRequest(context=ctx(), token=card.token), metadata=session).action
    assert action.state == common_pb2.ACTION_STATE_SUCCEEDED
    return card, action


def reveals_nothing(err: grpc.RpcError, action: common_pb2.Action) -> None:
    text = str(err.details()) + repr(err.trailing_metadata())
    for secret in (action.receipt.resource_id, action.receipt.summary, action.receipt.evidence_json):
        assert secret and secret not in text


# -- required ------------------------------------------------------------------------------------------------------


def test_required_refuses_a_call_without_an_assertion_before_anything_runs(verified: Verified) -> None:
    before = len(verified.todo.requests())
    err = refused(lambda: invoke(verified.gateway(), ctx()))
    assert (err.code(), error_info(err).reason) == (grpc.StatusCode.UNAUTHENTICATED, "CONTEXT_INVALID")
    assert error_info(err).metadata["check"] == "missing"
    assert len(verified.todo.requests()) == before


@pytest.mark.parametrize(
    ("header", "check"),
    [
        pytest.param(lambda i: i.context(key=SigningKey.generate("EdDSA", kid="stranger")), "key", id="unknown-key"),
        pytest.param(lambda i: i.context(now=0, ttl=60), "expired", id="expired"),
        pytest.param(lambda i: i.context(aud="elsewhere"), "audience", id="audience"),
        pytest.param(lambda i: i.context(act="0" * 32, dig="sha256:x"), "kind", id="an-approval-as-a-context"),
        pytest.param(lambda i: "not-a-jws", "malformed", id="malformed"),
    ],
)
def test_an_invalid_assertion_is_unauthenticated_naming_its_check(
    verified: Verified, header: Callable[[CardIssuer], str], check: str
) -> None:
    err = refused(lambda: invoke(verified.gateway(), ctx(), bearer(header(verified.issuer))))
    assert (err.code(), error_info(err).reason) == (grpc.StatusCode.UNAUTHENTICATED, "CONTEXT_INVALID")
    assert error_info(err).metadata["check"] == check


def test_the_verified_claims_fill_an_empty_call_context(verified: Verified) -> None:
    bare = common_pb2.CallContext(request_id=uuid.uuid4().hex, locale="en")
    card = invoke(verified.gateway(), bare, bearer(verified.issuer.context())).confirmation
    # the card is alice's: her plain CallContext and verified session confirm it
    stub = verified.gateway()
    session = bearer(verified.issuer.context())
    action = stub.Confirm(gateway_pb2.ConfirmRequest(context=ctx(), token=card.token), metadata=session).action
    assert action.state == common_pb2.ACTION_STATE_SUCCEEDED


@pytest.mark.parametrize(
    ("sent", "check"),
    [
        pytest.param({"actor_id": "bob", "subject_id": "bob"}, "actor_id", id="another-actor"),
        pytest.param({"tenant_id": "t2"}, "tenant_id", id="another-tenant"),
        pytest.param({"session_id": "s9"}, "session_id", id="another-session"),
        pytest.param({"role": "admin"}, "role", id="a-role-raised"),
        pytest.param({"subject_id": "bob"}, "subject_id", id="another-subject"),
        pytest.param({"admin_context_id": "t1:ops", "admin_mode": MAINTAIN}, "admin_context_id", id="self-admin"),
    ],
)
def test_a_call_context_that_disagrees_with_the_assertion_is_context_mismatch(
    verified: Verified, sent: dict[str, Any], check: str
) -> None:
    before = len(verified.todo.requests())
    err = refused(lambda: invoke(verified.gateway(), ctx(**sent), bearer(verified.issuer.context())))
    assert (err.code(), error_info(err).reason) == (grpc.StatusCode.PERMISSION_DENIED, "CONTEXT_MISMATCH")
    assert error_info(err).metadata["check"] == check
    assert len(verified.todo.requests()) == before


def test_a_verified_admin_acts_only_inside_its_own_tenant(verified: Verified) -> None:
    _, action = alice_settled(verified)
    admin = {"id": "t1:ops", "mode": "MAINTAIN"}
    ann = ctx(actor_id="ann", subject_id="alice", role="admin", admin_context_id="t1:ops", admin_mode=MAINTAIN)
    session = bearer(verified.issuer.context(actor_id="ann", role="admin", admin=admin))
    request = gateway_pb2.ReconcileRequest(context=ann, action_id=action.action_id)
    assert verified.gateway().Reconcile(request, metadata=session).action.receipt == action.receipt
    # an admin of t1 acting in t2 (its own assertion says t2): the admin context is not honoured there
    t2 = bearer(verified.issuer.context(actor_id="eve", tenant_id="t2", role="admin", admin=admin))
    eve = ctx(tenant_id="t2", actor_id="eve", subject_id="alice", role="admin", admin_context_id="t1:ops")
    eve.admin_mode = MAINTAIN
    err = refused(
        lambda: verified.gateway().Reconcile(
            gateway_pb2.ReconcileRequest(context=eve, action_id=action.action_id), metadata=t2
        )
    )
    assert (error_info(err).reason, error_info(err).metadata["check"]) == ("CONTEXT_MISMATCH", "admin_tenant")
    reveals_nothing(err, action)
    # an admin of t2 (verified, in t2) asking for t1's action: not its tenant's
    t2_admin = bearer(
        verified.issuer.context(
            actor_id="eve", tenant_id="t2", role="admin", admin={"id": "t2:ops", "mode": "MAINTAIN"}
        )
    )
    eve.admin_context_id = "t2:ops"
    err = refused(
        lambda: verified.gateway().Reconcile(
            gateway_pb2.ReconcileRequest(context=eve, action_id=action.action_id), metadata=t2_admin
        )
    )
    assert err.code() == grpc.StatusCode.PERMISSION_DENIED
    reveals_nothing(err, action)


def test_no_rpc_reveals_or_changes_another_owner_s_action(verified: Verified) -> None:
    card, action = alice_settled(verified)
    alice = bearer(verified.issuer.context())
    bob = bearer(verified.issuer.context(actor_id="bob"))
    bob_ctx = ctx(actor_id="bob", subject_id="bob")
    channel = grpc.insecure_channel(verified.required)
    gateway = verified.gateway()
    continuations = continuation_pb2_grpc.ContinuationServiceStub(channel)  # type: ignore[no-untyped-call]
    guard = guard_pb2_grpc.ReplyGuardServiceStub(channel)  # type: ignore[no-untyped-call]
    opened = continuations.OpenContinuation(
        continuation_pb2.OpenContinuationRequest(context=ctx(), action_id=action.action_id), metadata=alice
    ).continuation

    def every_call(context: common_pb2.CallContext) -> dict[str, Callable[[], Any]]:
        return {
            "GetAction": lambda: gateway.GetAction(
                gateway_pb2.GetActionRequest(context=context, action_id=action.action_id), metadata=bob
            ),
            "Reconcile": lambda: gateway.Reconcile(
                gateway_pb2.ReconcileRequest(context=context, action_id=action.action_id), metadata=bob
            ),
            "Compensate": lambda: gateway.Compensate(
                gateway_pb2.CompensateRequest(context=context, action_id=action.action_id), metadata=bob
            ),
            "Confirm": lambda: gateway.Confirm(
                gateway_pb2.ConfirmRequest(context=context, token=card.token), metadata=bob
            ),
            "OpenContinuation": lambda: continuations.OpenContinuation(
                continuation_pb2.OpenContinuationRequest(context=context, action_id=action.action_id), metadata=bob
            ),
            "ClaimContinuation": lambda: continuations.ClaimContinuation(
                continuation_pb2.ClaimContinuationRequest(context=context, token=opened.token), metadata=bob
            ),
            "CheckReply": lambda: guard.CheckReply(
                guard_pb2.CheckReplyRequest(context=context, reply_text="已完成。", action_ids=[action.action_id]),
                metadata=bob,
            ),
        }

    # bob with his own verified session, and bob's session with alice's CallContext: both refused
    for context in (bob_ctx, ctx()):
        calls = every_call(context)
        for name, call in calls.items():
            err = refused(call)
            assert err.code() == grpc.StatusCode.PERMISSION_DENIED, (name, err)
            reveals_nothing(err, action)
    channel.close()
    deletes = [
        e for e in verified.todo.requests() if e["method"] == "DELETE" and action.receipt.resource_id in e["path"]
    ]
    assert deletes == [], "nothing was undone"


# -- optional ------------------------------------------------------------------------------------------------------


def test_optional_takes_the_call_context_as_sent_without_an_assertion_and_verifies_one_when_given(
    verified: Verified,
) -> None:
    stub = verified.gateway(verified.optional)
    assert invoke(stub, ctx(request_id=uuid.uuid4().hex)).HasField("confirmation")
    err = refused(lambda: invoke(stub, ctx(actor_id="bob", subject_id="bob"), bearer(verified.issuer.context())))
    assert (error_info(err).reason, error_info(err).metadata["check"]) == ("CONTEXT_MISMATCH", "actor_id")
    err = refused(lambda: invoke(stub, ctx(), bearer(verified.issuer.context(now=0, ttl=60))))
    assert error_info(err).reason == "CONTEXT_INVALID"
