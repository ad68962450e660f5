"""How a compensated action reads: its inverse's id, and the original seen through the inverse's record.

The original's state is derived from the inverse's record, never stored twice (recovery/compensate.py runs the
inverse; GetAction and Compensate show the original through it):

    inverse running or UNKNOWN  -> COMPENSATING
    inverse SUCCEEDED           -> COMPENSATED
    inverse FAILED / review     -> COMPENSATION_FAILED (with the inverse's reason; never retried in a loop)
"""

from __future__ import annotations

from countersign.keyring import Keyring
from countersign.path.receipts import open_action
from countersign.reasons import Reason
from countersign.store import CardRecord, RunRecord
from countersign.store.protocols import Peek
from countersign.v1 import common_pb2

LABEL = "compensate"


def inverse_id(keyring: Keyring, action_id: str) -> str:
    """The inverse's action id, derived from the original's (a second Compensate lands on the same one)."""
    return keyring.derived_id(LABEL, action_id)


async def inverse_of(store: Peek, keyring: Keyring, action_id: str) -> common_pb2.Action | None:
    """The inverse of an action as it stands (None: never compensated)."""
    comp_id = inverse_id(keyring, action_id)
    found = await store.peek(comp_id)
    if isinstance(found, RunRecord):
        return open_action(keyring, comp_id, found, replayed=False)
    if isinstance(found, CardRecord):
        return common_pb2.Action(state=common_pb2.ACTION_STATE_READY, tool_name=found.tool)
    return None


def overlay(original: common_pb2.Action, inverse: common_pb2.Action | None) -> common_pb2.Action:
    """The original action as seen through its compensation."""
    if inverse is None or original.state != common_pb2.ACTION_STATE_SUCCEEDED:
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
