"""The countersignature over the wire (issue 13, items 2-4; docs/design.md §12): a tool that needs the user's signed
approval is never executed on the agent's Confirm alone, a bad approval is refused naming its check with the card
left READY, and the user's approval executes the card once.

Real gRPC, real Redis, the real todo service recording what reached it; approvals signed by a test issuer whose
JWKS file the sidecar reads (--approvals).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
import redis
import yaml

from countersign.approvals import approval_digest
from countersign.testing import processes
from countersign.testing.approval_issuer import CardIssuer, start_issuer
from countersign.testing.approvals import SigningKey, approval_claims, ciba_claims, sign, write_jwks
from countersign.testing.calls import ctx, error_info
from countersign.testing.stack import Stack, Todo
from countersign.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc

MFA = "urn:example:acr:mfa"
SIGNED = common_pb2.APPROVAL_REQUIREMENT_SIGNED
READY = common_pb2.ACTION_STATE_READY
SUCCEEDED = common_pb2.ACTION_STATE_SUCCEEDED


def registry_doc(todo_url: str, *, create: str = "signed") -> dict[str, Any]:
    """The example registry, create_todo with approval ``create``, set_todo_status raised to risk high (signed by
    default, with the step-up rule); delete_todo is confirmation: always (signed by default)."""
    doc = yaml.safe_load(
        processes.EXAMPLE_REGISTRY.read_text(encoding="utf-8").replace(processes.TEMPLATE_URL, todo_url)
    )
    next(t for t in doc["tools"] if t["name"] == "create_todo")["approval"] = create
    next(c for c in doc["capabilities"] if c["id"] == "todo.set_status")["risk"] = "high"
    next(t for t in doc["tools"] if t["name"] == "set_todo_status")["risk"] = "high"
    return doc


@dataclass
class Signed:
    stack: Stack
    issuer: CardIssuer

    @property
    def stub(self) -> gateway_pb2_grpc.ToolGatewayServiceStub:
        return self.stack.stub()

    @property
    def todo(self) -> Todo:
        return self.stack.todo

    def card(self, tool: str, args: dict[str, Any], **context: Any) -> gateway_pb2.ConfirmationCard:
        response = self.stub.Invoke(
            gateway_pb2.InvokeRequest(
                context=ctx(request_id=uuid.uuid4().hex, **context), tool_name=tool, arguments_json=json.dumps(args)
            )
        )
        assert response.WhichOneof("outcome") == "confirmation", response
        return response.confirmation

    def confirm(self, card: gateway_pb2.ConfirmationCard, approval: str = "", **context: Any) -> common_pb2.Action:
        request = gateway_pb2.ConfirmRequest(context=ctx(**context), token=card.token, approval=approval)
        return self.stub.Confirm(request).action

    def state(self, card: gateway_pb2.ConfirmationCard) -> int:
        request = gateway_pb2.GetActionRequest(context=ctx(), action_id=card.action_id)
        return self.stub.GetAction(request).action.state

    def todo_id(self, title: str) -> str:
        """A todo created the proper way: a card, the user's approval, one write."""
        card = self.card("create_todo", {"title": title})
        action = self.confirm(card, self.issuer.approve(card))
        assert action.state == SUCCEEDED, action
        return action.receipt.resource_id


@pytest.fixture(scope="module")
def signed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Signed]:
    work = tmp_path_factory.mktemp("approvals")
    issuer = start_issuer(work, step_up={"high": [MFA]})
    redis_proc, todo, _, keys = processes.start_backends(work)
    registry = work / "signed.yaml"
    registry.write_text(yaml.safe_dump(registry_doc(todo.info["url"]), allow_unicode=True))
    sidecar = None
    try:
        sidecar = processes.start_sidecar(
            work,
            registry,
            redis_url=redis_proc.info["url"],
            keys=keys,
            flags=["--log-level", "warning", "--approvals", str(issuer.settings)],
        )
        yield Signed(Stack(work, redis_proc, Todo(todo), registry, keys, sidecar), issuer)
    finally:
        for proc in (sidecar, todo, redis_proc):
            if proc is not None:
                proc.stop()


