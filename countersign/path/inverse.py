"""How a compensated action reads: its inverse's id, the proposal that stands, and the original seen through the
inverse's record. Reading only: a reply's evidence reads an action through it too (reply/evidence.py); what
an inverse's run records is execute.record_settled.

Compensate proposes the inverse as a card of its own (recovery/compensate.py); it executes only when that card is
confirmed, like any write (I1). The original's state is derived from the inverse's record, never stored twice:

    inverse card READY, running or UNKNOWN  -> COMPENSATING
    inverse SUCCEEDED                        -> COMPENSATED
    inverse FAILED / review                  -> COMPENSATION_FAILED (with the inverse's reason; never retried)
    inverse REJECTED (the user declined)     -> the original as it is (SUCCEEDED); a later Compensate proposes
                                                again, under the next id of the chain
    no card (never proposed, or it expired)  -> the original as it is

The ids form a chain, each derived from the one before under the id key: a declined proposal stays declined (its
REJECTED record answers a late Confirm), and the next proposal is a new action, at most MAX_PROPOSALS in all.
Only a MAC-verified REJECTED outcome moves the chain on, so an edited record cannot open a second inverse.
"""

from __future__ import annotations

from countersign.keyring import Keyring
from countersign.path.receipts import open_action
from countersign.reasons import Reason
from countersign.store import CardRecord, RunRecord
from countersign.store.protocols import Peek
from countersign.v1 import common_pb2

LABEL = "compensate"
MAX_PROPOSALS = 5  # a declined undo may be proposed again; this many proposals of one action in all


def inverse_id(keyring: Keyring, action_id: str) -> str:
    """The first proposal's id, derived from the original's (a second Compensate lands on the same one)."""
    return keyring.derived_id(LABEL, action_id)


async def standing(store: Peek, keyring: Keyring, action_id: str) -> tuple[str, CardRecord | RunRecord | None]:
    """The proposal that stands: its id and record (None: none proposed, or its card expired). When every
    proposal was declined, the last one (its record says REJECTED)."""
    comp_id = inverse_id(keyring, action_id)
    for n in range(MAX_PROPOSALS):
        found = await store.peek(comp_id)
        declined = isinstance(found, RunRecord) and (
            open_action(keyring, comp_id, found, replayed=False).state == common_pb2.ACTION_STATE_REJECTED
        )
        if not declined or n == MAX_PROPOSALS - 1:
            return comp_id, found
        comp_id = keyring.derived_id(LABEL, comp_id)
    raise AssertionError("unreachable")


def as_action(keyring: Keyring, comp_id: str, found: CardRecord | RunRecord | None) -> common_pb2.Action | None:
    """The standing proposal as an Action (READY for a card waiting for the user)."""
    if isinstance(found, RunRecord):
        return open_action(keyring, comp_id, found, replayed=False)
    if isinstance(found, CardRecord):
        return common_pb2.Action(action_id=comp_id, state=common_pb2.ACTION_STATE_READY, tool_name=found.tool)
    return None


async def inverse_of(store: Peek, keyring: Keyring, action_id: str) -> common_pb2.Action | None:
    """The inverse of an action as it stands (None: never compensated)."""
    return as_action(keyring, *await standing(store, keyring, action_id))


def overlay(original: common_pb2.Action, inverse: common_pb2.Action | None) -> common_pb2.Action:
    """The original action as seen through its compensation."""
    if (
        inverse is None
        or original.state != common_pb2.ACTION_STATE_SUCCEEDED
        or inverse.state == common_pb2.ACTION_STATE_REJECTED
    ):
        return original
    out = common_pb2.Action()
    out.CopyFrom(original)
    if inverse.state == common_pb2.ACTION_STATE_SUCCEEDED:
        out.state = common_pb2.ACTION_STATE_COMPENSATED
    elif inverse.state in (
        common_pb2.ACTION_STATE_RUNNING,
        common_pb2.ACTION_STATE_UNKNOWN,
        common_pb2.ACTION_STATE_READY,
    ):
        out.state = common_pb2.ACTION_STATE_COMPENSATING
        if inverse.state == common_pb2.ACTION_STATE_UNKNOWN:  # say what UNKNOWN means, here too
            out.error.reason = inverse.error.reason
            out.error.message = f"the inverse ({inverse.tool_name}) is UNKNOWN: {inverse.error.message}"
    else:
        out.state = common_pb2.ACTION_STATE_COMPENSATION_FAILED
        out.error.reason = inverse.error.reason or Reason.COMPENSATION_FAILED
        out.error.message = f"the inverse ({inverse.tool_name}) did not succeed: {inverse.error.message}"
    return out
