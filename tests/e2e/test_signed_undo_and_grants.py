"""Compensation and standing grants under the countersignature (issue 13, items 7 and 8 with items 2-4): the
inverse's card carries its approval requirement and digest like any card, and a grant (itself signed by an issuer)
covers a tool that requires a signed approval. Real gRPC, real Redis, the todo service recording what reached it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
import yaml

from countersign.testing import processes
from countersign.testing.approval_issuer import CardIssuer, start_issuer
from countersign.testing.approvals import grant_claims, sign
from countersign.testing.calls import ctx, error_info
from countersign.testing.stack import Stack, Todo
from countersign.v1 import common_pb2, gateway_pb2

SIGNED = common_pb2.APPROVAL_REQUIREMENT_SIGNED


@pytest.fixture(scope="module")
def signed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Stack, CardIssuer]]:
    """The example registry with create_todo approval: signed; delete_todo (confirmation: always, the inverse of
    create_todo) is signed by default once an issuer is configured."""
    work = tmp_path_factory.mktemp("signed-undo")
    issuer = start_issuer(work)
    redis_proc, todo, _, keys = processes.start_backends(work)
    doc = yaml.safe_load(
        processes.EXAMPLE_REGISTRY.read_text(encoding="utf-8").replace(processes.TEMPLATE_URL, todo.info["url"])
    )
    next(t for t in doc["tools"] if t["name"] == "create_todo")["approval"] = "signed"
    registry = work / "signed.yaml"
    registry.write_text(yaml.safe_dump(doc, allow_unicode=True))
    sidecar = None
    try:
        sidecar = processes.start_sidecar(
            work,
            registry,
            redis_url=redis_proc.info["url"],
            keys=keys,
            flags=["--log-level", "warning", "--approvals", str(issuer.settings)],
        )
        yield Stack(work, redis_proc, Todo(todo), registry, keys, sidecar), issuer
    finally:
        for proc in (sidecar, todo, redis_proc):
            if proc is not None:
                proc.stop()


def invoke(stack: Stack, title: str) -> gateway_pb2.InvokeResponse:
    request = gateway_pb2.InvokeRequest(
        context=ctx(request_id=uuid.uuid4().hex), tool_name="create_todo", arguments_json=json.dumps({"title": title})
    )
    response: gateway_pb2.InvokeResponse = stack.stub().Invoke(request)
    return response


def confirm(stack: Stack, card: gateway_pb2.ConfirmationCard, approval: str = "") -> common_pb2.Action:
    request = gateway_pb2.ConfirmRequest(context=ctx(), token=card.token, approval=approval)
    action: common_pb2.Action = stack.stub().Confirm(request).action
    return action


def writes(stack: Stack, key: str) -> list[dict[str, Any]]:
    return [e for e in stack.todo.requests() if e.get("idempotency_key") == key and "/by-key/" not in e["path"]]


def test_the_inverse_card_needs_the_users_approval_like_any_signed_card(signed: tuple[Stack, CardIssuer]) -> None:
    stack, issuer = signed
    card = invoke(stack, f"undo-{uuid.uuid4().hex[:6]}").confirmation
    done = confirm(stack, card, issuer.approve(card))
    assert done.state == common_pb2.ACTION_STATE_SUCCEEDED, done

    request = gateway_pb2.CompensateRequest(context=ctx(), action_id=done.action_id)
    inverse = stack.stub().Compensate(request).confirmation
    assert inverse.approval == SIGNED and len(inverse.approval_digest) > 20, inverse

    with pytest.raises(grpc.RpcError) as info:
        confirm(stack, inverse)  # the agent's own Confirm of the undo
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert error_info(info.value).reason == "APPROVAL_REQUIRED"
    with pytest.raises(grpc.RpcError) as info:
        confirm(stack, inverse, issuer.approve(card))  # the approval of the original card, not of the undo
    assert error_info(info.value).reason == "APPROVAL_INVALID"
    assert writes(stack, inverse.action_id) == []
    again = stack.stub().Compensate(request)  # still waiting for the user: the same card
    assert again.action.state == common_pb2.ACTION_STATE_COMPENSATING
    assert (again.confirmation.token, again.confirmation.approval_digest) == (inverse.token, inverse.approval_digest)

    undone = confirm(stack, inverse, issuer.approve(inverse))
    assert undone.state == common_pb2.ACTION_STATE_SUCCEEDED, undone
    assert undone.receipt.approval.issuer == issuer.issuer and undone.receipt.approval.kid == issuer.key.kid
    assert len(writes(stack, inverse.action_id)) == 1
    after = stack.stub().GetAction(gateway_pb2.GetActionRequest(context=ctx(), action_id=done.action_id)).action
    assert after.state == common_pb2.ACTION_STATE_COMPENSATED, after


def test_a_signed_grant_covers_a_tool_that_requires_a_signed_approval(signed: tuple[Stack, CardIssuer]) -> None:
    """Decision (notes/grants-comp.md): a grant is the user's signed approval, given ahead for a counted number of
    writes, and only an --approvals issuer can sign one; so it covers an approval: signed tool (never a
    confirmation: always or high-risk one, whose every write needs its own card)."""
    stack, issuer = signed
    approval = sign(
        grant_claims(issuer=issuer.issuer, actor_id="alice", tenant_id="t1", capability="todo.create", uses=1),
        issuer.key,
    )
    stack.stub().CreateGrant(gateway_pb2.CreateGrantRequest(context=ctx(), approval=approval))
    first = invoke(stack, f"granted-{uuid.uuid4().hex[:6]}")
    assert first.WhichOneof("outcome") == "action", first
    assert first.action.state == common_pb2.ACTION_STATE_SUCCEEDED and first.action.receipt.grant_id, first
    assert len(writes(stack, first.action.action_id)) == 1
    second = invoke(stack, f"granted-{uuid.uuid4().hex[:6]}")  # the one use is spent: a card that needs approval
    assert second.WhichOneof("outcome") == "confirmation", second
    assert second.confirmation.approval == SIGNED
    assert writes(stack, second.confirmation.action_id) == []