def refused(call: Callable[[], Any]) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        call()
    return info.value


# -- the agent alone cannot, the user's approval can, once ---------------------------------------------------------


def test_the_agent_alone_cannot_confirm_a_signed_tool_and_the_users_approval_runs_it_once(signed: Signed) -> None:
    card = signed.card("create_todo", {"title": "需要用户签字"})
    assert card.approval == SIGNED and card.approval_digest.startswith("sha256:")
    err = refused(lambda: signed.confirm(card))
    assert (err.code(), error_info(err).reason) == (grpc.StatusCode.PERMISSION_DENIED, "APPROVAL_REQUIRED")
    assert error_info(err).metadata["check"] == "missing"
    assert "still READY" in (err.details() or "")
    assert signed.state(card) == READY
    assert signed.todo.writes(card.action_id) == [], "the agent's own Confirm reached nothing"

    approval = signed.issuer.approve(card)
    action = signed.confirm(card, approval)
    assert action.state == SUCCEEDED and not action.replayed
    assert len(signed.todo.writes(card.action_id)) == 1
    evidence = action.receipt.approval
    assert (evidence.issuer, evidence.kid) == (signed.issuer.issuer, signed.issuer.key.kid)
    assert evidence.jti and approval not in action.SerializeToString().decode("latin-1")
    # a duplicate Confirm replays the outcome, with the approval, without it, or with a stale one
    for again in (approval, "", signed.issuer.approve(card, now=time.time() - 3600)):
        replay = signed.confirm(card, again)
        assert replay.replayed and replay.receipt == action.receipt
    assert len(signed.todo.writes(card.action_id)) == 1, "executed exactly once"
    # but only to its owner
    err = refused(lambda: signed.confirm(card, approval, actor_id="bob", subject_id="bob"))
    assert error_info(err).reason == "CONFIRMATION_BINDING_MISMATCH"


def test_the_card_s_digest_is_what_anyone_recomputes_from_what_the_card_shows(signed: Signed) -> None:
    card = signed.card("create_todo", {"title": "Buy milk", "priority": 1})
    shown = approval_digest(
        card.tool_name,
        json.loads(card.prepared_arguments_json),
        card.preview,
        yaml.safe_load(signed.stack.registry.read_text())["policy_version"],
        card.expires_at.ToMilliseconds(),
    )
    assert shown == card.approval_digest


def test_reject_needs_no_approval(signed: Signed) -> None:
    card = signed.card("create_todo", {"title": "不要了"})
    rejected = signed.stub.Reject(gateway_pb2.RejectRequest(context=ctx(), token=card.token)).action
    assert rejected.state == common_pb2.ACTION_STATE_REJECTED
    assert signed.todo.writes(card.action_id) == []


def test_an_idp_s_ciba_token_with_a_countersign_action_entry_is_an_approval(signed: Signed) -> None:
    card = signed.card("create_todo", {"title": "CIBA 批准"})
    token = ciba_claims(
        issuer=signed.issuer.issuer,
        actor_id="alice",
        tenant_id="t1",
        session_id="s1",
        action_id=card.action_id,
        digest=card.approval_digest,
    )
    action = signed.confirm(card, sign(token, signed.issuer.key))
    assert action.state == SUCCEEDED and action.receipt.approval.jti == token["jti"]
    assert len(signed.todo.writes(card.action_id)) == 1


# -- every bad approval: refused naming its check, nothing claimed, the card still approvable -------------------------

OTHER_KEY = SigningKey.generate("EdDSA", kid="not-in-the-jwks")


