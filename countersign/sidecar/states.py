r"""Action states: the protobuf enum mirrored once, with the transitions the Lua scripts enforce.

    (none) --issue--> READY --claim--> RUNNING --settle--> SUCCEEDED | FAILED
                        |                 |  \--settle(unknown) / lease lapsed--> UNKNOWN
                        |                 |                                          |
                        +--reject--> REJECTED                     settle by the holder or the
                        +--TTL-----> EXPIRED (the card is gone)    reconciler --> SUCCEEDED | FAILED
                                                                   reconciler --> NEEDS_MANUAL_REVIEW
                                                                   operator (resolve) --> SUCCEEDED | FAILED
    COMPENSATING / COMPENSATED / COMPENSATION_FAILED are not stored: they are derived from the
    inverse action's own record (compensate.py).

A RUNNING record never goes back to READY: a claimed card is consumed (``lua/claim.lua``).
Expiry is derived from the card's TTL, not stored.
"""

from __future__ import annotations

from countersign.v1 import common_pb2

# record state in Redis (cs:{A}:run "st") -> what it may become, by which script
TRANSITIONS: dict[str, dict[str, str]] = {
    "ready": {"running": "claim.lua", "rejected": "reject.lua", "expired": "(card TTL)"},
    "running": {"settled": "settle.lua", "unknown": "settle.lua / claim.lua / peek.lua / reconcile_claim.lua "
                "(lease lapsed)"},
    "unknown": {"settled": "settle.lua (claim holder or reconciler)", "review": "settle.lua (reconciler)",
                "unknown": "reconcile_defer.lua (ask again later)"},
    "review": {"settled": "resolve.lua (operator)"},
    "settled": {},
}


def name(state: int) -> str:
    """SUCCEEDED for ACTION_STATE_SUCCEEDED: the word used in logs, metrics and docs."""
    return common_pb2.ActionState.Name(state).removeprefix("ACTION_STATE_")  # type: ignore[arg-type]
