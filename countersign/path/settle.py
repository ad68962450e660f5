"""Settle: record an outcome as the holder of a claim (the executor's, or a reconciler's), and keep the
reconciler's index of what may need it (docs/design.md §7).

The downstream's answer is the truth the caller gets: when the store is away (or too few replicas acknowledged
the settle), it is recorded later, in the background, for as long as the replay TTL.

The executor's ``claimed`` event and the ``settled`` event travel in settle.lua itself (docs/design.md §10): chained
to where claim.lua saw the chain end, appended in the step that records the outcome (a Confirm is two Redis round
trips, and the events are atomic with the outcome). A chain that moved meanwhile gets the events chained again and
the settle sent again (settle.lua changed nothing). A settle that comes late (the downstream slower than
``CLAIMED_ALONE_AFTER``) finds the claimed event already written alone by the audit writer, so the chain shows a
running action's claim; its settled event then follows through the writer too, as does every event of a settle
that lost its claim.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from countersign.audit import Audit
from countersign.audit.writer import Entry
from countersign.errors import CountersignError, Unavailable
from countersign.keyring import Keyring
from countersign.observability.metrics import Metrics
from countersign.path.approval import evidence_event
from countersign.path.receipts import seal_action
from countersign.store import Appended, Settle, states
from countersign.store.protocols import SettleStore
from countersign.v1 import common_pb2

log = logging.getLogger("countersign.settle")
T = TypeVar("T")

# settle.lua's arguments: action id, claim id, state, outcome, its MAC, reason, receipt status, replay TTL (ms)
SettleArgs = tuple[str, str, str, bytes, str, str, str, int]

# seconds a won claim's ``claimed`` event waits for the settle to carry it; after that the audit writer writes it
# alone (a sidecar killed before then leaves the claim without its event: docs/design.md §10)
CLAIMED_ALONE_AFTER = 0.25


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


# how often at most the held events are looked at: one is written alone CLAIMED_ALONE_AFTER to that plus this late
CLAIMED_TICK = 0.05


async def shielded(tasks: set[asyncio.Task[Any]], work: Coroutine[Any, Any, T]) -> T:
    """``work``'s result, run in the background (held in ``tasks``): cancelling the caller does not cancel it; it
    runs to its end and its result is dropped. asyncio.shield(spawn(...)) with one hop less: the work hands its
    result to the caller's future itself, where shield waits for the task's done callback to pass it on (~32k
    instructions less per call, counted: notes/lean-cpu3.md)."""
    done: asyncio.Future[T] = asyncio.get_running_loop().create_future()
    spawn(tasks, _into(done, work))
    return await done  # cancelled: only this future is, not the work


async def _into(done: asyncio.Future[T], work: Coroutine[Any, Any, T]) -> None:
    try:
        result = await work
    except asyncio.CancelledError:  # the work itself was cancelled (shutdown): so is its caller's wait
        done.cancel()
        raise
    except BaseException as exc:  # the caller's, if it still waits; retrieved either way (as shield does)
        if not done.done():
            done.set_exception(exc)
        if not isinstance(exc, Exception):
            raise
        return
    if not done.done():
        done.set_result(result)


class ClaimedEvent:
    """The executor's ``claimed`` event, held for settle.lua to append with the outcome; written alone by the audit
    writer once ``after`` seconds pass without a settle taking it (HeldEvents' timer), or when the claim ends
    without one (given back)."""

    def __init__(self, audit: Audit, action_id: str, chain_at: tuple[int, str], fields: dict[str, Any]) -> None:
        self.audit, self.action_id, self.chain_at = audit, action_id, chain_at
        self.entry = audit.entry("claimed", **fields)
        self.taken = False

    def alone(self) -> None:
        """Hand the event to the audit writer now, unless a settle took it."""
        if self.take():
            self.audit.later(self.action_id, self.entry)

    def take(self) -> bool:
        """True once: the event is the caller's to write (it was still held)."""
        taken, self.taken = self.taken, True
        return not taken


class HeldEvents:
    """The claimed events held for their settles, oldest first, and one timer for all of them (not a timer per
    Confirm: a call_later and its cancel cost ~21k instructions): armed while any is held, at the oldest one's due
    time, at most every CLAIMED_TICK. Each event still held when due is written alone."""

    def __init__(self, after: float) -> None:
        self.after = after
        self._held: deque[tuple[float, ClaimedEvent]] = deque()
        self._timer: asyncio.TimerHandle | None = None

    def hold(self, event: ClaimedEvent) -> ClaimedEvent:
        loop = asyncio.get_running_loop()
        due = loop.time() + self.after
        self._held.append((due, event))
        if self._timer is None:
            self._timer = loop.call_at(due, self._due)
        return event

    def _due(self) -> None:
        self._timer = None
        loop = asyncio.get_running_loop()
        now = loop.time()
        held = self._held
        while held and (held[0][1].taken or held[0][0] <= now):
            held.popleft()[1].alone()  # written alone unless its settle took it
        if held:
            self._timer = loop.call_at(max(held[0][0], now + CLAIMED_TICK), self._due)


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
        self.held = HeldEvents(CLAIMED_ALONE_AFTER)

    def claimed(self, action_id: str, chain_at: tuple[int, str], **fields: Any) -> ClaimedEvent:
        """Hold a won claim's ``claimed`` event for the settle (``chain_at``: where claim.lua saw the chain end)."""
        return self.held.hold(ClaimedEvent(self.audit, action_id, chain_at, fields))

    async def settle(
        self,
        action_id: str,
        kid: str,
        claim_id: str,
        action: common_pb2.Action,
        state: str = "",
        claimed: ClaimedEvent | None = None,
    ) -> None:
        """Record ``action`` as the outcome; ``state`` review for a reconciler's verdict that needs a person.
        ``claimed``: the executor's held claimed event, appended with the settled event in settle.lua."""
        # A record naming a key this sidecar does not list was changed by hand (the token's key is listed):
        # its refusal is sealed with the active key, and readers find the record tampered either way.
        kid = kid if kid in self.keyring.keys else self.keyring.active
        out, omac = seal_action(self.keyring, kid, action)
        state = state or ("unknown" if action.state == common_pb2.ACTION_STATE_UNKNOWN else "settled")
        settled = self.audit.entry(
            "settled",
            state=states.name(action.state),
            reason=action.error.reason,
            resource_id=action.receipt.resource_id,
            outcome_hmac=self.keyring.digest("outcome", out),
            by=(claim_id[:1] == "r" and "reconciler") or "executor",
            **({"approval": evidence_event(action.receipt.approval)} if action.receipt.HasField("approval") else {}),
        )
        # the events travel with the settle while the claimed event is still held; else through the writer
        chain = Chain([claimed.entry, settled], claimed.chain_at) if claimed is not None and claimed.take() else None
        if chain is None:
            self.audit.later(action_id, settled)
        receipt = "SUCCEEDED" if action.receipt.status == common_pb2.RECEIPT_STATUS_SUCCEEDED else ""
        args = (action_id, claim_id, state, out, omac, action.error.reason, receipt, self.timing.replay_ttl_ms)
        if state == "unknown":  # only what may need reconciling is indexed; a settled Confirm costs nothing
            self.index(action_id, int(self.clock() * 1000))
        try:
            with self.metrics.timed("settle"):
                result = await self._settle(args, chain)
        except Unavailable:  # the store is away, or too few replicas acknowledged the settle
            spawn(self.background, self._settle_later(args, chain))
            return
        if result != "ok":
            log.warning(json.dumps({"event": "settle_lost", "action_id": action_id, "result": result}))

    async def _settle(self, args: SettleArgs, chain: Chain | None) -> Settle:
        """settle.lua, with the events of ``chain`` when there are any: chained again to where the chain ends
        whenever another writer moved it (settle.lua then changed nothing). A settle that does not record (lost,
        gone) leaves its events to the writer, as does a chain that keeps moving."""
        action_id = args[0]
        if chain is None:
            return await self._plain(args)
        for _ in range(8):
            built = self.audit.chained(action_id, chain.at, chain.batch)
            result = await self.store.settle(*args, chain=built)
            if not isinstance(result, Appended):
                if result == "ok":
                    self.audit.remember(action_id, built.head)
                else:
                    self._by_writer(action_id, chain)
                return result
            chain.at = (result.seq, result.head)
        self._by_writer(action_id, chain)
        return await self._plain(args)

    async def _plain(self, args: SettleArgs) -> Settle:
        result = await self.store.settle(*args)
        assert not isinstance(result, Appended)  # no events sent: settle.lua has no chain to find moved
        return result

    def _by_writer(self, action_id: str, chain: Chain) -> None:
        if not chain.written:
            chain.written = True
            for entry in chain.batch:
                self.audit.later(action_id, entry)

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

    async def _settle_later(self, args: SettleArgs, chain: Chain | None) -> None:
        delay = 0.05
        deadline = time.monotonic() + self.timing.replay_ttl_ms / 1000
        while time.monotonic() < deadline:
            await asyncio.sleep(delay)
            try:
                result = await self._settle(args, chain)
            except Unavailable:
                delay = min(delay * 2, 5.0)
                continue
            self.metrics.settle_retries.labels(result).inc()
            return
        self.metrics.settle_retries.labels("gave_up").inc()
        if chain is not None:  # never recorded: the events still go to the chain (as they would have before)
            self._by_writer(args[0], chain)


@dataclass
class Chain:
    """The events a settle carries (claimed, settled), and where they are chained to now."""

    batch: list[Entry]
    at: tuple[int, str]
    written: bool = False  # handed to the audit writer instead
