"""Execute a claimed action: verify the card, re-check policy, call the adapter once, settle.

Everything here runs only for the single caller whose claim won (I3), and is shielded from
that caller's cancellation: once the request may have reached the downstream, the answer is
recorded whatever happens to the RPC that started it.

A request that was never sent (the downstream could not be reached at all) changes nothing, so the
claim is given back and the card is READY again (lua/release.lua): the caller gets UNAVAILABLE
DOWNSTREAM_NOT_SENT with a RetryInfo, and the same token confirms later, once.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from countersign.adapters.base import Adapter, CallMeta, Kind, Outcome, address
from countersign.canonical import canonical
from countersign.errors import CountersignError, DataLoss, FailedPrecondition, Unavailable
from countersign.keyring import Keyring
from countersign.observability import tracing
from countersign.observability.logs import decision
from countersign.observability.metrics import Metrics
from countersign.registry import Capability, Registry, Tool
from countersign.registry.templates import render
from countersign.sidecar import policy, states
from countersign.sidecar.audit import Audit
from countersign.sidecar.cards import Card, check_run, open_card
from countersign.sidecar.store import CardRecord, RunRecord, Store
from countersign.v1 import common_pb2

log = logging.getLogger("countersign.execute")
EVIDENCE_BYTES = 64 << 10
NOT_SENT = "NOT_SENT"            # the adapters' reason for a request that never left (nothing was sent)
NOT_SENT_RETRY_AFTER = 1.0       # seconds: RetryInfo of DOWNSTREAM_NOT_SENT (a refused connection is often brief)


@dataclass(frozen=True)
class Timing:
    lease_ms: int
    replay_ms: int
    downstream_deadline: float


def seal_action(keyring: Keyring, kid: str, action: common_pb2.Action) -> tuple[bytes, str]:
    out = action.SerializeToString(deterministic=True)
    return out, keyring.mac(kid, "outcome:" + action.action_id, out)


# what a stored outcome may say, by the record's state: a state changed by hand disagrees with the MAC'd outcome
_OUTCOME_STATES = {
    "settled": {common_pb2.ACTION_STATE_SUCCEEDED, common_pb2.ACTION_STATE_FAILED, common_pb2.ACTION_STATE_REJECTED},
    "unknown": {common_pb2.ACTION_STATE_UNKNOWN},
    "review": {common_pb2.ACTION_STATE_NEEDS_MANUAL_REVIEW},
}


def unknown_message(detail: str) -> str:
    """What UNKNOWN means, every time it is said (I6): it may have landed, it was not retried, it is being
    reconciled by key."""
    return (f"{detail.rstrip('.')}. The request may have reached the downstream; it was not retried, and "
            "reconciliation is asking the downstream by its idempotency key (the action id) what became of it")


def open_action(keyring: Keyring, action_id: str, run: RunRecord, *, replayed: bool) -> common_pb2.Action:
    """The action a run record stands for. The record is checked against its sealed card and a stored outcome
    against its MAC and the record's state (DATA_LOSS RECORD_TAMPERED if anything was changed)."""
    check_run(keyring, action_id, run)
    tampered = DataLoss("RECORD_TAMPERED", "the stored outcome of this action was changed")
    if not run.out:
        if run.state not in ("running", "unknown"):
            raise tampered
        state = common_pb2.ACTION_STATE_RUNNING if run.state == "running" else common_pb2.ACTION_STATE_UNKNOWN
        action = common_pb2.Action(action_id=action_id, state=state, replayed=replayed, tool_name=run.tool)
        if state == common_pb2.ACTION_STATE_UNKNOWN:
            action.error.reason = run.reason or "UNKNOWN"
            action.error.message = unknown_message("The executing sidecar's lease lapsed before it recorded an "
                                                   "answer")
        return action
    if not keyring.verify(run.kid, "outcome:" + action_id, run.out, run.omac):
        raise tampered
    action = common_pb2.Action.FromString(run.out)
    if action.state not in _OUTCOME_STATES.get(run.state, ()) or action.action_id != action_id:
        raise tampered
    action.replayed = replayed
    return action


