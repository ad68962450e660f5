"""The audit chain's own rules, as plain functions: which state an event records, and which chains expire
(the chain against a real Redis and the operator CLI: tests/e2e/test_audit.py)."""

from __future__ import annotations

import base64
import json
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from countersign.audit.chain import chain_state, encode, encode_event, expiry, signed


def _event(kind: str, **fields: Any) -> dict[str, Any]:
    return {"t": kind, "f": fields}


def test_a_settled_outcome_is_final_in_the_chain_and_a_released_claim_is_ready_again() -> None:
    lost_settle = [
        _event("issued"),
        _event("claimed"),
        _event("settled", state="SUCCEEDED"),
        _event("settled", state="UNKNOWN"),
        _event("guard"),
    ]  # the fenced executor's late event
    assert chain_state(lost_settle) == "SUCCEEDED"
    assert chain_state([_event("issued"), _event("claimed"), _event("released")]) == "READY"
    assert (
        chain_state(
            [
                _event("issued"),
                _event("claimed"),
                _event("settled", state="UNKNOWN"),
                _event("settled", state="NEEDS_MANUAL_REVIEW"),
                _event("needs_manual_review"),
            ]
        )
        == "NEEDS_MANUAL_REVIEW"
    )
    assert chain_state([_event("issued"), _event("rejected")]) == "REJECTED"
    assert chain_state([_event("continuation_opened")]) is None


def test_the_chain_of_an_unresolved_action_is_kept_and_any_other_expires() -> None:
    def batch(*events: dict[str, Any]) -> list[tuple[str, int, dict[str, Any]]]:
        return [(e["t"], 0, e["f"]) for e in events]

    assert expiry(batch(_event("claimed"))) == "keep"
    assert expiry(batch(_event("claimed"), _event("settled", state="UNKNOWN"))) == "keep"
    assert expiry(batch(_event("claimed"), _event("settled", state="SUCCEEDED"))) == "expire"
    assert expiry(batch(_event("settled", state="NEEDS_MANUAL_REVIEW"), _event("needs_manual_review"))) == "keep"
    assert expiry(batch(_event("resolved", outcome="failed"))) == "expire"
    assert expiry(batch(_event("issued"))) == "expire"
    assert expiry(batch(_event("continuation_opened"), _event("guard"))) == "same"


def _dumps(event: dict[str, Any]) -> bytes:
    """The event encoding the chain has always had (verify.py checks every event against it)."""
    return json.dumps(event, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


FIELDS = st.dictionaries(
    st.text(max_size=8),
    st.none() | st.booleans() | st.integers() | st.text() | st.dictionaries(st.text(max_size=5), st.text(), max_size=3),
    max_size=6,
)


@settings(max_examples=400, deadline=None)
@given(
    FIELDS,
    st.sampled_from(["issued", "claimed", "settled", "guard", "needs_manual_review"]),
    st.sampled_from(["", "k1", "2026-12_a-B"]),
    st.text(alphabet="ABCxyz019-_", max_size=43),
)
@example({"prev": ',"prev":"x"', "mac": "m"}, "settled", "k1", "")  # a field named like a key, quoted
def test_an_events_bytes_with_its_mac_are_its_encoding_with_the_mac_among_its_keys(
    fields: dict[str, Any], kind: str, kid: str, prev: str
) -> None:
    body = {"a": "0" * 32, "seq": 7, "prev": prev, "t": kind, "at": 1764620000000, "kid": kid, "f": fields}
    mac = base64.urlsafe_b64encode(bytes(range(32))).decode().rstrip("=")
    assert encode(body) == _dumps(body)
    assert signed(encode(body), mac) == _dumps({**body, "mac": mac})


class _Str(str):
    pass


class _Int(int):
    pass


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.integers(min_value=-(10**40), max_value=10**40) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=600, deadline=None)
@given(
    st.text(),
    st.integers(min_value=-(10**30), max_value=10**30) | st.booleans(),
    st.text(),
    st.text(max_size=12),
    st.integers(min_value=-(10**30), max_value=10**30) | st.booleans(),
    st.text(max_size=32),
    st.dictionaries(st.text(max_size=8), JSON, max_size=6),
)
@example("0" * 32, 1, "", "claimed", 1764620000000, "k1", {"prev": ',"prev":"x"', "a": "é待\U0001f600", "": [{}]})
@example(_Str("a"), _Int(3), _Str("p"), _Str("settled"), _Int(5), _Str("k1"), {"f": {"nested": [1, -(2**70)]}})
@example("a", 1, '\u2028\x00\x1f"\\', "t", 2, "k", {"x": "\x7f\u00e9", "y": None, "z": True, "w": 2**64})
def test_the_writers_event_bytes_are_the_encoders_for_any_fields(
    action_id: str, seq: int, prev: str, kind: str, at: int, kid: str, fields: dict[str, Any]
) -> None:
    """The writer writes an event's envelope around its fields' encoding (encode_event): the same bytes as
    encode of the whole event, which is what the verifier checks a MAC against, for any values (unicode, control
    characters, big integers, nested objects, lists, bools where integers go, subclasses of str and int)."""
    body = {"a": action_id, "seq": seq, "prev": prev, "t": kind, "at": at, "kid": kid, "f": fields}
    try:
        expected: bytes | type[Exception] = encode(body)
    except UnicodeEncodeError:  # a lone surrogate: neither can write it
        expected = UnicodeEncodeError
    if expected is UnicodeEncodeError:
        try:
            encode_event(action_id, seq, prev, kind, at, kid, fields)
        except UnicodeEncodeError:
            return
        raise AssertionError("encode_event wrote what encode cannot")
    assert encode_event(action_id, seq, prev, kind, at, kid, fields) == expected == _dumps(body)
