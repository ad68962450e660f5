"""Verifying the audit: every chain walked, every record cross-checked against its chain.

Tamper-evident audit: every transition of an action is an event in the action's own chain.

One chain per action (many sidecars write at once, so a single global chain would serialise them
all): each event carries its sequence number, the MAC of the event before it, and its own MAC under
the server key; the script of the transition it records (issue.lua, settle.lua) or ``audit.lua``
appends it and advances the action's anchor (seq, head, MAC'd under a key id, so keys rotate) in one
atomic step (``store/lua/lib/chain.lua``). An edited event fails its MAC, a deleted one
leaves a gap, a reordered one breaks the prev links, a truncated tail disagrees with the anchor, and
an anchor rewritten to fit a shorter chain fails its own MAC.

A chain can also be cut back to an older genuine anchor, or deleted whole. So ``verify`` cross-checks
every action record against its chain: each record is owed an event (docs/runbook.md, "Verifying
the audit trail"):

    a ready card (cs:{A}:card)                         an ``issued`` event
    a run record holding an outcome (cs:{A}:run)       a settled / rejected / resolved event whose
                                                       outcome_hmac is that very outcome
    a run record without one (running, lease lapsed)   a ``claimed`` event
    a chain that ends unresolved (RUNNING, UNKNOWN,    a run record or card (an unresolved action is never
      NEEDS_MANUAL_REVIEW)                             forgotten, docs/design.md §7)
    an entry in the unresolved index (cs:{open})       a run record or a chain

A transition that gives a claim back (the card READY again) must write a ``released`` event, or
a chain that ends in ``claimed`` with no record left would be reported.

Writing never fails the request path: a card's issued event and a Confirm's claimed and settled events
travel with the card and the outcome; the rest are written in the background, retried on a chain
conflict, and a failure is counted (countersign_audit_write_failures_total) and logged. So a record
may exist a moment before its event: verify looks again, once, after a grace period at every
action it found wrong, and reports only what is still wrong then. An unresolved action's chain never
expires (like its record); a settled one's expires with the audit TTL.
Events hold keyed hashes (``Keyring.digest``), never raw arguments.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from countersign.audit.chain import OUTCOME_EVENTS, UNRESOLVED, chain_state, encode, unknown_key
from countersign.keyring import Keyring, is_action_id
from countersign.store import AuditEvidence, states
from countersign.store.protocols import AuditReader
from countersign.v1 import common_pb2


@dataclass(frozen=True)
class Problem:
    action_id: str
    what: str
    entry_id: str = ""  # the event it concerns, when it concerns one
    seq: int = 0

    def __str__(self) -> str:
        if self.entry_id:
            return f"action {self.action_id}: event {self.entry_id} (seq {self.seq}): {self.what}"
        return f"action {self.action_id}: {self.what}"


def check(keyring: Keyring, evidence: AuditEvidence) -> Problem | None:
    """The first thing wrong with one action's audit trail: its chain, its anchor, or an event a record is owed."""
    events = _chain(keyring, evidence)
    if isinstance(events, Problem):
        return events
    return _records(keyring, evidence, events)


def _chain(keyring: Keyring, evidence: AuditEvidence) -> list[dict[str, Any]] | Problem:
    """The chain's events, checked link by link and against the MAC'd anchor; [] when there is no chain."""
    action_id, entries, anchor = evidence.action_id, evidence.events, evidence.anchor
    if not entries and not anchor:
        return []
    if not anchor:
        return Problem(
            action_id,
            f"the anchor is missing (cs:{{{action_id}}}:audit was deleted): the end of its "
            f"{len(entries)} event(s) cannot be checked",
        )
    try:
        anchored = (int(anchor.get("seq", "")), anchor.get("head", ""))
    except ValueError:
        return Problem(action_id, "the anchor is not an anchor (its seq is not a number)")
    kid = anchor.get("kid", "")
    if not kid or not anchor.get("mac"):
        return Problem(action_id, "the anchor carries no MAC: it was rewritten, or written before anchors were MAC'd")
    if kid not in keyring.keys:
        return Problem(action_id, f"the anchor: {unknown_key(kid)}")
    if not keyring.verify(
        kid, "audit-anchor", f"{action_id}:{anchored[0]}:{anchored[1]}".encode(), anchor.get("mac", "")
    ):
        return Problem(
            action_id, f"the anchor's MAC does not verify: it was rewritten (it says {anchored[0]} event(s))"
        )
    if not entries:
        return Problem(action_id, f"the anchor says {anchored[0]} event(s) but there are none: the events were deleted")
    events: list[dict[str, Any]] = []
    expected_seq, prev = 1, ""
    for entry_id, raw in entries:
        try:
            event = json.loads(raw)
            body = {k: v for k, v in event.items() if k != "mac"}
            seq = int(body.get("seq", -1))
        except (ValueError, AttributeError, TypeError):
            return Problem(action_id, "not a valid event", entry_id, -1)
        if body.get("a") != action_id:
            return Problem(action_id, "belongs to another action", entry_id, seq)
        event_kid = str(body.get("kid", ""))
        if event_kid not in keyring.keys:
            return Problem(action_id, unknown_key(event_kid), entry_id, seq)
        if not keyring.verify(event_kid, "audit", encode(body), str(event.get("mac", ""))):
            return Problem(action_id, "edited: its MAC does not verify", entry_id, seq)
        if seq != expected_seq:
            what = "missing event(s) before it" if seq > expected_seq else "out of order"
            return Problem(action_id, f"{what}: expected seq {expected_seq}", entry_id, seq)
        if body.get("prev") != prev:
            return Problem(action_id, "reordered: it does not follow the event before it", entry_id, seq)
        expected_seq, prev = seq + 1, str(event["mac"])
        events.append(event)
    if anchored != (expected_seq - 1, prev):
        return Problem(
            action_id,
            f"missing event(s) at the end: the anchor says {anchored[0]} events",
            entries[-1][0],
            expected_seq - 1,
        )
    return events