def hostile(check: str, signed: Signed, card: gateway_pb2.ConfirmationCard) -> str:
    issuer = signed.issuer
    if check == "key":
        return issuer.approve(card, key=OTHER_KEY)
    if check == "issuer":
        return issuer.approve(card, iss="https://evil.example")
    if check == "audience":
        return issuer.approve(card, aud="another-service")
    if check == "expired":
        return issuer.approve(card, now=time.time() - 600, ttl=120)
    if check == "owner":
        return issuer.approve(card, sub="bob")
    if check == "tenant":
        return issuer.approve(card, tid="t2")
    if check == "session":
        return issuer.approve(card, sid="s2")
    if check == "action":  # an approval of another card, digest and all
        other = signed.card("create_todo", {"title": f"另一张 {uuid.uuid4().hex[:6]}"})
        return issuer.approve(other)
    if check == "digest":  # this action, but the digest of other arguments
        other = signed.card("create_todo", {"title": f"别的参数 {uuid.uuid4().hex[:6]}"})
        return issuer.approve(card, dig=other.approval_digest)
    raise AssertionError(check)


def _claims(issuer: CardIssuer, card: gateway_pb2.ConfirmationCard) -> dict[str, Any]:
    return approval_claims(
        issuer=issuer.issuer,
        actor_id="alice",
        tenant_id="t1",
        session_id="s1",
        action_id=card.action_id,
        digest=card.approval_digest,
    )


def alg_none(issuer: CardIssuer, card: gateway_pb2.ConfirmationCard) -> str:
    return sign(_claims(issuer, card), issuer.key, alg="none")


def hmac_with_the_public_key(issuer: CardIssuer, card: gateway_pb2.ConfirmationCard) -> str:
    return sign(_claims(issuer, card), issuer.key, alg="HS256", secret=issuer.key.public_pem())


@pytest.mark.parametrize(
    "check", ["key", "issuer", "audience", "expired", "owner", "tenant", "session", "action", "digest"]
)
def test_each_invalid_approval_is_refused_naming_its_check_and_nothing_is_claimed(signed: Signed, check: str) -> None:
    card = signed.card("create_todo", {"title": f"拒绝 {check} {uuid.uuid4().hex[:6]}"})
    err = refused(lambda: signed.confirm(card, hostile(check, signed, card)))
    info = error_info(err)
    assert (err.code(), info.reason, info.metadata["check"]) == (
        grpc.StatusCode.PERMISSION_DENIED,
        "APPROVAL_INVALID",
        check,
    )
    assert f"({check})" in (err.details() or "") and "still READY" in (err.details() or "")
    assert signed.state(card) == READY
    assert signed.todo.writes(card.action_id) == []
    # the card is untouched: the user's own approval still confirms it, once
    assert signed.confirm(card, signed.issuer.approve(card)).state == SUCCEEDED
    assert len(signed.todo.writes(card.action_id)) == 1


@pytest.mark.parametrize("forge", [alg_none, hmac_with_the_public_key], ids=["alg-none", "hmac-public-key"])
def test_an_unsigned_or_hmac_forged_approval_is_refused_as_algorithm(
    signed: Signed, forge: Callable[[CardIssuer, gateway_pb2.ConfirmationCard], str]
) -> None:
    card = signed.card("create_todo", {"title": f"伪造 {uuid.uuid4().hex[:6]}"})
    err = refused(lambda: signed.confirm(card, forge(signed.issuer, card)))
    assert (error_info(err).reason, error_info(err).metadata["check"]) == ("APPROVAL_INVALID", "algorithm")
    assert signed.state(card) == READY and signed.todo.writes(card.action_id) == []


def test_a_high_risk_tool_needs_the_step_up_acr(signed: Signed) -> None:
    todo_id = signed.todo_id("高风险")
    card = signed.card("set_todo_status", {"id": todo_id, "status": "done"})
    assert card.risk == common_pb2.RISK_LEVEL_HIGH and card.approval == SIGNED
    err = refused(lambda: signed.confirm(card, signed.issuer.approve(card)))  # no acr
    assert (error_info(err).reason, error_info(err).metadata["check"]) == ("APPROVAL_INVALID", "step_up")
    err = refused(lambda: signed.confirm(card, signed.issuer.approve(card, acr="urn:example:acr:password")))
    assert error_info(err).metadata["check"] == "step_up"
    assert signed.state(card) == READY and signed.todo.writes(card.action_id) == []
    action = signed.confirm(card, signed.issuer.approve(card, acr=MFA, amr=["pwd", "otp"]))
    assert action.state == SUCCEEDED and action.receipt.approval.acr == MFA
    assert list(action.receipt.approval.amr) == ["pwd", "otp"]


