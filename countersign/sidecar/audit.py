"""Tamper-evident audit: every transition of an action is an event in the action's own chain.

One chain per action (many sidecars write at once, so a single global chain would serialise them
all): each event carries its sequence number, the MAC of the event before it, and its own MAC under
the server key; ``lua/audit.lua`` appends it and advances the action's anchor (seq, head, MAC'd
under a key id, so keys rotate) in one atomic step. An edited event fails its MAC, a deleted one
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
      NEEDS_MANUAL_REVIEW)                             forgotten, DESIGN §7)
    an entry in the unresolved index (cs:{open})       a run record or a chain

A transition that gives a claim back (the card READY again) must write a ``released`` event, or
a chain that ends in ``claimed`` with no record left would be reported.

Writing never blocks or fails the request path: events are written in the background, retried on a
chain conflict, and a failure is counted (countersign_audit_write_failures_total) and logged. So a
record may exist a moment before its event: verify looks again, once, after a grace period at every
action it found wrong, and reports only what is still wrong then. An unresolved action's chain never
expires (like its record); a settled one's expires with the audit TTL.
Events hold keyed hashes (``Keyring.digest``), never raw arguments.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from countersign.errors import CountersignError
from countersign.keyring import Keyring, is_action_id
from countersign.observability.metrics import Metrics
from countersign.sidecar import states
from countersign.sidecar.store import Anchor, AuditEvidence, Store
from countersign.v1 import common_pb2

log = logging.getLogger("countersign.audit")

UNRESOLVED = frozenset({"RUNNING", "UNKNOWN", "NEEDS_MANUAL_REVIEW"})
OUTCOME_EVENTS = ("settled", "rejected", "resolved")     # events that record the outcome a run record holds


def encode(event: dict[str, Any]) -> bytes:
    """An event's bytes: sorted keys, no spaces. Events hold only strings, integers and booleans, for which
    this is as deterministic as RFC 8785 and several times cheaper (it runs twice per event)."""
    return json.dumps(event, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def anchor_mac(keyring: Keyring, kid: str, action_id: str, seq: int, head: str) -> str:
    return keyring.mac(kid, "audit-anchor", f"{action_id}:{seq}:{head}".encode())


def state_after(kind: str, fields: dict[str, Any]) -> str | None:
    """The action state an event records, or None for an event that changes none (continuations, guard)."""
    if kind in ("issued", "released"):      # released: a claim given back, its card READY again
        return "READY"
    if kind == "claimed":
        return "RUNNING"
    if kind == "settled":
        return str(fields.get("state", "")) or None
    if kind == "needs_manual_review":
        return "NEEDS_MANUAL_REVIEW"
    if kind == "rejected":
        return "REJECTED"
    if kind == "resolved":
        return str(fields.get("outcome", "")).upper() or None
    return None


def expiry(batch: list[tuple[str, int, dict[str, Any]]]) -> str:
    """keep (the batch leaves the action unresolved), expire, or same (no event in it changes a state)."""
    for kind, _, fields in reversed(batch):
        state = state_after(kind, fields)
        if state is not None:
            return "keep" if state in UNRESOLVED else "expire"
    return "same"


class Audit:
    """Writes events in the background: one writer per action at a time, events batched per call."""

    def __init__(self, store: Store, keyring: Keyring, metrics: Metrics, ttl_ms: int) -> None:
        self.store, self.keyring, self.metrics, self.ttl_ms = store, keyring, metrics, ttl_ms
        self.pending: set[asyncio.Task[Any]] = set()
        self._queues: dict[str, list[tuple[str, int, dict[str, Any]]]] = {}
        self._heads: OrderedDict[str, tuple[int, str]] = OrderedDict()   # the last chain state we wrote
        self.batch_delay = 0.02

    def event(self, action_id: str, kind: str, **fields: Any) -> None:
        """Record an event in the background (never raises, never waits)."""
        queue = self._queues.get(action_id)
        entry = (kind, int(time.time() * 1000), fields)
        if queue is not None:            # a writer for this action is running: it takes this one too
            queue.append(entry)
            return
        self._queues[action_id] = [entry]
        task = asyncio.ensure_future(self._writer(action_id))
        self.pending.add(task)
        task.add_done_callback(self.pending.discard)

    async def _writer(self, action_id: str) -> None:
        try:
            # A short wait lets the events of one step travel together (claimed + settled of a quick
            # Confirm become one script call).
            await asyncio.sleep(self.batch_delay)
            while self._queues[action_id]:
                batch, self._queues[action_id] = self._queues[action_id], []
                await self._append(action_id, batch)
        finally:
            self._queues.pop(action_id, None)

    async def _append(self, action_id: str, batch: list[tuple[str, int, dict[str, Any]]]) -> None:
        try:
            # Optimistic: chain to the head we last wrote (or to nothing, for a new action); on a conflict the
            # script answers the real head and we chain again.
            kid, keep = self.keyring.active, expiry(batch)
            state = self._heads.pop(action_id, None) or (0, "")
            for _ in range(8):
                seq, head = state
                events, prev = [], head
                for n, (kind, at, fields) in enumerate(batch, start=1):
                    body = {"a": action_id, "seq": seq + n, "prev": prev, "t": kind, "at": at,
                            "kid": kid, "f": fields}
                    prev = self.keyring.mac(kid, "audit", encode(body))
                    events.append((encode({**body, "mac": prev}), prev))
                anchor = Anchor(kid, anchor_mac(self.keyring, kid, action_id, seq + len(batch), prev))
                ok, seq_now, head_now = await self.store.audit_append(action_id, state, events, anchor, keep,
                                                                      self.ttl_ms)
                state = (seq_now, head_now)
                if ok:
                    self._heads[action_id] = state
                    while len(self._heads) > 10_000:
                        self._heads.popitem(last=False)
                    return
            raise RuntimeError("the chain kept moving")
        except (CountersignError, RuntimeError, OSError) as exc:
            self.metrics.audit_write_failures.inc(len(batch))
            log.warning(json.dumps({"event": "audit_write_failed", "action_id": action_id,
                                    "kinds": [k for k, _, _ in batch], "error": str(exc)[:200]}))

    async def drain(self, timeout: float) -> None:
        if self.pending:
            await asyncio.wait(list(self.pending), timeout=timeout)


def unknown_key(kid: str) -> str:
    """Why a record cannot be checked: its key id is not in this keys file (not the same as edited)."""
    return (f"key {kid!r} is not in the keys file: written by a sidecar with other keys"
            + (" (a generated key: that sidecar ran without COUNTERSIGN_KEYS_FILE)" if kid == "gen" else ""))


@dataclass(frozen=True)
class Problem:
    action_id: str
    what: str
    entry_id: str = ""          # the event it concerns, when it concerns one
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
        return Problem(action_id, f"the anchor is missing (cs:{{{action_id}}}:audit was deleted): the end of its "
                       f"{len(entries)} event(s) cannot be checked")
    try:
        anchored = (int(anchor.get("seq", "")), anchor.get("head", ""))
    except ValueError:
        return Problem(action_id, "the anchor is not an anchor (its seq is not a number)")
    kid = anchor.get("kid", "")
    if not kid or not anchor.get("mac"):
        return Problem(action_id, "the anchor carries no MAC: it was rewritten, or written before anchors were "
                       "MAC'd")
    if kid not in keyring.keys:
        return Problem(action_id, f"the anchor: {unknown_key(kid)}")
    if not keyring.verify(kid, "audit-anchor", f"{action_id}:{anchored[0]}:{anchored[1]}".encode(),
                          anchor.get("mac", "")):
        return Problem(action_id, f"the anchor's MAC does not verify: it was rewritten (it says {anchored[0]} "
                       "event(s))")
    if not entries:
        return Problem(action_id, f"the anchor says {anchored[0]} event(s) but there are none: the events "
                       "were deleted")
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
            return Problem(action_id, unknown_key(event_kid),
                           entry_id, seq)
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
        return Problem(action_id, f"missing event(s) at the end: the anchor says {anchored[0]} events",
                       entries[-1][0], expected_seq - 1)
    return events


def chain_state(events: list[dict[str, Any]]) -> str | None:
    """Where the chain says the action stands. A settled outcome is final: a late event of the losing settle
    (fenced by a reconciler) does not reopen it."""
    state: str | None = None
    for event in events:
        found = state_after(str(event.get("t", "")), event.get("f") or {})
        if found is not None and (state is None or state in UNRESOLVED or state == "READY"):
            state = found
    return state


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
            if not any(e.get("t") in OUTCOME_EVENTS and
                       keyring.digest_matches(str((e.get("f") or {}).get("outcome_hmac", "")), "outcome", out)
                       for e in events):
                return Problem(action_id, f"the run record says {label} but no event records that outcome "
                               "(no settled, rejected or resolved event with its outcome_hmac)")
        elif "claimed" not in kinds:
            return Problem(action_id, f"the run record says {label} but no claimed event records the claim")
        return None
    if evidence.card:
        return None
    state = chain_state(events)
    if state in UNRESOLVED:
        return Problem(action_id, f"the chain says {state} but the run record is gone: an unresolved action "
                       "is never forgotten")
    if evidence.indexed and not events:
        return Problem(action_id, "listed as unresolved (cs:{open}) but neither its run record nor its chain "
                       "exists")
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
    looked_again: int           # actions found wrong at first and looked at again after the grace period


async def verify(store: Store, keyring: Keyring, grace: float, batch: int = 500,
                 waiting: Callable[[int], None] = lambda n: None) -> Report:
    """Cross-check every action Redis knows of; what is wrong is looked at again once, ``grace`` later
    (``waiting`` is told how many actions before the wait)."""
    ids = [a for a in await store.audited_ids() if is_action_id(a)]
    problems: dict[str, Problem] = {}
    events = 0
    for i in range(0, len(ids), batch):
        for evidence in await store.audit_evidence(ids[i:i + batch]):
            events += len(evidence.events)
            problem = check(keyring, evidence)
            if problem is not None:
                problems[evidence.action_id] = problem
    looked_again = len(problems)
    if problems:
        waiting(looked_again)
        await asyncio.sleep(grace)        # an event may still be on its way (audit writes are asynchronous)
        again = list(problems)
        for i in range(0, len(again), batch):
            for evidence in await store.audit_evidence(again[i:i + batch]):
                problem = check(keyring, evidence)
                if problem is None:
                    del problems[evidence.action_id]
                else:
                    problems[evidence.action_id] = problem
    return Report(len(ids), events, list(problems.values()), looked_again)


async def check_one(store: Store, keyring: Keyring, action_id: str, grace: float) -> tuple[AuditEvidence,
                                                                                           Problem | None]:
    """One action's evidence and what is wrong with it (looked at again after ``grace`` if anything is)."""
    evidence = (await store.audit_evidence([action_id]))[0]
    problem = check(keyring, evidence)
    if problem is not None:
        await asyncio.sleep(grace)
        evidence = (await store.audit_evidence([action_id]))[0]
        problem = check(keyring, evidence)
    return evidence, problem


async def export(store: Store) -> AsyncIterator[dict[str, Any]]:
    """Every action's events, actions ordered by their first event's time."""
    chains = []
    for action_id in await store.audit_actions():
        entries = await store.events(action_id)
        if entries:
            chains.append([{"id": entry_id, **json.loads(raw)} for entry_id, raw in entries])
    for chain in sorted(chains, key=lambda c: (c[0].get("at", 0), c[0]["a"])):
        for event in chain:
            yield event
