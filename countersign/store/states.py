r"""Action states: the protobuf enum mirrored once, with the transitions the Lua scripts enforce.

    (none) --issue--> READY --claim--> RUNNING --settle--> SUCCEEDED | FAILED
                        |  <--release--   |  \--settle(unknown) / lease lapsed--> UNKNOWN
                        |                 |                                          |
                        +--reject--> REJECTED                     settle by the holder or the
                        +--TTL-----> EXPIRED (the card is gone)    reconciler --> SUCCEEDED | FAILED
                                                                   reconciler --> NEEDS_MANUAL_REVIEW
                                                                   operator (resolve) --> SUCCEEDED | FAILED
    (none) --grant_run--> RUNNING   a write a standing grant covers (grant_use.lua took a use first): no card
    COMPENSATING / COMPENSATED / COMPENSATION_FAILED are not stored: they are derived from the
    inverse action's own record (recovery/compensate.py, path/inverse.py).

A claimed card goes back to READY only through ``store/lua/release.lua``, by the claim holder that never
sent the request (its claim's WAIT was not acknowledged, or the downstream refused the connection);
once a request may have left, never (model/: never_ready_after_send). Expiry is the card's TTL and
its sealed ``expires_at_ms``, whichever comes first.
"""

from __future__ import annotations

from countersign.v1 import common_pb2

# record state in Redis (cs:{A}:run "st") -> what it may become, by which script (tests/store drives each one)
TRANSITIONS: dict[str, dict[str, str]] = {
    "none": {"running": "grant_run.lua (a write a standing grant covers, after grant_use.lua took a use: no card)"},
    "ready": {"running": "claim.lua", "rejected": "reject.lua", "expired": "(card TTL)"},
    "running": {
        "settled": "settle.lua",
        "unknown": "settle.lua / claim.lua / peek.lua / reconcile_claim.lua (lease lapsed)",
        "ready": "release.lua (the holder sent nothing: WAIT not met, NOT_SENT)",
    },
    "unknown": {
        "settled": "settle.lua (claim holder or reconciler)",
        "review": "settle.lua (reconciler)",
        "unknown": "reconcile_defer.lua (ask again later)",
        "ready": "release.lua (the holder, whose lease lapsed, sent nothing)",
    },
    "review": {"settled": "resolve.lua (operator)"},
    "settled": {},
}


def _name(state: int) -> str:
    return common_pb2.ActionState.Name(state).removeprefix("ACTION_STATE_")  # type: ignore[arg-type]


# the enum's words, looked up once (its Name() walks the descriptor: ~4k instructions of every settle)
_NAMES = {value: _name(value) for value in common_pb2.ActionState.values()}


def name(state: int) -> str:
    """SUCCEEDED for ACTION_STATE_SUCCEEDED: the word used in logs, metrics and docs."""
    found = _NAMES.get(state)
    return found if found is not None else _name(state)  # not a state: Name() raises, in its words