def test_an_approval_of_a_card_that_needs_none_is_still_verified(signed: Signed, tmp_path: Path) -> None:
    """create_todo with approval: none: the token alone confirms it; an approval given anyway is verified (a bad
    one refused, a good one kept in the receipt)."""
    plain = tmp_path / "plain.yaml"
    plain.write_text(yaml.safe_dump(registry_doc(signed.todo.url, create="none"), allow_unicode=True))
    sidecar = signed.stack.start_sidecar(registry=plain, flags=["--approvals", str(signed.issuer.settings)])
    try:
        stub = signed.stack.stub(sidecar.info["grpc"])

        def card() -> gateway_pb2.ConfirmationCard:
            args = json.dumps({"title": f"不需要签字 {uuid.uuid4().hex[:6]}"})
            request = gateway_pb2.InvokeRequest(context=ctx(request_id=uuid.uuid4().hex), tool_name="create_todo")
            request.arguments_json = args
            return stub.Invoke(request).confirmation

        first = card()
        assert first.approval == common_pb2.APPROVAL_REQUIREMENT_NONE and first.approval_digest
        bad = signed.issuer.approve(first, sub="mallory")
        err = refused(lambda: stub.Confirm(gateway_pb2.ConfirmRequest(context=ctx(), token=first.token, approval=bad)))
        assert (error_info(err).reason, error_info(err).metadata["check"]) == ("APPROVAL_INVALID", "owner")
        assert signed.todo.writes(first.action_id) == []
        good = stub.Confirm(
            gateway_pb2.ConfirmRequest(context=ctx(), token=first.token, approval=signed.issuer.approve(first))
        )
        assert good.action.state == SUCCEEDED and good.action.receipt.approval.issuer == signed.issuer.issuer
        second = card()
        alone = stub.Confirm(gateway_pb2.ConfirmRequest(context=ctx(), token=second.token)).action
        assert alone.state == SUCCEEDED and not alone.receipt.HasField("approval")
    finally:
        sidecar.stop()


def test_a_tool_the_registry_now_requires_signed_is_refused_policy_changed_and_stays_approvable(
    signed: Signed, tmp_path: Path
) -> None:
    """A card issued while create_todo needed no approval, confirmed on a sidecar whose registry now requires one:
    POLICY_CHANGED, nothing claimed (the card READY), and the user's approval still runs it."""
    plain = tmp_path / "plain.yaml"
    plain.write_text(yaml.safe_dump(registry_doc(signed.todo.url, create="none"), allow_unicode=True))
    before = signed.stack.start_sidecar(registry=plain, flags=["--approvals", str(signed.issuer.settings)])
    try:
        request = gateway_pb2.InvokeRequest(
            context=ctx(request_id=uuid.uuid4().hex), tool_name="create_todo", arguments_json='{"title": "改了规则"}'
        )
        card = signed.stack.stub(before.info["grpc"]).Invoke(request).confirmation
        assert card.approval == common_pb2.APPROVAL_REQUIREMENT_NONE
    finally:
        before.stop()
    err = refused(lambda: signed.confirm(card))  # the module's sidecar: create_todo is signed there
    assert (err.code(), error_info(err).reason) == (grpc.StatusCode.FAILED_PRECONDITION, "POLICY_CHANGED")
    assert signed.state(card) == READY and signed.todo.writes(card.action_id) == []
    assert signed.confirm(card, signed.issuer.approve(card)).state == SUCCEEDED


# -- a card edited in Redis is never executed ----------------------------------------------------------------------


def _redis(signed: Signed) -> Any:
    return redis.Redis(unix_socket_path=signed.stack.redis.info["socket"])


