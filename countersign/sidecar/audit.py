"""Tamper-evident audit: every transition of an action is an event in the action's own chain.

One chain per action (many sidecars write at once, so a single global chain would serialise them
all): each event carries its sequence number, the MAC of the event before it, and its own MAC under
the server key; ``lua/audit.lua`` appends it and advances the action's anchor (seq, head) in one
atomic step. An edited event fails its MAC, a deleted one leaves a gap, a reordered one breaks the
prev links, a truncated tail disagrees with the anchor. Events hold hashes, never raw arguments.

Writing never blocks or fails the request path: events are written in the background, retried on a
chain conflict, and a failure is counted (countersign_audit_write_failures_total) and logged.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import OrderedDict
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from countersign.sidecar.actions import Keyring
from countersign.sidecar.errors import CountersignError
from countersign.sidecar.observability.metrics import Metrics
from countersign.sidecar.store import Store

log = logging.getLogger("countersign.audit")


def encode(event: dict[str, Any]) -> bytes:
    """An event's bytes: sorted keys, no spaces. Events hold only strings, integers and booleans, for which
    this is as deterministic as RFC 8785 and several times cheaper (it runs twice per event)."""
    return json.dumps(event, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


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
            state = self._heads.pop(action_id, None) or (0, "")
            for _ in range(8):
                seq, head = state
                events, prev = [], head
                for n, (kind, at, fields) in enumerate(batch, start=1):
                    body = {"a": action_id, "seq": seq + n, "prev": prev, "t": kind, "at": at,
                            "kid": self.keyring.active, "f": fields}
                    prev = self.keyring.mac(self.keyring.active, "audit", encode(body))
                    events.append((encode({**body, "mac": prev}), prev))
                ok, seq_now, head_now = await self.store.audit_append(action_id, head, events, self.ttl_ms)
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


@dataclass(frozen=True)
class Problem:
    action_id: str
    entry_id: str
    seq: int
    what: str

    def __str__(self) -> str:
        return f"action {self.action_id}: event {self.entry_id} (seq {self.seq}): {self.what}"


def check_chain(keyring: Keyring, action_id: str, entries: list[tuple[str, bytes]],
                anchor: tuple[int, str] | None) -> Problem | None:
    """The first broken, missing or reordered event of one action's chain, or None."""
    expected_seq, prev = 1, ""
    for entry_id, raw in entries:
        try:
            event = json.loads(raw)
            body = {k: v for k, v in event.items() if k != "mac"}
            seq = int(body.get("seq", -1))
        except (ValueError, AttributeError):
            return Problem(action_id, entry_id, -1, "not a valid event")
        if body.get("a") != action_id:
            return Problem(action_id, entry_id, seq, "belongs to another action")
        if not keyring.verify(str(body.get("kid", "")), "audit", encode(body), str(event.get("mac", ""))):
            return Problem(action_id, entry_id, seq, "edited: its MAC does not verify")
        if seq != expected_seq:
            what = "missing event(s) before it" if seq > expected_seq else "out of order"
            return Problem(action_id, entry_id, seq, f"{what}: expected seq {expected_seq}")
        if body.get("prev") != prev:
            return Problem(action_id, entry_id, seq, "reordered: it does not follow the event before it")
        expected_seq, prev = seq + 1, str(event["mac"])
    if anchor is not None and (anchor[0] != expected_seq - 1 or anchor[1] != prev):
        return Problem(action_id, entries[-1][0] if entries else "-", expected_seq - 1,
                       f"missing event(s) at the end: the anchor says {anchor[0]} events")
    return None


async def verify(store: Store, keyring: Keyring) -> tuple[int, int, list[Problem]]:
    """Walk every chain; returns (actions, events, problems)."""
    problems: list[Problem] = []
    actions = events = 0
    for action_id in await store.audit_actions():
        entries = await store.events(action_id)
        actions += 1
        events += len(entries)
        problem = check_chain(keyring, action_id, entries, await store.audit_head(action_id))
        if problem is not None:
            problems.append(problem)
    return actions, events, problems


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
