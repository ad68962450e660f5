"""What a caller hears when a transition was refused and nothing changed (``cards.refusal_error``, the one mapping
of every ``Refused``: a card's claim or reject, a compensation's claim, a continuation's transitions). Each refusal
is its own status, reason and sentence: a caller retries, asks for a new card or gives up on what it reads here."""

from __future__ import annotations

import grpc
import pytest

from countersign.canonical import canonical
from countersign.errors import DataLoss
from countersign.keyring import Keyring
from countersign.path.cards import Opened, binding_of, open_card, owner, refusal_error, tenant_binding, to_proto
from countersign.store import CardRecord, Refused
from countersign.testing.calls import ctx
from countersign.v1 import common_pb2


@pytest.mark.parametrize(
    ("refused", "code", "reason", "message"),
    [
        (
            Refused("expired"),
            grpc.StatusCode.NOT_FOUND,
            "CONFIRMATION_EXPIRED",
            "the confirmation expired or was never issued",
        ),
        (
            Refused("none"),
            grpc.StatusCode.NOT_FOUND,
            "CONTINUATION_NOT_FOUND",
            "no continuation (or action) by that id: never opened, or expired",
        ),
        (
            Refused("role", tool="delete_todo"),
            grpc.StatusCode.PERMISSION_DENIED,
            "ROLE_NOT_ALLOWED",
            "your role may not run 'delete_todo'; the card is still waiting",
        ),
        (
            Refused("forbidden"),
            grpc.StatusCode.PERMISSION_DENIED,
            "CONFIRMATION_BINDING_MISMATCH",
            "this belongs to another owner or session",
        ),
    ],
    ids=["expired", "none", "role", "forbidden"],
)
def test_each_refusal_is_told_with_its_own_status_reason_and_sentence(
    refused: Refused, code: grpc.StatusCode, reason: str, message: str
) -> None:
    err = refusal_error(refused)
    assert (err.code, err.reason, err.message) == (code, reason, message)
    assert err.retry_after == 0.0  # nothing changed and nothing will by waiting: no RetryInfo


def test_the_callers_binding_for_a_card_sealed_by_a_key_no_longer_listed_is_made_with_the_active_key() -> None:
    """Compensate claims a card another sidecar issued, perhaps under a key this one does not list: the caller's
    binding is then the active key's (claim.lua compares it with the card's), never a KeyError."""
    keyring = Keyring("k2", {"k1": bytes(range(32)), "k2": bytes(range(1, 33))})
    listed, unlisted = CardRecord("k1", "create_todo", b"{}", "mac"), CardRecord("k9", "create_todo", b"{}", "mac")
    assert binding_of(keyring, listed, ctx()) == keyring.binding("k1", owner(ctx()))
    assert binding_of(keyring, unlisted, ctx()) == keyring.binding("k2", owner(ctx()))
    assert binding_of(keyring, listed, ctx()) != binding_of(keyring, listed, ctx(actor_id="bob"))


@pytest.mark.parametrize(
    ("why", "reason", "check"),
    [("approval_required", "APPROVAL_REQUIRED", "missing"), ("approval_invalid", "APPROVAL_INVALID", "malformed")],
)
def test_a_claim_refused_for_its_approval_says_so_and_that_the_card_is_still_ready(
    why: str, reason: str, check: str
) -> None:
    err = refusal_error(Refused(why))  # type: ignore[arg-type]
    assert (err.code, err.reason, err.metadata) == (grpc.StatusCode.PERMISSION_DENIED, reason, {"check": check})
    assert err.message.endswith("nothing was claimed: the card is still READY")


# -- a card sealed by the release before this one still opens (Redis outlives a rolling upgrade) -------------------

KEYS = Keyring("k1", {"k1": bytes(range(32))})
A = "a" * 32
OLD_BODY = {  # a card as sealed before compensation cards, grants, approvals and tenant bindings
    "v": 1,
    "action_id": A,
    "kid": "k1",
    "b": "owner",
    "tool": "create_todo",
    "capability": "todo.create",
    "risk": "low",
    "confirmation": "always",
    "policy_version": "p1",
    "args": {"title": "x"},
    "preview": {"title": "create x"},
    "issued_at_ms": 1,
    "expires_at_ms": 2,
}


