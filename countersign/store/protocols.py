"""What each consumer may do to the store: one small protocol per role (envoyproxy/ratelimit's cache.go).

A stage names the protocol it needs, so a reader sees at its constructor which transitions it can apply.
``redis_store.RedisStore`` satisfies every one; the wiring root (sidecar/app.py) hands it in. Every method
raises ``StoreUnavailable`` when Redis does not answer (fail closed, I7); ``REPLICAS_NOT_ACKNOWLEDGED`` where
noted. Arguments in milliseconds end in ``_ms``.
"""

from __future__ import annotations

from typing import Protocol

from countersign.store.records import (
    NO_APPROVAL,
    Anchor,
    AuditEvidence,
    CardRecord,
    Chained,
    ClaimApproval,
    ContRecord,
    GrantRecord,
    RunRecord,
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


class Peek(Protocol):
    async def peek(self, action_id: str) -> CardRecord | RunRecord | None:
        """Where an action stands: its READY card, its run record (a lapsed lease turned UNKNOWN on the way),
        or None (never issued, or expired)."""


class CardStore(Peek, Protocol):
    """Invoke: a write's card."""

    async def issue(
        self, action_id: str, card: CardRecord, ttl_ms: int, chain: Chained | None = None
    ) -> Issued | CardRecord | RunRecord | Appended:
        """Create the card unless the action exists: Issued (with ``chain``'s event appended in the same step), else
        the same card or the action's record; Appended(False, seq, head), changing nothing, when the chain ended
        elsewhere than ``chain`` was chained to."""


class ClaimStore(Peek, Protocol):
    """Confirm and Compensate: claim a card, wait for another caller's claim to settle."""

    async def claim(
        self,
        action_id: str,
        binding: str,
        denied: str,
        claim_id: str,
        lease_ms: int,
        approval: ClaimApproval = NO_APPROVAL,
    ) -> Won | RunRecord | Refused:
        """ready -> running for one caller (Won); the record when claimed before; Refused (expired, forbidden,
        role, approval_required, approval_invalid) changing nothing. REPLICAS_NOT_ACKNOWLEDGED (the claim put
        back) under --redis-wait-replicas."""

    async def wait_settled(self, action_id: str, run: RunRecord, seconds: float) -> RunRecord:
        """Poll (bounded) until a running record settles; the last record seen."""


class GrantStore(Protocol):
    """Standing grants: one owner's, in one slot (docs/design.md §12)."""

    async def grants(self, owner: str) -> list[GrantRecord]:
        """Every grant the owner's hash holds, expired and revoked ones included."""

    async def grant_create(
        self, owner: str, grant_id: str, sealed: bytes, exp_ms: int, keep_ms: int, max_live: int
    ) -> GrantCreated | GrantRecord | GrantsFull:
        """Record a grant unless it exists (the grant recorded before), or GrantsFull."""

    async def grant_use(
        self, owner: str, grant_id: str, action_id: str, mac: str, uses: int, exp_ms: int, keep_ms: int
    ) -> GrantTaken | GrantNotTaken:
        """Take one use for an action: at most ``uses`` actions ever take one, one action at most one."""

    async def grant_revoke(self, owner: str, grant_id: str) -> GrantRevoked | None: ...


class GrantRunStore(Peek, Protocol):
    """Invoke under a grant: the covered action issued directly as running."""

    async def grant_run(
        self, action_id: str, card: CardRecord, claim_id: str, lease_ms: int, grant_id: str
    ) -> Won | RunRecord | CardRecord:
        """Won (the caller holds the claim), the action's record (replay, RUNNING), or its waiting card.
        REPLICAS_NOT_ACKNOWLEDGED (put back as a card) under --redis-wait-replicas."""


class ReleaseStore(Peek, Protocol):
    """The executor, when its request was never sent."""

    async def release(self, action_id: str, claim_id: str) -> Release:
        """running -> ready by the claim holder: ready, expired (the card's sealed expiry passed) or lost."""


class SettleStore(Protocol):
    """Record an outcome as the holder of a claim; keep the reconciler's index."""

    async def settle(
        self,
        action_id: str,
        claim_id: str,
        state: str,
        out: bytes,
        omac: str,
        reason: str,
        receipt_status: str,
        replay_ttl_ms: int,
        chain: Chained | None = None,
    ) -> Settle | Appended:
        """running|unknown -> settled|unknown|review: ok, lost (another holds the claim) or gone; with ``chain``,
        its events appended in the same step, or Appended(False, seq, head) changing nothing when the chain ends
        elsewhere. REPLICAS_NOT_ACKNOWLEDGED under --redis-wait-replicas."""

    async def open_add(self, action_id: str, due_ms: int) -> None:
        """Index an action that may need reconciling, by when to look at it."""

    async def open_remove(self, action_id: str) -> None: ...


class RejectStore(Peek, Protocol):
    async def reject(
        self, action_id: str, binding: str, out: bytes, omac: str, replay_ttl_ms: int, chain: Chained | None = None
    ) -> Rejected | RunRecord | Refused | Appended:
        """ready -> rejected (with ``chain``'s event appended in the same step); the record when claimed or settled
        before; Refused (expired, forbidden); Appended(False, seq, head), changing nothing, when the chain ended
        elsewhere than ``chain`` was chained to."""


class InboxStore(Peek, Protocol):
    """The approval inbox (docs/mcp-front-door.md): approvals posted out of band, taken once by a waiting call."""

    async def inbox_push(self, action_id: str, approval: str, ttl_ms: int) -> None: ...

    async def inbox_take(self, action_id: str) -> str | None: ...


class TurnStore(Protocol):
    """What one user turn did: its read facts and proposed actions, a bounded list under the turn's key."""

    async def remember(self, turn: str, entry: bytes, ttl_ms: int, keep: int = 64) -> None: ...

    async def recall(self, turn: str) -> list[bytes]: ...


class QuotaStore(Protocol):
    async def quota(self, tenant: str, stored: list[str], members: list[str], cap: int, ttl_ms: int) -> QuotaCount:
        """Count the stored members always and the new ones only within the cap."""

    async def quota_forget(self, tenant: str, members: list[str]) -> None: ...


class AuditStore(Protocol):
    async def audit_append(
        self,
        action_id: str,
        after: tuple[int, str],
        events: list[tuple[bytes, str]],
        anchor: Anchor,
        expiry: str,
        ttl_ms: int,
    ) -> Appended:
        """Append chained events if the chain still ends at ``after`` (seq, head); set the anchor with them."""


class ContinuationStore(Peek, TurnStore, Protocol):
    """The reply side: a continuation's four transitions, the action it follows, the turn's facts."""

    async def cont_open(
        self, action_id: str, binding: str, kid: str, snapshot: bytes, turn: str, mac: str, ttl_ms: int
    ) -> ContRecord | Refused: ...

    async def cont_claim(
        self, action_id: str, binding: str, lease_ms: int, claim_id: str
    ) -> ContWon | ContRecord | ContBusy | NotReady | Refused: ...

    async def cont_settle(
        self, action_id: str, binding: str, reply_text: bytes, rmac: str, verdict: bytes, claim_id: str
    ) -> ContSettled | LeaseLost | NotClaimed | Refused: ...

    async def cont_release(
        self, action_id: str, binding: str, claim_id: str
    ) -> ContReleased | LeaseLost | NotClaimed | Refused: ...


class ReconcileStore(Peek, Protocol):
    """The reconciler: claim the work of an UNKNOWN action, defer it, walk the index and the records."""

    async def reconcile_claim(
        self, action_id: str, claim_id: str, work_lease_ms: int
    ) -> ReconcileWork | RunRecord | Busy | None: ...

    async def reconcile_defer(self, action_id: str, claim_id: str, delay_ms: int) -> Defer: ...

    async def run_tool(self, action_id: str) -> str: ...

    async def open_add(self, action_id: str, due_ms: int) -> None: ...

    async def open_remove(self, action_id: str) -> None: ...

    async def open_due(self, now_ms: int, count: int) -> list[str]: ...

    async def scan_runs(self, cursor: int, count: int) -> tuple[int, list[str]]: ...

    async def run_states(self, action_ids: list[str]) -> list[RunSummary]: ...


class AuditReader(Protocol):
    """`audit verify` and `audit export`: read-only."""

    async def audited_ids(self) -> list[str]: ...

    async def audit_evidence(self, action_ids: list[str]) -> list[AuditEvidence]: ...

    async def audit_actions(self) -> list[str]: ...

    async def events(self, action_id: str) -> list[tuple[str, bytes]]: ...


class OperatorStore(AuditReader, AuditStore, Protocol):
    """`countersign actions`: list and show read; resolve writes (and its audit event)."""

    async def scan_runs(self, cursor: int, count: int) -> tuple[int, list[str]]: ...

    async def record(self, action_id: str) -> dict[str, bytes]: ...

    async def resolve(
        self, action_id: str, out: bytes, omac: str, reason: str, receipt_status: str, replay_ttl_ms: int
    ) -> Resolved: ...
