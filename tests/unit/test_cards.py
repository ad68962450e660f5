"""What a caller hears when a transition was refused and nothing changed (``cards.refusal_error``, the one mapping
of every ``Refused``: a card's claim or reject, a compensation's claim, a continuation's transitions). Each refusal
is its own status, reason and sentence: a caller retries, asks for a new card or gives up on what it reads here."""

from __future__ import annotations

import grpc
import pytest

from countersign.path.cards import refusal_error
from countersign.store import Refused


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