def _records(keyring: Keyring, evidence: AuditEvidence, events: list[dict[str, Any]]) -> Problem | None:
    """Each record is owed an event (the table in the module docstring)."""
    action_id, run = evidence.action_id, evidence.run
    kinds = {str(e.get("t", "")) for e in events}
    if evidence.card and "issued" not in kinds:
        return Problem(action_id, "the card (READY) has " + ("no issued event" if events else "no audit chain"))
    if run:
        label = _run_state(keyring, action_id, run)
        out = run.get("out", b"")
        if not events:
            return Problem(action_id, f"the run record says {label} but there is no audit chain")
        if out:
            if not any(
                e.get("t") in OUTCOME_EVENTS
                and keyring.digest_matches(str((e.get("f") or {}).get("outcome_hmac", "")), "outcome", out)
                for e in events
            ):
                return Problem(
                    action_id,
                    f"the run record says {label} but no event records that outcome "
                    "(no settled, rejected or resolved event with its outcome_hmac)",
                )
        elif "claimed" not in kinds:
            return Problem(action_id, f"the run record says {label} but no claimed event records the claim")
        return None
    if evidence.card:
        return None
    state = chain_state(events)
    if state in UNRESOLVED:
        return Problem(
            action_id, f"the chain says {state} but the run record is gone: an unresolved action is never forgotten"
        )
    if evidence.indexed and not events:
        return Problem(action_id, "listed as unresolved (cs:{open}) but neither its run record nor its chain exists")
    return None


def _run_state(keyring: Keyring, action_id: str, run: dict[str, bytes]) -> str:
    """SUCCEEDED, FAILED, ... from the MAC-checked outcome; else the record's own word for it."""
    out, kid = run.get("out", b""), run.get("kid", b"").decode()
    if out and keyring.verify(kid, "outcome:" + action_id, out, run.get("omac", b"").decode()):
        try:
            return states.name(common_pb2.Action.FromString(out).state)
        except ValueError:
            pass
    return run.get("st", b"").decode().upper() or "?"


@dataclass(frozen=True)
class Report:
    actions: int
    events: int
    problems: list[Problem]
    looked_again: int  # actions found wrong at first and looked at again after the grace period


async def verify(
    store: AuditReader,
    keyring: Keyring,
    grace: float,
    batch: int = 500,
    waiting: Callable[[int], None] = lambda n: None,
) -> Report:
    """Cross-check every action Redis knows of; what is wrong is looked at again once, ``grace`` later
    (``waiting`` is told how many actions before the wait)."""
    ids = [a for a in await store.audited_ids() if is_action_id(a)]
    problems: dict[str, Problem] = {}
    events = 0
    for i in range(0, len(ids), batch):
        for evidence in await store.audit_evidence(ids[i : i + batch]):
            events += len(evidence.events)
            problem = check(keyring, evidence)
            if problem is not None:
                problems[evidence.action_id] = problem
    looked_again = len(problems)
    if problems:
        waiting(looked_again)
        await asyncio.sleep(grace)  # an event may still be on its way (audit writes are asynchronous)
        again = list(problems)
        for i in range(0, len(again), batch):
            for evidence in await store.audit_evidence(again[i : i + batch]):
                problem = check(keyring, evidence)
                if problem is None:
                    del problems[evidence.action_id]
                else:
                    problems[evidence.action_id] = problem
    return Report(len(ids), events, list(problems.values()), looked_again)


async def check_one(
    store: AuditReader, keyring: Keyring, action_id: str, grace: float
) -> tuple[AuditEvidence, Problem | None]:
    """One action's evidence and what is wrong with it (looked at again after ``grace`` if anything is)."""
    evidence = (await store.audit_evidence([action_id]))[0]
    problem = check(keyring, evidence)
    if problem is not None:
        await asyncio.sleep(grace)
        evidence = (await store.audit_evidence([action_id]))[0]
        problem = check(keyring, evidence)
    return evidence, problem


async def export(store: AuditReader) -> AsyncIterator[dict[str, Any]]:
    """Every action's events, actions ordered by their first event's time."""
    chains = []
    for action_id in await store.audit_actions():
        entries = await store.events(action_id)
        if entries:
            chains.append([{"id": entry_id, **json.loads(raw)} for entry_id, raw in entries])
    for chain in sorted(chains, key=lambda c: (c[0].get("at", 0), c[0]["a"])):
        for event in chain:
            yield event