def sealed(body: dict[str, object]) -> CardRecord:
    raw = canonical(body)
    return CardRecord("k1", str(body["tool"]), raw, KEYS.mac("k1", "card", raw), "owner")


def test_a_card_sealed_before_the_newer_fields_opens_with_their_defaults() -> None:
    card = open_card(KEYS, A, sealed(OLD_BODY))
    assert (card.resource_version, card.compensates, card.compensates_tool, card.grant) == ("", "", "", "")
    assert (card.approval, card.approval_digest, card.tenant_binding) == ("none", "", "")
    assert to_proto(KEYS, card).approval == common_pb2.APPROVAL_REQUIREMENT_NONE


def test_a_card_opens_with_every_field_it_was_sealed_with() -> None:
    body = {
        **OLD_BODY,
        "resource_version": "7",
        "compensates": "b" * 32,
        "compensates_tool": "create_todo",
        "grant": "g-1",
        "approval": "signed",
        "approval_digest": "dig",
        "tenant_binding": tenant_binding(KEYS, "k1", "t1"),
    }
    card = open_card(KEYS, A, sealed(body))
    assert (card.resource_version, card.compensates, card.compensates_tool, card.grant) == (
        "7",
        "b" * 32,
        "create_todo",
        "g-1",
    )
    assert (card.approval, card.approval_digest) == ("signed", "dig")
    assert card.tenant_binding == KEYS.binding("k1", ["tenant", "t1"]) != tenant_binding(KEYS, "k1", "t2")
    assert to_proto(KEYS, card).approval == common_pb2.APPROVAL_REQUIREMENT_SIGNED


def test_a_card_kept_at_invoke_is_the_card_its_claim_opens_and_any_changed_byte_is_still_tampered() -> None:
    """Opened: the record a claim reads back, identical to the one sealed here, is the card kept for it (not
    verified and decoded again); once only. A record that differs in any field the MAC or open_card checks is
    opened as before: a changed body, MAC, key id, tool or binding is CONFIRMATION_TAMPERED."""
    record = sealed(OLD_BODY)
    opened = Opened()
    card = open_card(KEYS, A, record)
    opened.keep(record, card)
    same = CardRecord(record.kid, record.tool, bytes(record.body), record.mac, "owner")  # as the claim reads it
    assert open_card(KEYS, A, same, opened) is card
    assert open_card(KEYS, A, same, opened) == card and open_card(KEYS, A, same, opened) is not card  # taken once

    other = sealed({**OLD_BODY, "args": {"title": "other"}})  # another valid card, under the same MAC key
    changed = [
        CardRecord("k1", "create_todo", record.body.replace(b"x", b"y", 1), record.mac, "owner"),
        CardRecord("k1", "create_todo", record.body, other.mac, "owner"),
        CardRecord("k1", "create_todo", other.body, other.mac, "owner"),  # valid, but not this action's sealed one
        CardRecord("k1", "delete_todo", record.body, record.mac, "owner"),
        CardRecord("k1", "create_todo", record.body, record.mac, "someone else"),
        CardRecord("k9", "create_todo", record.body, record.mac, "owner"),
    ]
    for bad in changed[:2] + changed[3:]:
        opened.keep(record, card)
        with pytest.raises(DataLoss) as err:
            open_card(KEYS, A, bad, opened)
        assert err.value.reason == "CONFIRMATION_TAMPERED", bad
    opened.keep(record, card)
    assert open_card(KEYS, A, changed[2], opened).arguments == {"title": "other"}  # opened and verified anew


def test_the_kept_cards_are_the_newest_size() -> None:
    opened = Opened(size=2)
    records = {}
    for n in range(3):
        action_id = f"{n:032x}"
        records[action_id] = sealed({**OLD_BODY, "action_id": action_id})
        opened.keep(records[action_id], open_card(KEYS, action_id, records[action_id]))
    assert [opened.take(a, r) is not None for a, r in records.items()] == [False, True, True]
