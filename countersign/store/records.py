"""What the store keeps, as plain typed values: no Redis here (docs/design.md §7).

A record's state is one of a few words (``Literal``); a word the store cannot read (a record edited by hand) is
``"unreadable"``, which every reader treats as tampered. Byte fields are kept as stored: a card body and a sealed
outcome are checked against their MACs by the path, never trusted here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, NamedTuple, TypeAlias, get_args

RunState: TypeAlias = Literal["running", "unknown", "review", "settled", "unreadable"]
ContState: TypeAlias = Literal["pending", "ready", "running", "settled", "unreadable"]
RUN_STATES: frozenset[str] = frozenset(get_args(RunState)) - {"unreadable"}
CONT_STATES: frozenset[str] = frozenset(get_args(ContState)) - {"unreadable"}


def run_state(word: str) -> RunState:
    """The run record's ``st`` as a state; anything else is unreadable (tampered)."""
    return word if word in RUN_STATES else "unreadable"  # type: ignore[return-value]


def cont_state(word: str) -> ContState:
    return word if word in CONT_STATES else "unreadable"  # type: ignore[return-value]


class CardRecord(NamedTuple):
    """A ready confirmation card as stored: body is canonical JSON, MAC'd under key ``kid``."""

    kid: str
    tool: str
    body: bytes
    mac: str
    binding: str = ""
    # the card's own hash fields claim.lua compares (copies of the MAC'd body's; "" where a reply has none)
    approval: str = ""  # none | signed
    digest: str = ""  # the approval digest
    risk: str = ""


class ClaimApproval(NamedTuple):
    """What claim.lua compares of a Confirm's approval (verified before Redis) with the card it would claim."""

    digest: str = ""  # the approval's dig; "" when the Confirm carries none
    risks: str = ",,"  # ",risk,risk," the approval's acr satisfies (step-up rules)
    failed: str = ""  # the check the approval failed before Redis ("" when none failed)
    signed_tools: str = ",,"  # ",tool,tool," the registry in force requires a signed approval for


NO_APPROVAL = ClaimApproval()


@dataclass(frozen=True)
class RunRecord:
    """The action after its claim: running, unknown, in review or settled (with the outcome, MAC'd)."""

    state: RunState
    kid: str
    out: bytes  # serialized countersign.v1.Action; empty while running
    omac: str
    reason: str = ""
    binding: str = ""
    tool: str = ""
    card: bytes = b""  # the sealed card it was claimed from: binding, key id and tool are checked against it
    cmac: str = ""


@dataclass(frozen=True)
class ContRecord:
    """A continuation as stored; ``mac`` covers binding, snapshot and turn under ``kid``."""

    state: ContState
    kid: str = ""
    snapshot: bytes = b""
    turn: str = ""  # the turn's key: where its read facts and proposed actions are kept
    mac: str = ""
    reply: bytes = b""  # when settled
    rmac: str = ""
    verdict: bytes = b""


@dataclass(frozen=True)
class GrantRecord:
    """A standing grant as stored in its owner's hash: ``sealed`` is JSON {kid, mac, body}, checked by the path on
    every read, never trusted here; ``taken`` the uses taken so far."""

    grant_id: str
    sealed: bytes
    taken: int = 0
    revoked: bool = False


class Anchor(NamedTuple):
    """Where an action's chain ends: MAC'd under ``kid`` over (action, seq, head), so it cannot be rewritten."""

    kid: str
    mac: str


class Chained(NamedTuple):
    """Events for a transition's own script to append to the action's chain in its step (lua/lib/chain.lua):
    chained to ``after`` (seq, head), each (canonical JSON, its MAC), the anchor after them, and the chain's
    expiry (keep | expire | same) and TTL."""

    after: tuple[int, str]
    events: list[tuple[bytes, str]]
    anchor: Anchor
    expiry: str
    ttl_ms: int

    def args(self) -> list[object]:
        """The chain's arguments, in the order lib/chain.lua reads them."""
        out: list[object] = [self.after[0], self.after[1], self.anchor.kid, self.anchor.mac, self.expiry, self.ttl_ms]
        for event, mac in self.events:
            out += [event, mac]
        return out

    @property
    def head(self) -> tuple[int, str]:
        """Where the chain ends once these events are appended."""
        return self.after[0] + len(self.events), self.events[-1][1]


@dataclass(frozen=True)
class AuditEvidence:
    """Everything Redis holds about one action that the audit cross-check reads (raw fields)."""

    action_id: str
    events: list[tuple[str, bytes]]  # (stream entry id, event JSON), oldest first
    anchor: dict[str, str]  # seq, head, kid, mac; empty when absent
    card: dict[str, bytes]  # the ready card; empty when absent
    run: dict[str, bytes]  # the run record; empty when absent
    indexed: bool  # listed in the unresolved index (cs:{open})


@dataclass(frozen=True)
class RunSummary:
    """What the reconciler's sweep reads of one run record (no transition applied)."""

    state: str  # the record's own word ("" when it is gone)
    lease_ms: int
    due_ms: int  # when a reconciler may look at it next
    tool: str
