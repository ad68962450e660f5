"""The countersignature's wiring, stage by stage (docs/design.md §12): the card's sealed approval digest, Confirm's
check of an approval before Redis (path/approval.py), the executor's check of a won claim against the MAC'd card,
the settings of approvals, verified context and TLS, and the decode step's peer and bearer rules. No Redis here."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import grpc
import pytest

from countersign import registry
from countersign.approvals import ApprovalEvidence, ContextMode, approval_digest
from countersign.errors import FailedPrecondition, PermissionDenied, SettingsError
from countersign.keyring import Keyring
from countersign.path import approval, cards
from countersign.path.approval import Approvals, Checked, claimed_as_sealed
from countersign.sidecar import identity
from countersign.sidecar.settings import Settings, loopback
from countersign.store import ClaimApproval, Refused
from countersign.testing.approval_issuer import ACTION, ISS, KEYS, MFA, NOW, make_issuer
from countersign.testing.approvals import context_claims, sign
from countersign.testing.calls import ctx
from countersign.testing.processes import ROOT
from countersign.v1 import common_pb2

KEYRING = Keyring(active="k1", keys={"k1": b"1" * 32})
EXAMPLE = registry.load(str(ROOT / "examples" / "registry.yaml"), issuers=True)


def sealed(tool: str = "delete_todo", arguments: dict[str, Any] | None = None) -> cards.Card:
    record = cards.seal(
        KEYRING,
        action_id=ACTION,
        binding="b",
        tool=EXAMPLE.tools[tool],
        policy_version=EXAMPLE.policy_version,
        arguments=arguments if arguments is not None else {"id": "t-1"},
        resource_version="3",
        preview=common_pb2.Preview(title="删除待办", target="t-1"),
        now_ms=1_796_117_400_000,
        ttl_ms=250,
        tenant="t1",
    )
    assert (record.approval, record.risk) == (EXAMPLE.tools[tool].approval, EXAMPLE.tools[tool].risk)
    return cards.open_card(KEYRING, ACTION, record)


# -- the card --------------------------------------------------------------------------------------------------------


def test_the_card_seals_its_approval_and_the_digest_of_exactly_what_it_shows() -> None:
    card = sealed()
    shown = cards.to_proto(KEYRING, card)
    assert (card.approval, shown.approval) == ("signed", common_pb2.APPROVAL_REQUIREMENT_SIGNED)
    recomputed = approval_digest(
        shown.tool_name,
        json.loads(shown.prepared_arguments_json),
        shown.preview,
        EXAMPLE.policy_version,
        shown.expires_at.ToMilliseconds(),
    )
    assert shown.approval_digest == card.approval_digest == recomputed
    assert sealed(arguments={"id": "t-2"}).approval_digest != card.approval_digest
    plain = cards.to_proto(KEYRING, sealed("create_todo", {"title": "x"}))
    assert plain.approval == common_pb2.APPROVAL_REQUIREMENT_NONE and plain.approval_digest


def test_prepared_arguments_that_are_not_canonical_json_are_refused_not_an_internal_error() -> None:
    with pytest.raises(FailedPrecondition) as info:
        sealed("create_todo", {"title": "x", "priority": 2**60})
    assert info.value.reason == "PREPARED_ARGS_INVALID"


def test_the_tenant_binding_is_a_keyed_hash_never_the_tenant() -> None:
    card = sealed()
    assert card.tenant_binding == cards.tenant_binding(KEYRING, "k1", "t1") != cards.tenant_binding(KEYRING, "k1", "t2")
    assert "t1" not in card.tenant_binding


# -- Confirm's check, before Redis -------------------------------------------------------------------------------------


async def test_an_approval_is_verified_before_redis_and_what_the_claim_compares_is_handed_on(tmp_path: Path) -> None:
    issuer = await make_issuer(tmp_path, step_up={"high": [MFA]})
    try:
        checks = Approvals(issuer.verifier, clock=lambda: NOW)
        none = await checks.check(",delete_todo,", ctx(), ACTION, "")
        assert none == Checked(ClaimApproval(signed_tools=",delete_todo,"))
        token = issuer.token(dig="sha256:the-card", acr=MFA)
        good = await checks.check(",,", ctx(), ACTION, token)
        assert good.claim == ClaimApproval("sha256:the-card", ",low,medium,high,irreversible,", "", ",,")
        assert good.evidence is not None and good.evidence.acr == MFA and good.refused is None
        weak = await checks.check(",,", ctx(), ACTION, issuer.token(dig="sha256:the-card"))
        assert weak.claim.risks == ",low,medium,irreversible,"  # high needs the step-up acr
        for context, check in ((ctx(actor_id="bob"), "owner"), (ctx(session_id="s2"), "session")):
            bad = await checks.check(",,", context, ACTION, token)
            assert (bad.claim.failed, bad.evidence) == (check, None)
            assert bad.refused is not None and bad.refused.check == check
        other = await checks.check(",,", ctx(), "f" * 32, token)
        assert other.claim.failed == "action"
    finally:
        await issuer.verifier.close()


async def test_without_any_issuer_an_approval_cannot_be_verified_and_is_refused() -> None:
    checked = await Approvals(None).check(",,", ctx(), ACTION, "a.b.c")
    assert checked.claim.failed == "issuer" and checked.evidence is None


def evidence(digest: str = "sha256:the-card") -> ApprovalEvidence:
    return ApprovalEvidence(ISS, "k", "j", "", (), NOW, NOW + 60, "approval", digest)


@pytest.mark.parametrize(
    ("approval_", "checked", "problem"),
    [
        ("none", None, ""),
        ("signed", None, "without one"),
        ("signed", Checked(ClaimApproval("sha256:the-card", ",low,"), evidence()), ""),
        ("signed", Checked(ClaimApproval("sha256:x", ",low,"), evidence("sha256:x")), "another digest"),
        ("signed", Checked(ClaimApproval("sha256:the-card", ",medium,"), evidence()), "does not satisfy its risk"),
        ("none", Checked(ClaimApproval("sha256:x", ",low,"), evidence("sha256:x")), "another digest"),
    ],
)
def test_a_won_claim_is_checked_against_the_mac_d_card(approval_: str, checked: Checked | None, problem: str) -> None:
    found = claimed_as_sealed(approval_, "sha256:the-card", "low", checked)
    assert (problem in found) if problem else found == ""


def test_each_claim_refusal_names_its_check_and_says_the_card_is_still_ready() -> None:
    required = approval.refusal(Refused("approval_required", check="card"), Checked(ClaimApproval()))
    assert isinstance(required, PermissionDenied) and required.reason == "APPROVAL_REQUIRED"
    assert required.metadata == {"check": "missing"} and "still READY" in required.message
    changed = approval.refusal(Refused("approval_required", check="registry"), Checked(ClaimApproval()))
    assert (changed.code, changed.reason) == (grpc.StatusCode.FAILED_PRECONDITION, "POLICY_CHANGED")
    for check in ("digest", "step_up", "signature"):
        invalid = approval.refusal(Refused("approval_invalid", check=check), Checked(ClaimApproval()))
        assert (invalid.reason, invalid.metadata["check"]) == ("APPROVAL_INVALID", check)
        assert f"({check})" in invalid.message and "still READY" in invalid.message


# -- settings ---------------------------------------------------------------------------------------------------------


BASE = Settings(registry="r.yaml")


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"verified_context": "sometimes"}, "--verified-context must be off, optional or required"),
        ({"verified_context": "required"}, "--verified-context needs --approvals"),
        ({"tls_cert": "c.pem"}, "--tls-cert and --tls-key go together"),
        ({"downstream_key": "k.pem"}, "--downstream-cert and --downstream-key go together"),
        ({"tls_client_ca": "ca.pem"}, "--tls-client-ca needs --tls-cert"),
        ({"tls_cert": "c", "tls_key": "k", "tls_allowed_peers": "spiffe://x"}, "--tls-allowed-peers needs"),
        ({"listen": "0.0.0.0:50051"}, "is beyond loopback and has no TLS"),
        ({"listen": "10.0.0.7:50051"}, "is beyond loopback and has no TLS"),
        ({"listen": "[::]:50051"}, "is beyond loopback and has no TLS"),
    ],
)
def test_identity_settings_that_cannot_work_stop_the_start(changes: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError, match=message.replace("(", r"\(")):
        replace(BASE, **changes).validate()


@pytest.mark.parametrize(
    "changes",
    [
        {"listen": "0.0.0.0:50051", "insecure_listen": "yes"},
        {"listen": "0.0.0.0:50051", "tls_cert": "c", "tls_key": "k"},
        {"listen": "unix:/run/countersign/countersign.sock"},
        {"listen": "[::1]:50051"},
        {"listen": "localhost:50051"},
        {"listen": "127.0.0.9:50051"},
        {"approvals": "a.yaml", "verified_context": "optional"},
    ],
)
def test_identity_settings_that_work(changes: dict[str, str]) -> None:
    replace(BASE, **changes).validate()


def test_loopback_is_a_unix_socket_or_a_loopback_host() -> None:
    assert [loopback(a) for a in ("unix:/s", "127.0.0.1:1", "[::1]:1", "localhost:1", "0.0.0.0:1", "pod:1")] == [
        True,
        True,
        True,
        True,
        False,
        False,
    ]
    assert Settings(registry="r", tls_allowed_peers=" spiffe://a , b.internal,").allowed_peers == {
        "spiffe://a",
        "b.internal",
    }


# -- the decode step: peers and bearer tokens --------------------------------------------------------------------------


def test_a_peer_is_admitted_by_one_san_on_the_allow_list_only() -> None:
    gate = identity.Identity(None, ContextMode.OFF, frozenset({"spiffe://example.org/agent"}))
    gate.check_peer({identity.SAN: [b"agent.local", b"spiffe://example.org/agent"]})
    for auth in (
        {identity.SAN: [b"spiffe://example.org/other"]},
        {"x509_common_name": [b"spiffe://example.org/agent"]},
        {},
    ):
        with pytest.raises(PermissionDenied) as info:
            gate.check_peer(auth)
        assert info.value.reason == "PEER_NOT_ALLOWED"


async def test_the_authorization_header_must_be_one_bearer_token(tmp_path: Path) -> None:
    issuer = await make_issuer(tmp_path)
    try:
        gate = identity.Identity(issuer.verifier, ContextMode.REQUIRED, clock=lambda: NOW)
        token = sign(
            context_claims(issuer=ISS, actor_id="alice", tenant_id="t1", session_id="s1", now=NOW), KEYS["EdDSA"]
        )
        merged = await gate.context(common_pb2.CallContext(), [("authorization", f"Bearer {token}")])
        assert (merged.tenant_id, merged.actor_id, merged.subject_id, merged.session_id, merged.role) == (
            "t1",
            "alice",
            "alice",
            "s1",
            "user",
        )
        for metadata, check in (
            ([], "missing"),
            ([("authorization", f"Basic {token}")], "malformed"),
            ([("authorization", "Bearer ")], "malformed"),
            ([("authorization", f"Bearer {token}"), ("authorization", f"Bearer {token}")], "malformed"),
        ):
            with pytest.raises(Exception) as info:
                await gate.context(common_pb2.CallContext(), metadata)
            assert (getattr(info.value, "reason", ""), info.value.metadata["check"]) == ("CONTEXT_INVALID", check)  # type: ignore[attr-defined]
            assert info.value.code == grpc.StatusCode.UNAUTHENTICATED  # type: ignore[attr-defined]
    finally:
        await issuer.verifier.close()
