"""What each transition answers, typed: one value per reply shape its script's header lists (store/lua/*.lua).

A transition that found a record answers the record itself (``CardRecord``, ``RunRecord``, ``ContRecord``,
records.py); the other outcomes are the small values below or a ``Literal`` word. Nothing here is a bare string
the caller must compare against a spelling it guessed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, NamedTuple, TypeAlias

from countersign.store.records import CardRecord, ContRecord, GrantRecord, RunRecord

RefusedWhy: TypeAlias = Literal["expired", "forbidden", "role", "none", "approval_required", "approval_invalid"]


@dataclass(frozen=True)
class Refused:
    """The transition did not happen and nothing was changed: no such card or action (``expired`` for a card,
    ``none`` for a continuation), another owner's (``forbidden``), a tool the caller's role may not run, or a
    claim without the approval the card requires (``approval_required``) or with one that failed a check
    (``approval_invalid``)."""

    why: RefusedWhy
    tool: str = ""  # role: the tool
    check: str = ""  # approval_required: "card" or "registry"; approval_invalid: the failed check


@dataclass(frozen=True)
class Issued:
    """issue: the card was created now (and its issued event appended, when one was sent)."""


class Won(NamedTuple):
    """claim: ready -> running for this caller, who now holds the claim and must settle it (or release it)."""

    card: CardRecord
    chain_at: tuple[int, str] = (0, "")  # claim.lua: where the action's audit chain ended at the claim (seq, head)


@dataclass(frozen=True)
class Rejected:
    """reject: the card is gone and the record says REJECTED."""


# release: the card is back (ready), its sealed expiry passed meanwhile (expired), or the caller holds no claim it
# could give back (lost)
Release: TypeAlias = Literal["ready", "expired", "lost"]
# settle: recorded (ok), the caller does not hold the claim (lost), or no record at all (gone)
Settle: TypeAlias = Literal["ok", "lost", "gone"]
# reconcile_defer: asked again later (ok), or the claim was taken from this reconciler (lost)
Defer: TypeAlias = Literal["ok", "lost"]


@dataclass(frozen=True)
class ReconcileWork:
    """reconcile_claim: an UNKNOWN action whose reconciliation this caller now holds."""

    card: CardRecord
    attempts: int
    unknown_since_ms: int
    now_ms: int


@dataclass(frozen=True)
class Busy:
    """reconcile_claim: another reconciler holds it, or it is not due yet; ``state`` is the record's."""

    state: str


@dataclass(frozen=True)
class ContWon:
    """cont_claim: ready -> running for this generator; with the action's record, for its receipt."""

    cont: ContRecord
    run: RunRecord


@dataclass(frozen=True)
class ContBusy:
    """cont_claim: another generator holds the continuation's lease."""


@dataclass(frozen=True)
class NotReady:
    """cont_claim: the action has no SUCCEEDED receipt (yet): its record's state and reason."""

    run_state: str
    reason: str


@dataclass(frozen=True)
class ContSettled:
    """cont_settle: the reply stored now (``replayed`` False), or stored before by this same holder (True)."""

    reply: bytes
    rmac: str
    verdict: bytes
    replayed: bool


@dataclass(frozen=True)
class LeaseLost:
    """cont_settle / cont_release: another claim holds the continuation (or settled it); nothing was stored."""

    state: str


@dataclass(frozen=True)
class NotClaimed:
    """cont_settle / cont_release: nobody holds the continuation; ``state`` is the one it is in."""

    state: str


@dataclass(frozen=True)
class ContReleased:
    """cont_release: running -> ready by the holder."""


@dataclass(frozen=True)
class QuotaCount:
    """quota: whether the new members were counted, how many the tenant holds, and (when not counted) when the
    oldest stops counting, in ms."""

    counted: bool
    held: int
    first_gone_ms: int = 0


@dataclass(frozen=True)
class Appended:
    """audit: whether the events were appended, and where the chain ends now (seq, head)."""

    ok: bool
    seq: int
    head: str


@dataclass(frozen=True)
class Resolved:
    """resolve: settled by an operator (``ok``), or not resolvable in the ``state`` the record is in."""

    ok: bool
    state: str = ""


@dataclass(frozen=True)
class GrantCreated:
    """grant_create: the grant was recorded now, with no use taken."""


@dataclass(frozen=True)
class GrantsFull:
    """grant_create: the owner holds as many live grants as allowed; nothing was recorded."""

    live: int


@dataclass(frozen=True)
class GrantTaken:
    """grant_use: this action holds a use of the grant: taken now, or (``again``) by this same action before."""

    left: int
    again: bool = False


# grant_use: nothing was taken: every use is taken (spent), the owner revoked it, its expiry passed, there is no
# such grant (none), or the stored grant is not the one the caller verified (tampered)
GrantNotTaken: TypeAlias = Literal["spent", "revoked", "expired", "none", "tampered"]


@dataclass(frozen=True)
class GrantRevoked:
    """grant_revoke: the grant as stored, revoked now (``before`` False) or already (True)."""

    grant: GrantRecord
    before: bool = False
