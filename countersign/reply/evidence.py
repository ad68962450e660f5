"""What the reply guard is shown and what is kept of its verdict: the settled actions a reply may speak of, as
evidence, and the verdict as the continuation record, the metric and the audit keep it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from countersign.canonical import canonical
from countersign.errors import InvalidArgument
from countersign.guard import Evidence, verbs_of
from countersign.keyring import Keyring
from countersign.path import cards
from countersign.path.inverse import inverse_of, overlay
from countersign.path.receipts import open_action
from countersign.reasons import Reason
from countersign.registry import Registry
from countersign.store import CardRecord, RunRecord
from countersign.store.protocols import Peek
from countersign.v1 import common_pb2

if TYPE_CHECKING:
    from countersign.guard import Verdict

MAX_REPLY_BYTES = 64 * 1024


def check_size(reply_text: str) -> None:
    if len(reply_text.encode("utf-8", "surrogatepass")) > MAX_REPLY_BYTES:
        raise InvalidArgument(Reason.REPLY_TOO_LARGE, f"reply_text is larger than {MAX_REPLY_BYTES} bytes")


async def settled_action(
    store: Peek, keyring: Keyring, action_id: str, context: common_pb2.CallContext | None = None
) -> common_pb2.Action | None:
    """The settled action (None when not settled); with a context, only the caller's own. A succeeded action is
    read through its undo, as GetAction reads it: once the inverse has run it is COMPENSATED, and backs no claim."""
    found = await store.peek(action_id)
    if not isinstance(found, RunRecord) or found.state != "settled":
        if isinstance(found, (RunRecord, CardRecord)) and context is not None:
            cards.require_owner(keyring, action_id, found, context)
        return None
    if context is not None:
        cards.require_owner(keyring, action_id, found, context)
    action = open_action(keyring, action_id, found, replayed=False)
    if action.state == common_pb2.ACTION_STATE_SUCCEEDED:
        action = overlay(action, await inverse_of(store, keyring, action_id))
    return action


def evidence(registry: Registry, action: common_pb2.Action) -> Evidence:
    """A settled action as the guard weighs it: did it succeed (and still stand: an undone one did not), and what
    may a reply say it did."""
    tool = registry.tools.get(action.tool_name)
    verbs = tool.verbs if tool is not None and tool.verbs else verbs_of(action.tool_name)
    return Evidence(
        action_id=action.action_id,
        tool_name=action.tool_name,
        succeeded=action.receipt.status == common_pb2.RECEIPT_STATUS_SUCCEEDED
        and action.state != common_pb2.ACTION_STATE_COMPENSATED,
        verbs=verbs,
    )


def verdict_json(verdict: Verdict) -> bytes:
    """The verdict as the continuation record keeps it."""
    return canonical({"replaced": verdict.replaced, "reason": verdict.reason, "claims": list(verdict.matched_claims)})


def verdict_label(verdict: Verdict) -> str:
    """The metric's verdict label: flagged is a pass in a language the guard has no lexicon for."""
    if verdict.replaced:
        return "replaced"
    return "flagged" if verdict.reason == "UNSUPPORTED_LANGUAGE" else "passed"


def logged_statements(keyring: Keyring, verdict: Verdict) -> list[dict[str, str]]:
    """What the decision log and the audit keep of each success statement the guard read (its ``claims``): the
    rule that read it, and its clause as a keyed hash, never the reply's text."""
    kept = [
        {
            "rule": c.rule,
            "verb_class": c.verb_class,
            "clause_hmac": keyring.digest("claim", c.clause.encode("utf-8", "replace")),
        }
        for c in verdict.claims
    ]
    # a claim the learned veto set aside is logged like a rule's decision: rule ``veto``, its p and threshold
    return kept + [
        {
            "rule": "veto",
            "verb_class": c.verb_class,
            "clause_hmac": keyring.digest("claim", c.clause.encode("utf-8", "replace")),
            "read_by": c.rule,
            "p": f"{p:.3f}",
            "t": f"{t:.2f}",
        }
        for c, p, t in verdict.vetoed
    ]
