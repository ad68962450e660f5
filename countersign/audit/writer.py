"""The audit writer: events of each action appended to its own chain in the background, never on the caller's
path (a failure is counted and logged, never raised).

A transition whose script appends its own events (issue.lua, settle.lua: docs/design.md §10) builds them here
(``Audit.chained``) and passes them to the store; everything else is written by ``Audit.event`` in the
background."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

from countersign.audit.chain import anchor_mac, encode_event, expiry, signed
from countersign.audit.heads import Heads
from countersign.errors import CountersignError
from countersign.keyring import Keyring
from countersign.observability.metrics import Metrics
from countersign.store import Anchor, Chained
from countersign.store.protocols import AuditStore

log = logging.getLogger("countersign.audit")

Entry = tuple[str, int, dict[str, Any]]  # one event before it is chained: its kind, when (ms), its fields
HEADS = 10_000  # chain heads the writer remembers (audit/heads.py: ~160 bytes each)


class Audit:
    """Writes events in the background: one writer per action at a time, events batched per call."""

    def __init__(self, store: AuditStore, keyring: Keyring, metrics: Metrics, audit_ttl_ms: int) -> None:
        self.store, self.keyring, self.metrics, self.audit_ttl_ms = store, keyring, metrics, audit_ttl_ms
        self.pending: set[asyncio.Task[Any]] = set()
        self._queues: dict[str, list[Entry]] = {}
        self._heads = Heads(HEADS)  # the last chain state we wrote
        self.batch_delay = 0.02

    @staticmethod
    def entry(kind: str, **fields: Any) -> Entry:
        """One event to be chained (its kind, when, its fields), for ``chained``."""
        return kind, int(time.time() * 1000), fields

    def chained(self, action_id: str, after: tuple[int, str], batch: list[Entry]) -> Chained:
        """The events of ``batch`` chained to ``after`` (seq, head), MAC'd, with the anchor after them."""
        kid, (seq, head) = self.keyring.active, after
        events, prev = [], head
        for n, (kind, at, fields) in enumerate(batch, start=1):
            unsigned = encode_event(action_id, seq + n, prev, kind, at, kid, fields)
            prev = self.keyring.mac(kid, "audit", unsigned)
            events.append((signed(unsigned, prev), prev))
        anchor = Anchor(kid, anchor_mac(self.keyring, kid, action_id, seq + len(batch), prev))
        return Chained(after, events, anchor, expiry(batch), self.audit_ttl_ms)

    def remember(self, action_id: str, head: tuple[int, str]) -> None:
        """Where an action's chain ends after a script appended to it (the writer's next guess for it)."""
        self._heads.put(action_id, head)

    def head(self, action_id: str) -> tuple[int, str]:
        """The writer's guess of where an action's chain ends (what this process last appended; else none)."""
        return self._heads.get(action_id) or (0, "")

    def event(self, action_id: str, kind: str, **fields: Any) -> None:
        """Record an event in the background (never raises, never waits)."""
        self.later(action_id, (kind, int(time.time() * 1000), fields))

    def later(self, action_id: str, entry: Entry) -> None:
        """Record an event built before (``entry``) in the background."""
        queue = self._queues.get(action_id)
        if queue is not None:  # a writer for this action is running: it takes this one too
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

    async def _append(self, action_id: str, batch: list[Entry]) -> None:
        try:
            # Optimistic: chain to the head we last wrote (or to nothing, for a new action); on a conflict the
            # script answers the real head and we chain again.
            state = self._heads.pop(action_id) or (0, "")
            for _ in range(8):
                chain = self.chained(action_id, state, batch)
                appended = await self.store.audit_append(
                    action_id, state, chain.events, chain.anchor, chain.expiry, chain.ttl_ms
                )
                state = (appended.seq, appended.head)
                if appended.ok:
                    self.remember(action_id, state)
                    return
            raise RuntimeError("the chain kept moving")
        except (CountersignError, RuntimeError, OSError) as exc:
            self.metrics.audit_write_failures.inc(len(batch))
            log.warning(
                json.dumps(
                    {
                        "event": "audit_write_failed",
                        "action_id": action_id,
                        "kinds": [k for k, _, _ in batch],
                        "error": str(exc)[:200],
                    }
                )
            )

    async def drain(self, timeout: float) -> None:
        if self.pending:
            await asyncio.wait(list(self.pending), timeout=timeout)
