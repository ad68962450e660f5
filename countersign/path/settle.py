"""Settle: record an outcome as the holder of a claim (the executor's, or a reconciler's), and keep the
reconciler's index of what may need it (docs/design.md §7).

The downstream's answer is the truth the caller gets: when the store is away (or too few replicas acknowledged
the settle), it is recorded later, in the background, for as long as the replay TTL.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from countersign.audit import Audit
from countersign.errors import CountersignError, Unavailable
from countersign.keyring import Keyring
from countersign.observability.metrics import Metrics
from countersign.path.approval import evidence_event
from countersign.path.receipts import seal_action
from countersign.store import states
from countersign.store.protocols import SettleStore
from countersign.v1 import common_pb2

log = logging.getLogger("countersign.settle")


@dataclass(frozen=True)
class Timing:
    """The durations every stage of the path shares (from the settings, in the path's units)."""

    lease_ms: int  # --lease: how long a claim may run before it is reported UNKNOWN
    replay_ttl_ms: int  # --replay-ttl: how long a settled outcome is replayed
    downstream_deadline: float  # --downstream-deadline, seconds


def spawn(tasks: set[asyncio.Task[Any]], work: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
    """Run work in the background, held in ``tasks`` until it ends (the sidecar waits for them at shutdown)."""
    task = asyncio.ensure_future(work)
    tasks.add(task)
    task.add_done_callback(tasks.discard)
    return task


class Settler:
    """running|unknown -> settled | unknown | review, by the holder of the claim id."""

    def __init__(
        self,
        store: SettleStore,
        keyring: Keyring,
        audit: Audit,
        metrics: Metrics,
        timing: Timing,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store, self.keyring, self.audit, self.metrics = store, keyring, audit, metrics
        self.timing, self.clock = timing, clock
        self.background: set[asyncio.Task[Any]] = set()

    async def settle(self, action_id: str, kid: str, claim_id: str, action: common_pb2.Action, state: str = "") -> None:
        """Record ``action`` as the outcome; ``state`` review for a reconciler's verdict that needs a person."""
        # A record naming a key this sidecar does not list was changed by hand (the token's key is listed):
        # its refusal is sealed with the active key, and readers find the record tampered either way.
        kid = kid if kid in self.keyring.keys else self.keyring.active
        out, omac = seal_action(self.keyring, kid, action)
        state = state or ("unknown" if action.state == common_pb2.ACTION_STATE_UNKNOWN else "settled")
        self.audit.event(
            action_id,
            "settled",
            state=states.name(action.state),
            reason=action.error.reason,
            resource_id=action.receipt.resource_id,
            outcome_hmac=self.keyring.digest("outcome", out),
            by=(claim_id[:1] == "r" and "reconciler") or "executor",
            **({"approval": evidence_event(action.receipt.approval)} if action.receipt.HasField("approval") else {}),
        )
        receipt = "SUCCEEDED" if action.receipt.status == common_pb2.RECEIPT_STATUS_SUCCEEDED else ""
        args = (action_id, claim_id, state, out, omac, action.error.reason, receipt, self.timing.replay_ttl_ms)
        if state == "unknown":  # only what may need reconciling is indexed; a settled Confirm costs nothing
            self.index(action_id, int(self.clock() * 1000))
        try:
            with self.metrics.timed("settle"):
                result = await self.store.settle(*args)
        except Unavailable:  # the store is away, or too few replicas acknowledged the settle
            spawn(self.background, self._settle_later(args))
            return
        if result != "ok":
            log.warning(json.dumps({"event": "settle_lost", "action_id": action_id, "result": result}))

    def index(self, action_id: str, due_ms: int | None) -> None:
        """Keep the reconciler's index of open actions, in the background (off the caller's path).

        A sidecar killed mid-call never writes it: the reconciler's slow SCAN pass finds that lapsed lease."""

        async def write() -> None:
            try:
                if due_ms is None:
                    await self.store.open_remove(action_id)
                else:
                    await self.store.open_add(action_id, due_ms)
            except CountersignError:
                pass

        spawn(self.background, write())

    async def _settle_later(self, args: tuple[Any, ...]) -> None:
        delay = 0.05
        deadline = time.monotonic() + self.timing.replay_ttl_ms / 1000
        while time.monotonic() < deadline:
            await asyncio.sleep(delay)
            try:
                result = await self.store.settle(*args)
            except Unavailable:
                delay = min(delay * 2, 5.0)
                continue
            self.metrics.settle_retries.labels(result).inc()
            return
        self.metrics.settle_retries.labels("gave_up").inc()
