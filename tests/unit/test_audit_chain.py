"""The audit chain's own rules, as plain functions: which state an event records, and which chains expire
(the chain against a real Redis and the operator CLI: tests/e2e/test_audit.py)."""

from __future__ import annotations

from typing import Any

from countersign.audit.chain import chain_state, expiry


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
