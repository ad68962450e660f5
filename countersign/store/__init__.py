"""The store: every record of an action, a continuation, a turn and a tenant, behind a typed boundary.

``records`` and ``results`` are plain typed values (no Redis); ``protocols`` says what each consumer may do;
``redis_store.RedisStore`` is the one implementation (imported by the wiring root only), one Lua script per
transition (``lua/``), replies named by ``replies``; ``connect`` turns a URL into a client; ``keys`` names the
keys; ``states`` is the state machine. Only this package imports redis (redis_store, redis_reads, connect);
``driver_import``, imported first, keeps redis-py from loading the OpenTelemetry metrics SDK it does not need.
"""

from countersign.store import driver_import  # noqa: F401  # first: before any module here imports redis-py
from countersign.store.records import (
    NO_APPROVAL,
    Anchor,
    AuditEvidence,
    CardRecord,
    Chained,
    ClaimApproval,
    ContRecord,
    ContState,
    GrantRecord,
    RunRecord,
    RunState,
    RunSummary,
)
from countersign.store.results import (
    Appended,
    Busy,
    ContBusy,
    ContReleased,
    ContSettled,
    ContWon,
    Defer,
    GrantCreated,
    GrantNotTaken,
    GrantRevoked,
    GrantsFull,
    GrantTaken,
    Issued,
    LeaseLost,
    NotClaimed,
    NotReady,
    QuotaCount,
    ReconcileWork,
    Refused,
    Rejected,
    Release,
    Resolved,
    Settle,
    Won,
)

__all__ = [
    "NO_APPROVAL",
    "Anchor",
    "Appended",
    "AuditEvidence",
    "Busy",
    "CardRecord",
    "Chained",
    "ClaimApproval",
    "ContBusy",
    "ContRecord",
    "ContReleased",
    "ContSettled",
    "ContState",
    "ContWon",
    "Defer",
    "GrantCreated",
    "GrantNotTaken",
    "GrantRecord",
    "GrantRevoked",
    "GrantTaken",
    "GrantsFull",
    "Issued",
    "LeaseLost",
    "NotClaimed",
    "NotReady",
    "QuotaCount",
    "ReconcileWork",
    "Refused",
    "Rejected",
    "Release",
    "Resolved",
    "RunRecord",
    "RunState",
    "RunSummary",
    "Settle",
    "Won",
]
