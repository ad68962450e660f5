"""The audit chain's format, shared by its writer and its verifier: how an event is encoded and MAC'd, the
anchor's MAC, and which action state each event records (docs/design.md §10)."""

from __future__ import annotations

import json
from typing import Any

from countersign.canonical import compact
from countersign.keyring import Keyring

UNRESOLVED = frozenset({"RUNNING", "UNKNOWN", "NEEDS_MANUAL_REVIEW"})
OUTCOME_EVENTS = ("settled", "rejected", "resolved")  # events that record the outcome a run record holds


def encode(event: dict[str, Any]) -> bytes:
    """An event's bytes: sorted keys, no spaces. Events hold only strings, integers and booleans, for which
    this is as deterministic as RFC 8785 and several times cheaper."""
    return compact(event).encode()


_quote = json.encoder.encode_basestring  # what compact writes for a string (ensure_ascii=False)


def encode_event(action_id: str, seq: int, prev: str, kind: str, at: int, kid: str, fields: dict[str, Any]) -> bytes:
    """``encode({"a": action_id, "seq": seq, "prev": prev, "t": kind, "at": at, "kid": kid, "f": fields})``, its
    bytes exactly, with the envelope written around ``compact(fields)``: the outer keys are fixed, and sorted they
    are a, at, f, kid, prev, seq, t. The C encoder writes an exact str through ``encode_basestring`` and an exact
    int through ``int.__repr__``; anything else (a subclass, a bool, another type) goes through ``encode``.
    tests/unit/test_audit_chain.py holds the two equal."""
    if (
        type(action_id) is str
        and type(prev) is str
        and type(kind) is str
        and type(kid) is str
        and type(seq) is int
        and type(at) is int
        and type(fields) is dict
    ):
        return (
            f'{{"a":{_quote(action_id)},"at":{at!r},"f":{compact(fields)},"kid":{_quote(kid)},'
            f'"prev":{_quote(prev)},"seq":{seq!r},"t":{_quote(kind)}}}'
        ).encode()
    return encode({"a": action_id, "seq": seq, "prev": prev, "t": kind, "at": at, "kid": kid, "f": fields})


def signed(unsigned: bytes, mac: str) -> bytes:
    """An event's bytes with its MAC, as ``encode({**body, "mac": mac})`` writes them, from ``encode(body)`` (the
    body the MAC is over), without encoding it again: "mac" sorts between the body's "kid" and "prev", and the
    last ``,"prev":`` of the bytes is the body's own (a field of that name is inside "f", before it; after it come
    only the head, the seq and the event's kind, which hold no quote)."""
    at = unsigned.rindex(b',"prev":')
    return unsigned[:at] + b',"mac":' + json.encoder.encode_basestring(mac).encode() + unsigned[at:]


def anchor_mac(keyring: Keyring, kid: str, action_id: str, seq: int, head: str) -> str:
    return keyring.mac(kid, "audit-anchor", f"{action_id}:{seq}:{head}".encode())


def state_after(kind: str, fields: dict[str, Any]) -> str | None:
    """The action state an event records, or None for an event that changes none (continuations, guard)."""
    if kind in ("issued", "released"):  # released: a claim given back, its card READY again
        return "READY"
    if kind == "claimed":
        return "RUNNING"
    if kind == "settled":
        return str(fields.get("state", "")) or None
    if kind == "needs_manual_review":
        return "NEEDS_MANUAL_REVIEW"
    if kind == "rejected":
        return "REJECTED"
    if kind == "resolved":
        return str(fields.get("outcome", "")).upper() or None
    return None


def expiry(batch: list[tuple[str, int, dict[str, Any]]]) -> str:
    """keep (the batch leaves the action unresolved), expire, or same (no event in it changes a state)."""
    for kind, _, fields in reversed(batch):
        state = state_after(kind, fields)
        if state is not None:
            return "keep" if state in UNRESOLVED else "expire"
    return "same"


def chain_state(events: list[dict[str, Any]]) -> str | None:
    """Where the chain says the action stands. A settled outcome is final: a late event of the losing settle
    (fenced by a reconciler) does not reopen it."""
    state: str | None = None
    for event in events:
        found = state_after(str(event.get("t", "")), event.get("f") or {})
        if found is not None and (state is None or state in UNRESOLVED or state == "READY"):
            state = found
    return state


def unknown_key(kid: str) -> str:
    """Why a record cannot be checked: its key id is not in this keys file (not the same as edited)."""
    return f"key {kid!r} is not in the keys file: written by a sidecar with other keys" + (
        " (a generated key: that sidecar ran without COUNTERSIGN_KEYS_FILE)" if kid == "gen" else ""
    )