def to_action(action_id: str, tool: Tool, card: Card, outcome: Outcome, now_ms: int) -> common_pb2.Action:
    """The outcome as the contract's Action, with a receipt when the downstream answered."""
    states = {Kind.SUCCEEDED: common_pb2.ACTION_STATE_SUCCEEDED, Kind.FAILED: common_pb2.ACTION_STATE_FAILED,
              Kind.UNKNOWN: common_pb2.ACTION_STATE_UNKNOWN}
    action = common_pb2.Action(action_id=action_id, state=states[outcome.kind], tool_name=tool.name)
    if outcome.kind is not Kind.SUCCEEDED:
        action.error.reason = outcome.reason
        action.error.message = outcome.message
        action.error.retryable = outcome.retryable
    if outcome.kind is Kind.UNKNOWN:
        action.error.message = unknown_message(outcome.message or outcome.reason)
        return action
    receipt = action.receipt
    receipt.action_id = action_id
    receipt.tool_name = tool.name
    receipt.status = (common_pb2.RECEIPT_STATUS_SUCCEEDED if outcome.kind is Kind.SUCCEEDED
                      else common_pb2.RECEIPT_STATUS_FAILED)
    receipt.resource_id = outcome.resource_id
    receipt.resource_version = outcome.resource_version
    if outcome.kind is Kind.SUCCEEDED:
        values: dict[str, Any] = {**card.arguments, "action_id": action_id, "idempotency_key": action_id,
                                  "receipt.resource_id": outcome.resource_id,
                                  "receipt.resource_version": outcome.resource_version}
        receipt.summary = render(tool.receipt.summary, values)
    else:
        receipt.summary = outcome.message
    receipt.evidence_json = _evidence(outcome)
    receipt.settled_at.FromMilliseconds(now_ms)
    return action


def _evidence(outcome: Outcome) -> str:
    """The downstream's answer as the receipt keeps it: whole up to EVIDENCE_BYTES, else its hash and size
    (an answer may be up to a MiB; every replay and the run record carry the receipt)."""
    evidence: dict[str, Any] = {"status": outcome.status, "body": outcome.body}
    try:
        text = canonical(evidence).decode()
    except ValueError:
        text = json.dumps(evidence, sort_keys=True, default=str)
    if len(text) <= EVIDENCE_BYTES:
        return text
    whole = text.encode()
    return json.dumps({"status": outcome.status, "evidence_sha256": hashlib.sha256(whole).hexdigest(),
                       "evidence_bytes": len(whole)}, sort_keys=True)


def refused_action(action_id: str, tool: str, reason: str, message: str, now_ms: int) -> common_pb2.Action:
    """FAILED before anything was sent (tampered card, policy changed at claim time)."""
    action = common_pb2.Action(action_id=action_id, state=common_pb2.ACTION_STATE_FAILED, tool_name=tool)
    action.error.reason, action.error.message = reason, message
    action.receipt.action_id, action.receipt.tool_name = action_id, tool
    action.receipt.status = common_pb2.RECEIPT_STATUS_FAILED
    action.receipt.summary = message
    action.receipt.settled_at.FromMilliseconds(now_ms)
    return action