def test_a_card_whose_approval_fields_were_edited_in_redis_is_data_loss_and_never_executed(
    signed: Signed, tmp_path: Path
) -> None:
    client = _redis(signed)
    # 1. the requirement flipped to none: where the registry in force still requires an approval, the claim
    # refuses it; where it no longer does, the claim goes through and the executor refuses the sealed card
    card = signed.card("create_todo", {"title": f"改成不需要 {uuid.uuid4().hex[:6]}"})
    client.hset(f"cs:{{{card.action_id}}}:card", "appr", "none")
    assert error_info(refused(lambda: signed.confirm(card))).reason == "POLICY_CHANGED"
    plain = tmp_path / "plain.yaml"
    plain.write_text(yaml.safe_dump(registry_doc(signed.todo.url, create="none"), allow_unicode=True))
    sidecar = signed.stack.start_sidecar(registry=plain, flags=["--approvals", str(signed.issuer.settings)])
    try:
        request = gateway_pb2.ConfirmRequest(context=ctx(), token=card.token)
        err = refused(lambda: signed.stack.stub(sidecar.info["grpc"]).Confirm(request))
    finally:
        sidecar.stop()
    assert (err.code(), error_info(err).reason) == (grpc.StatusCode.DATA_LOSS, "CONFIRMATION_TAMPERED")
    # 2. the digest flipped to that of an approval of other arguments
    card2 = signed.card("create_todo", {"title": f"换摘要 {uuid.uuid4().hex[:6]}"})
    other = signed.card("create_todo", {"title": f"别的 {uuid.uuid4().hex[:6]}"})
    client.hset(f"cs:{{{card2.action_id}}}:card", "dig", other.approval_digest)
    err = refused(lambda: signed.confirm(card2, signed.issuer.approve(card2, dig=other.approval_digest)))
    assert error_info(err).reason == "CONFIRMATION_TAMPERED"
    # 3. the sealed body itself edited (other arguments), approved with the digest the card showed
    card3 = signed.card("create_todo", {"title": f"改参数 {uuid.uuid4().hex[:6]}"})
    key = f"cs:{{{card3.action_id}}}:card"
    client.hset(key, "body", client.hget(key, "body").replace(b"\\u6539", b"X").replace("改".encode(), b"X"))
    err = refused(lambda: signed.confirm(card3, signed.issuer.approve(card3)))
    assert error_info(err).reason == "CONFIRMATION_TAMPERED"
    # 4. the risk flipped to low to skip the step-up
    card4 = signed.card("set_todo_status", {"id": signed.todo_id("改风险"), "status": "done"})
    client.hset(f"cs:{{{card4.action_id}}}:card", "risk", "low")
    err = refused(lambda: signed.confirm(card4, signed.issuer.approve(card4)))
    assert error_info(err).reason == "CONFIRMATION_TAMPERED"
    for c in (card, card2, card3, card4):
        assert signed.todo.writes(c.action_id) == [], "never executed"
    client.close()


# -- keys rotate in the JWKS ---------------------------------------------------------------------------------------


def test_a_new_key_is_used_as_soon_as_the_jwks_lists_it_and_a_removed_key_no_longer_approves(signed: Signed) -> None:
    old, new = signed.issuer.key, SigningKey.generate("ES256", kid=f"rotated-{uuid.uuid4().hex[:6]}")
    try:
        write_jwks(signed.issuer.jwks, old, new)  # the new kid added, the old one still listed
        card = signed.card("create_todo", {"title": "新钥匙"})
        assert signed.confirm(card, signed.issuer.approve(card, key=new)).receipt.approval.kid == new.kid
        card = signed.card("create_todo", {"title": "旧钥匙还在"})
        assert signed.confirm(card, signed.issuer.approve(card, key=old)).state == SUCCEEDED
        write_jwks(signed.issuer.jwks, new)  # the old one removed
        card = signed.card("create_todo", {"title": "旧钥匙已撤"})
        err = refused(lambda: signed.confirm(card, signed.issuer.approve(card, key=old)))
        assert (error_info(err).reason, error_info(err).metadata["check"]) == ("APPROVAL_INVALID", "key")
        assert signed.state(card) == READY and signed.todo.writes(card.action_id) == []
        assert signed.confirm(card, signed.issuer.approve(card, key=new)).state == SUCCEEDED
    finally:
        write_jwks(signed.issuer.jwks, old)
