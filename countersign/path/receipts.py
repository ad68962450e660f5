"""Outcomes as the contract's Action: the receipt built from a downstream's answer, sealed (MAC'd) for the run
record, and opened again, checked, for every replay (docs/design.md §6, §8)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from countersign.adapters.base import Kind, Outcome
from countersign.canonical import as_text, canonical
from countersign.errors import DataLoss
from countersign.keyring import Keyring
from countersign.path.cards import Card, check_run
from countersign.reasons import Reason
from countersign.registry import Tool
from countersign.registry.templates import render
from countersign.store import RunRecord
from countersign.v1 import common_pb2

EVIDENCE_BYTES = 64 << 10
_ACTION_STATES = {
    Kind.SUCCEEDED: common_pb2.ACTION_STATE_SUCCEEDED,
    Kind.FAILED: common_pb2.ACTION_STATE_FAILED,
    Kind.UNKNOWN: common_pb2.ACTION_STATE_UNKNOWN,
}
# what a stored outcome may say, by the record's state: a state changed by hand disagrees with the MAC'd outcome
_OUTCOME_STATES = {
    "settled": {common_pb2.ACTION_STATE_SUCCEEDED, common_pb2.ACTION_STATE_FAILED, common_pb2.ACTION_STATE_REJECTED},
    "unknown": {common_pb2.ACTION_STATE_UNKNOWN},
    "review": {common_pb2.ACTION_STATE_NEEDS_MANUAL_REVIEW},
}


def seal_action(keyring: Keyring, kid: str, action: common_pb2.Action) -> tuple[bytes, str]:
    """The outcome's bytes and their MAC, as the run record keeps them."""
    out = action.SerializeToString(deterministic=True)
    return out, keyring.mac(kid, "outcome:" + action.action_id, out)


def unknown_message(detail: str) -> str:
    """What UNKNOWN means, every time it is said (I6): it may have landed, it was not retried, it is being
    reconciled by key."""
    return (
        f"{detail.rstrip('.')}. The request may have reached the downstream; it was not retried, and "
        "reconciliation is asking the downstream by its idempotency key (the action id) what became of it"
    )


def open_action(keyring: Keyring, action_id: str, run: RunRecord, *, replayed: bool) -> common_pb2.Action:
    """The action a run record stands for. The record is checked against its sealed card and a stored outcome
    against its MAC and the record's state (DATA_LOSS RECORD_TAMPERED if anything was changed)."""
    check_run(keyring, action_id, run)
    tampered = DataLoss(Reason.RECORD_TAMPERED, "the stored outcome of this action was changed")
    if not run.out:
        if run.state not in ("running", "unknown"):
            raise tampered
        state = common_pb2.ACTION_STATE_RUNNING if run.state == "running" else common_pb2.ACTION_STATE_UNKNOWN
        action = common_pb2.Action(action_id=action_id, state=state, replayed=replayed, tool_name=run.tool)
        if state == common_pb2.ACTION_STATE_UNKNOWN:
            action.error.reason = run.reason or Reason.UNKNOWN
            action.error.message = unknown_message("The executing sidecar's lease lapsed before it recorded an answer")
        return action
    if not keyring.verify(run.kid, "outcome:" + action_id, run.out, run.omac):
        raise tampered
    action = common_pb2.Action.FromString(run.out)
    if action.state not in _OUTCOME_STATES.get(run.state, ()) or action.action_id != action_id:
        raise tampered
    action.replayed = replayed
    return action


def to_action(action_id: str, tool: Tool, card: Card, outcome: Outcome, now_ms: int) -> common_pb2.Action:
    """The outcome as the contract's Action, with a receipt when the downstream answered."""
    action = common_pb2.Action(action_id=action_id, state=_ACTION_STATES[outcome.kind], tool_name=tool.name)
    message = as_text(outcome.message)  # the downstream's words, maybe with a lone surrogate from its JSON
    if outcome.kind is not Kind.SUCCEEDED:
        action.error.reason = outcome.reason
        action.error.message = message
        action.error.retryable = outcome.retryable
    if outcome.kind is Kind.UNKNOWN:
        action.error.message = unknown_message(message or outcome.reason)
        return action
    receipt = action.receipt
    receipt.action_id = action_id
    receipt.tool_name = tool.name
    receipt.grant_id = card.grant  # run under a standing grant, with no card shown: which one
    receipt.status = (
        common_pb2.RECEIPT_STATUS_SUCCEEDED if outcome.kind is Kind.SUCCEEDED else common_pb2.RECEIPT_STATUS_FAILED
    )
    receipt.resource_id = outcome.resource_id
    receipt.resource_version = outcome.resource_version
    if outcome.kind is Kind.SUCCEEDED:
        values: dict[str, Any] = {
            **card.arguments,
            "action_id": action_id,
            "idempotency_key": action_id,
            "receipt.resource_id": outcome.resource_id,
            "receipt.resource_version": outcome.resource_version,
        }
        receipt.summary = render(tool.receipt.summary, values)
    else:
        receipt.summary = message
    receipt.evidence_json = evidence(outcome)
    receipt.settled_at.FromMilliseconds(now_ms)
    return action


def evidence(outcome: Outcome) -> str:
    """The downstream's answer as the receipt keeps it: whole up to EVIDENCE_BYTES, else its hash and size
    (an answer may be up to a MiB; every replay and the run record carry the receipt)."""
    answer: dict[str, Any] = {"status": outcome.status, "body": outcome.body}
    try:
        text = canonical(answer).decode()
    except ValueError:
        text = json.dumps(answer, sort_keys=True, default=str)
    if len(text) <= EVIDENCE_BYTES:
        return text
    whole = text.encode()
    return json.dumps(
        {"status": outcome.status, "evidence_sha256": hashlib.sha256(whole).hexdigest(), "evidence_bytes": len(whole)},
        sort_keys=True,
    )


def with_approval(action: common_pb2.Action, approval: common_pb2.ApprovalEvidence | None) -> common_pb2.Action:
    """The action with the user's approval in its receipt (an outcome without a receipt, UNKNOWN, has none)."""
    if approval is not None and action.HasField("receipt"):
        action.receipt.approval.CopyFrom(approval)
    return action


def refused_action(action_id: str, tool: str, reason: str, message: str, now_ms: int) -> common_pb2.Action:
    """FAILED before anything was sent (tampered card, policy changed at claim time)."""
    action = common_pb2.Action(action_id=action_id, state=common_pb2.ACTION_STATE_FAILED, tool_name=tool)
    action.error.reason, action.error.message = reason, message
    action.receipt.action_id, action.receipt.tool_name = action_id, tool
    action.receipt.status = common_pb2.RECEIPT_STATUS_FAILED
    action.receipt.summary = message
    action.receipt.settled_at.FromMilliseconds(now_ms)
    return action
