"""Reconciliation: resolve an UNKNOWN action by evidence from the downstream, never by re-sending it (I6).

    lookup with a fence   applied        -> SUCCEEDED (or FAILED) with the receipt built from the answer
                          fenced         -> FAILED, NOT_APPLIED (the downstream refuses the key from now on)
    plain lookup          applied        -> as above
                          absent         -> still UNKNOWN: proves nothing (the request may be on its way);
                                            asked again with backoff, NEEDS_MANUAL_REVIEW after the window
    either                unreadable     -> (a redirect, an "applied" without the receipt fields) the same:
                                            never a verdict; RECEIPT_INVALID review after the window
    no lookup declared                   -> NEEDS_MANUAL_REVIEW
    tool not in this registry            -> left alone (counted): during a rolling registry change another
                                            sidecar knows the tool and reconciles it

The work of one action is claimed like a card (store/lua/reconcile_claim.lua), fenced by a claim id, so
any number of sidecars may reconcile at once and one outcome is recorded.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time

from countersign.adapters.base import Adapter, CallMeta, Kind, LookupKind, Outcome
from countersign.audit import Audit
from countersign.errors import CountersignError, DataLoss, NotFound
from countersign.keyring import Keyring
from countersign.observability import tracing
from countersign.observability.logs import decision
from countersign.observability.metrics import Metrics
from countersign.path import cards, policy
from countersign.path.cards import open_card
from countersign.path.inverse import inverse_of, overlay
from countersign.path.receipts import open_action, to_action, unknown_message
from countersign.path.settle import Settler
from countersign.reasons import Reason
from countersign.registry import Registry
from countersign.store import Busy, CardRecord, ReconcileWork, RunRecord
from countersign.store.protocols import ReconcileStore
from countersign.v1 import common_pb2

log = logging.getLogger("countersign.reconcile")
FOREIGN_DELAY_MS = 5_000  # an indexed action whose tool this registry lacks: when this sidecar looks again
FOREIGN_MEMORY = 10_000  # at most this many remembered (forgotten all at once beyond: they are only re-checked)


class Reconciler:
    def __init__(
        self,
        *,
        store: ReconcileStore,
        keyring: Keyring,
        adapters: dict[str, Adapter],
        settler: Settler,
        registry: Registry,
        metrics: Metrics,
        audit: Audit,
        lease_ms: int,
        reconcile_window_ms: int,
        downstream_deadline: float,
        backoff_ms: int = 1000,
    ) -> None:
        self.store, self.keyring, self.adapters, self.settler = store, keyring, adapters, settler
        self.registry, self.metrics, self.audit = registry, metrics, audit
        self.lease_ms, self.reconcile_window_ms = lease_ms, reconcile_window_ms
        self.downstream_deadline = downstream_deadline
        self.backoff_ms = backoff_ms
        # indexed actions whose tool this registry lacks -> when this sidecar looks at them again. Kept here, not
        # in the shared index: pushing their due time would delay the sidecars that can reconcile them.
        self._foreign_until: dict[str, int] = {}

    async def reconcile_rpc(self, context: common_pb2.CallContext, action_id: str) -> common_pb2.Action:
        """Reconcile(A): the action's owner, or an admin of its tenant in MAINTAIN mode, may ask; and the caller
        passes the same policy step as every entry (role, boundary, session mode) for the action's tool."""
        found = await cards.owned_action(self.store, self.keyring, context, action_id, admin_modes=cards.ADMIN_MAINTAIN)
        if not isinstance(found, RunRecord):
            return common_pb2.Action(action_id=action_id, state=common_pb2.ACTION_STATE_READY, tool_name=found.tool)
        card = open_card(self.keyring, action_id, CardRecord(found.kid, found.tool, found.card, found.cmac))
        if card.tool in self.registry.tools:  # a tool this registry lacks is another sidecar's to reconcile
            # a planned or forbidden capability still may be reconciled: asking never re-sends the write
            policy.authorize(self.registry, context, card.tool, card.arguments, policy.Phase.RECONCILE, claimed=True)
        action = await self.reconcile(action_id)
        if action.state == common_pb2.ACTION_STATE_SUCCEEDED:  # where it stands: an undone action is COMPENSATED
            action = overlay(action, await inverse_of(self.store, self.keyring, action_id))
        return action

    async def reconcile(self, action_id: str) -> common_pb2.Action:
        """One attempt; returns where the action stands afterwards."""
        if self._foreign(await self.store.run_tool(action_id)):
            found = await self.store.peek(action_id)
            if not isinstance(found, RunRecord):
                raise NotFound(Reason.ACTION_NOT_FOUND, "no such action")
            return open_action(self.keyring, action_id, found, replayed=True)
        claim_id = "r" + os.urandom(11).hex()
        with self.metrics.timed("reconcile"):
            work = await self.store.reconcile_claim(action_id, claim_id, self.lease_ms)
        if isinstance(work, RunRecord):
            return open_action(self.keyring, action_id, work, replayed=True)
        if not isinstance(work, ReconcileWork):
            if not isinstance(work, Busy):
                raise NotFound(Reason.ACTION_NOT_FOUND, "no such action")
            found = await self.store.peek(action_id)
            assert isinstance(found, RunRecord)
            return open_action(self.keyring, action_id, found, replayed=True)
        return await self._resolve(action_id, claim_id, work)

    def _foreign(self, tool: str) -> bool:
        """A tool this sidecar's registry does not know (a rolling registry change): not ours to judge. Without
        the tool there is no lookup, and "no lookup" would send another sidecar's action to manual review; so
        it is left alone (unclaimed, untouched) for a sidecar that knows the tool, and counted."""
        if not tool or tool in self.registry.tools:
            return False
        self.metrics.reconciliations.labels(self.metrics.tool(tool), "tool_not_in_registry").inc()
        return True

    async def _resolve(self, action_id: str, claim_id: str, work: ReconcileWork) -> common_pb2.Action:
        now_ms = work.now_ms
        if work.card.kid not in self.keyring.keys:
            # Sealed with a key this sidecar does not list (removed here too early, or not yet distributed):
            # it can neither verify the card nor seal a verdict others could read. Left to a sidecar that can.
            self.metrics.reconciliations.labels(self.metrics.tool(work.card.tool), "key_not_listed").inc()
            await self.store.reconcile_defer(action_id, claim_id, 0)  # due again at once, for the others
            action = common_pb2.Action(
                action_id=action_id, state=common_pb2.ACTION_STATE_UNKNOWN, tool_name=work.card.tool, replayed=True
            )
            action.error.reason = Reason.KEY_NOT_IN_KEYS_FILE  # the operator CLI's word for it too
            action.error.message = unknown_message(
                f"This sidecar does not list key {work.card.kid[:32]!r}, which "
                "sealed the action; a sidecar that does will reconcile it"
            )
            return action
        try:
            card = open_card(self.keyring, action_id, work.card)
        except DataLoss:
            return await self._review(
                action_id,
                work.card.kid,
                work.card.tool,
                claim_id,
                Reason.RECORD_TAMPERED,
                "the stored card does not verify; a person must check the downstream",
            )
        tool = self.registry.tools.get(card.tool)
        if tool is None or not tool.adapter.can_lookup:
            return await self._review(
                action_id,
                card.kid,
                card.tool,
                claim_id,
                Reason.NO_LOOKUP,
                "the tool declares no lookup by idempotency key; a person must check",
            )
        meta = CallMeta(
            idempotency_key=action_id,
            attempt=work.attempts,
            policy_version=card.policy_version,
            trace_headers=tracing.outgoing_headers,
        )
        fence = tool.adapter.can_fence
        found = await self.adapters[tool.adapter.kind].lookup(tool, meta, fence, self.downstream_deadline)
        label = self.metrics.tool(tool.name)
        window_s = self.reconcile_window_ms // 1000
        if found.kind is LookupKind.APPLIED and found.outcome is not None and found.outcome.kind is not Kind.UNKNOWN:
            outcome = found.outcome
            action = to_action(action_id, tool, card, outcome, now_ms)
            result = "succeeded" if outcome.kind is Kind.SUCCEEDED else "failed"
        elif found.kind is LookupKind.ABSENT_FENCED:
            action = to_action(
                action_id,
                tool,
                card,
                Outcome(
                    Kind.FAILED,
                    Reason.NOT_APPLIED,
                    "the downstream never applied this key and now refuses it",
                    retryable=True,
                    status="410",
                ),
                now_ms,
            )
            result = "not_applied"
        elif found.kind is LookupKind.ABSENT_UNFENCED and now_ms - work.unknown_since_ms >= self.reconcile_window_ms:
            return await self._review(
                action_id,
                card.kid,
                tool.name,
                claim_id,
                Reason.NOT_RESOLVED_IN_WINDOW,
                f"the downstream has no record of the key after {window_s} s; without a fence that proves nothing",
            )
        elif found.kind is LookupKind.UNREADABLE and now_ms - work.unknown_since_ms >= self.reconcile_window_ms:
            # the downstream answers, but with nothing a verdict can be built on (a redirect, no receipt)
            return await self._review(
                action_id,
                card.kid,
                tool.name,
                claim_id,
                Reason.RECEIPT_INVALID,
                f"the lookup still gives no usable answer after {window_s} s "
                f"({found.message[:200]}); a person must check the downstream",
            )
        else:
            # a miss proves nothing, and an unreachable downstream is asked again too (never a verdict)
            delay = min(self.backoff_ms * 2 ** min(work.attempts - 1, 6), 60_000)
            await self.store.reconcile_defer(action_id, claim_id, delay)
            await self.store.open_add(action_id, now_ms + delay)
            self.metrics.reconciliations.labels(label, "still_unknown").inc()
            found_run = await self.store.peek(action_id)
            assert isinstance(found_run, RunRecord)
            return open_action(self.keyring, action_id, found_run, replayed=True)
        await self.settler.settle(action_id, card.kid, claim_id, action)
        self.metrics.reconciliations.labels(label, result).inc()
        self.audit.event(action_id, "reconciled", result=result, lookup=found.kind.value, attempts=work.attempts)
        decision(action_id, tool.name, "reconciled", action.error.reason or result.upper())
        return action

    async def _review(
        self, action_id: str, kid: str, tool: str, claim_id: str, reason: str, message: str
    ) -> common_pb2.Action:
        action = common_pb2.Action(
            action_id=action_id, state=common_pb2.ACTION_STATE_NEEDS_MANUAL_REVIEW, tool_name=tool
        )
        action.error.reason, action.error.message = reason, message
        await self.settler.settle(action_id, kid, claim_id, action, state="review")
        self.metrics.reconciliations.labels(self.metrics.tool(tool), "manual_review").inc()
        self.audit.event(action_id, "needs_manual_review", reason=reason)
        decision(action_id, tool, "manual_review", reason)
        return action

    # -- in the background, in every sidecar -----------------------------------------------------

    async def run_forever(self, interval: float, stop: asyncio.Event) -> None:
        """Reconcile what the index says is due, every interval; and, slowly, SCAN for records the index
        missed (a sidecar killed between its claim and the index write)."""
        cursor, tick = 0, 0
        while not stop.is_set():
            try:
                await self.due()
                tick += 1
                if tick % 6 == 1:
                    cursor = await self.sweep(cursor)
            except CountersignError as exc:
                log.warning(json.dumps({"event": "reconciler_sweep_failed", "reason": exc.reason}))
            except Exception:
                log.exception("reconciler sweep failed")
            try:
                await asyncio.wait_for(stop.wait(), interval)
            except TimeoutError:
                pass

    async def due(self, count: int = 200) -> None:
        """Reconcile the indexed actions that are due; drop the ones that settled meanwhile."""
        now_ms = int(time.time() * 1000)
        self._foreign_until = {a: t for a, t in self._foreign_until.items() if t > now_ms}
        if len(self._foreign_until) > FOREIGN_MEMORY:
            self._foreign_until.clear()
        # fetch past the foreign entries, so another sidecar's actions never crowd out this one's own
        for action_id in await self.store.open_due(now_ms, count + len(self._foreign_until)):
            if action_id in self._foreign_until:
                continue
            if self._foreign(await self.store.run_tool(action_id)):
                self._foreign_until[action_id] = now_ms + FOREIGN_DELAY_MS
                continue
            try:
                action = await self.reconcile(action_id)
            except NotFound:
                await self.store.open_remove(action_id)
                continue
            except CountersignError as exc:
                log.warning(json.dumps({"event": "reconcile_failed", "action_id": action_id, "reason": exc.reason}))
                continue
            if action.state not in (common_pb2.ACTION_STATE_UNKNOWN, common_pb2.ACTION_STATE_RUNNING):
                await self.store.open_remove(action_id)

    async def sweep(self, cursor: int = 0, count: int = 2000) -> int:
        cursor, ids = await self.store.scan_runs(cursor, count)
        now_ms = int(time.time() * 1000)
        summaries = await self.store.run_states(ids)
        unknown = running = review = lapsed_count = foreign = 0
        for action_id, summary in zip(ids, summaries, strict=True):
            state, lease, due, tool = summary.state, summary.lease_ms, summary.due_ms, summary.tool
            unknown += state == "unknown"
            running += state == "running"
            review += state == "review"
            lapsed = state == "running" and lease <= now_ms
            lapsed_count += lapsed
            if (state == "unknown" and due <= now_ms) or lapsed:
                if self._foreign(tool):
                    foreign += 1
                    continue
                try:
                    await self.reconcile(action_id)
                except CountersignError as exc:
                    log.warning(json.dumps({"event": "reconcile_failed", "action_id": action_id, "reason": exc.reason}))
        if cursor == 0:
            self.metrics.actions.labels("unknown").set(unknown)
            self.metrics.actions.labels("running").set(running)
            self.metrics.actions.labels("needs_manual_review").set(review)
            self.metrics.actions.labels("lease_lapsed").set(lapsed_count)
            self.metrics.actions.labels("tool_not_in_registry").set(foreign)
        return cursor