class Executor:
    """claim won -> card verified -> policy re-checked -> one adapter call -> settle."""

    def __init__(self, store: Store, keyring: Keyring, adapters: dict[str, Adapter], timing: Timing,
                 metrics: Metrics, audit: Audit, clock: Callable[[], float] = time.time) -> None:
        self.store, self.keyring, self.adapters = store, keyring, adapters
        self.timing, self.metrics, self.audit, self.clock = timing, metrics, audit, clock
        self.background: set[asyncio.Task[Any]] = set()

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    async def run(self, registry: Registry, context: common_pb2.CallContext, action_id: str, claim_id: str,
                  record: CardRecord) -> common_pb2.Action:
        """Shielded from the caller: the work of a won claim always ends in a settle attempt."""
        task = asyncio.ensure_future(self._run(registry, context, action_id, claim_id, record))
        self.background.add(task)
        task.add_done_callback(self.background.discard)
        return await asyncio.shield(task)

    async def _run(self, registry: Registry, context: common_pb2.CallContext, action_id: str,
                   claim_id: str, record: CardRecord) -> common_pb2.Action:
        self.audit.event(action_id, "claimed", tool=record.tool)
        try:
            card = open_card(self.keyring, action_id, record)
        except DataLoss as exc:
            self.metrics.claims.labels(self.metrics.tool(record.tool), "tampered").inc()
            await self._settle(action_id, record.kid, claim_id,
                               refused_action(action_id, record.tool, exc.reason, exc.message, self._now_ms()))
            raise
        tracing.annotate(action_id=action_id, tool=card.tool, capability=card.capability, risk=card.risk)
        with self.metrics.timed("policy"):
            tool = self._recheck(registry, context, card)
        if isinstance(tool, FailedPrecondition):
            await self._settle(action_id, card.kid, claim_id,
                               refused_action(action_id, card.tool, tool.reason, tool.message, self._now_ms()))
            raise tool
        # the prepared version travels as If-Match: a resource changed since the card was shown is not written
        meta = CallMeta(idempotency_key=action_id, attempt=1, policy_version=card.policy_version,
                        tenant_id=context.tenant_id, actor_id=context.actor_id,
                        subject_id=context.subject_id, locale=context.locale, if_match=card.resource_version,
                        trace_headers=tracing.outgoing_headers)
        call = tool.adapter.execute
        with self.metrics.timed("execute", span=False), tracing.client_span(
                tool.name, tool.adapter.kind, call.method if call else "Execute",
                call.url if call else tool.adapter.target) as span:
            start = time.perf_counter()
            outcome = await self.adapters[tool.adapter.kind].execute(
                tool, card.arguments, meta, self.timing.downstream_deadline)
            elapsed = time.perf_counter() - start
            span.set_attribute("countersign.outcome", outcome.kind.value)
            tracing.end_client_span(span, tool.adapter.kind, outcome.status, outcome.reason)
        label = self.metrics.tool(tool.name)
        self.metrics.downstream.labels(label, tool.adapter.kind).observe(elapsed)
        not_sent = outcome.kind is Kind.FAILED and outcome.reason == NOT_SENT
        self.metrics.executions.labels(label, "not_sent" if not_sent else outcome.kind.value).inc()
        tracing.annotate(outcome=outcome.kind.value, replayed=False)
        if not_sent:
            return await self._give_back(action_id, claim_id, tool, outcome)
        action = to_action(action_id, tool, card, outcome, self._now_ms())
        await self._settle(action_id, card.kid, claim_id, action)
        decision(action_id, tool.name, "executed", outcome.reason or outcome.kind.value.upper(),
                 outcome=outcome.kind.value)
        return action

    async def _give_back(self, action_id: str, claim_id: str, tool: Tool, outcome: Outcome) -> common_pb2.Action:
        """Nothing reached the downstream: put the card back (READY, same token) and say when to try again."""
        result = await self.store.release(action_id, claim_id)
        decision(action_id, tool.name, "released", NOT_SENT, result=result)
        where = address(tool)       # the caller and the refused log line name the tool and where it is
        never = f"the request to {tool.name!r} at {where} was never sent ({outcome.message})"
        named = {"tool": tool.name, "downstream": where}
        if result == "ready":
            self.audit.event(action_id, "released", reason="DOWNSTREAM_NOT_SENT")
            raise Unavailable("DOWNSTREAM_NOT_SENT", f"{never}; nothing reached the downstream and the card is "
                              "ready again: confirm the same token later", metadata=named,
                              retry_after=NOT_SENT_RETRY_AFTER)
        if result == "expired":
            self.audit.event(action_id, "released", reason="DOWNSTREAM_NOT_SENT", expired=True)
            raise Unavailable("DOWNSTREAM_NOT_SENT", f"{never}, and the card expired meanwhile: nothing reached "
                              "the downstream; ask for a new card", metadata=named)
        found = await self.store.peek(action_id)      # a reconciler holds it: where it stands now
        if not isinstance(found, RunRecord):
            raise Unavailable("DOWNSTREAM_NOT_SENT", never, metadata=named)
        return open_action(self.keyring, action_id, found, replayed=True)

    def _recheck(self, registry: Registry, context: common_pb2.CallContext, card: Card) -> Tool | FailedPrecondition:
        """Policy again, against the registry in force at claim time (DESIGN §5)."""
        changed = FailedPrecondition("POLICY_CHANGED", "the registry changed since the card was issued; "
                                     "the action was not executed")
        try:
            allowed = policy.authorize(registry, context, card.tool, card.arguments, policy.Phase.EXECUTE,
                                       claimed=True)
        except CountersignError as exc:
            changed.message = f"{changed.message} ({exc.reason})"
            return changed
        if isinstance(allowed, Capability) or not allowed.tool.is_write:
            return changed
        tool = allowed.tool
        if card.policy_version != registry.policy_version and (
            (tool.risk, tool.confirmation, tool.capability) != (card.risk, card.confirmation, card.capability)
        ):
            return changed
        return tool

    async def settle(self, action_id: str, kid: str, claim_id: str, action: common_pb2.Action,
                     state: str = "") -> None:
        """Record an outcome as the holder of claim_id (the executor's, or a reconciler's)."""
        await self._settle(action_id, kid, claim_id, action, state)

    async def _settle(self, action_id: str, kid: str, claim_id: str, action: common_pb2.Action,
                      state: str = "") -> None:
        # A record naming a key this sidecar does not list was changed by hand (the token's key is listed):
        # its refusal is sealed with the active key, and readers find the record tampered either way.
        kid = kid if kid in self.keyring.keys else self.keyring.active
        out, omac = seal_action(self.keyring, kid, action)
        state = state or ("unknown" if action.state == common_pb2.ACTION_STATE_UNKNOWN else "settled")
        self.audit.event(action_id, "settled", state=states.name(action.state),
                         reason=action.error.reason, resource_id=action.receipt.resource_id,
                         outcome_hmac=self.keyring.digest("outcome", out),
                         by=(claim_id[:1] == "r" and "reconciler") or "executor")
        receipt = "SUCCEEDED" if action.receipt.status == common_pb2.RECEIPT_STATUS_SUCCEEDED else ""
        args = (action_id, claim_id, state, out, omac, action.error.reason, receipt, self.timing.replay_ms)
        if state == "unknown":   # only what may need reconciling is indexed; a settled Confirm costs nothing
            self._index(action_id, int(self.clock() * 1000))
        try:
            with self.metrics.timed("settle"):
                result = await self.store.settle(*args)
        except Unavailable:   # the store is away, or too few replicas acknowledged the settle
            # The downstream's answer is the truth the caller gets; record it when the store is back.
            task = asyncio.ensure_future(self._settle_later(args))
            self.background.add(task)
            task.add_done_callback(self.background.discard)
            return
        if result != "ok":
            log.warning(json.dumps({"event": "settle_lost", "action_id": action_id, "result": result}))

    def _index(self, action_id: str, due_ms: int | None) -> None:
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
        task = asyncio.ensure_future(write())
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    async def _settle_later(self, args: tuple[Any, ...]) -> None:
        delay = 0.05
        deadline = time.monotonic() + self.timing.replay_ms / 1000
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
