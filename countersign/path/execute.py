"""Execute a claimed action: verify the card, re-check policy, call the adapter once, settle.

Everything here runs only for the single caller whose claim won (I3), and is shielded from
that caller's cancellation: once the request may have reached the downstream, the answer is
recorded whatever happens to the RPC that started it.

A request that was never sent (the downstream could not be reached at all) changes nothing, so the
claim is given back and the card is READY again (store/lua/release.lua): the caller gets UNAVAILABLE
DOWNSTREAM_NOT_SENT with a RetryInfo, and the same token confirms later, once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from countersign.adapters.base import Adapter, CallMeta, Kind, Outcome, address
from countersign.audit import Audit
from countersign.errors import CountersignError, DataLoss, FailedPrecondition, Unavailable
from countersign.keyring import Keyring
from countersign.observability import tracing
from countersign.observability.logs import decision
from countersign.observability.metrics import Metrics
from countersign.path import policy
from countersign.path.approval import Checked, claimed_as_sealed, evidence_event, evidence_proto
from countersign.path.cards import Card, Opened, open_card
from countersign.path.receipts import open_action, refused_action, to_action, with_approval
from countersign.path.settle import ClaimedEvent, Settler, Timing, shielded
from countersign.reasons import Reason
from countersign.registry import Capability, Registry, Tool
from countersign.store import CardRecord, RunRecord
from countersign.store.protocols import ReleaseStore
from countersign.v1 import common_pb2

NOT_SENT_RETRY_AFTER = 1.0  # seconds: RetryInfo of DOWNSTREAM_NOT_SENT (a refused connection is often brief)


class Executor:
    """claim won -> card verified -> policy re-checked -> one adapter call -> settle."""

    def __init__(
        self,
        store: ReleaseStore,
        keyring: Keyring,
        adapters: dict[str, Adapter],
        settler: Settler,
        timing: Timing,
        metrics: Metrics,
        audit: Audit,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store, self.keyring, self.adapters, self.settler = store, keyring, adapters, settler
        self.timing, self.metrics, self.audit, self.clock = timing, metrics, audit, clock
        self.background: set[asyncio.Task[Any]] = set()
        self.opened = Opened()  # the cards Invoke sealed here, for their claim (path/cards.py)

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    async def run(
        self,
        registry: Registry,
        context: common_pb2.CallContext,
        action_id: str,
        claim_id: str,
        record: CardRecord,
        approval: Checked | None = None,
        chain_at: tuple[int, str] | None = None,
        **claimed: str,
    ) -> common_pb2.Action:
        """Shielded from the caller: the work of a won claim always ends in a settle attempt. ``approval``: the
        user's approval the claim was won with (kept in the receipt and the audit events); ``chain_at``: where
        claim.lua saw the action's audit chain end (the claimed event then travels with the settle; None: it is
        written by the audit writer now); ``claimed``: more fields of the claimed event (the grant it runs
        under)."""
        work = self._run(registry, context, action_id, claim_id, record, approval, chain_at, claimed)
        return await shielded(self.background, work)

    async def _run(
        self,
        registry: Registry,
        context: common_pb2.CallContext,
        action_id: str,
        claim_id: str,
        record: CardRecord,
        approval: Checked | None,
        chain_at: tuple[int, str] | None,
        claimed: dict[str, str],
    ) -> common_pb2.Action:
        evidence = evidence_proto(approval.evidence) if approval is not None and approval.evidence else None
        fields: dict[str, object] = {**claimed, **({"approval": evidence_event(evidence)} if evidence else {})}
        held = None if chain_at is None else self.settler.claimed(action_id, chain_at, tool=record.tool, **fields)
        if held is None:
            self.audit.event(action_id, "claimed", tool=record.tool, **fields)
        try:
            return await self._execute(registry, context, action_id, claim_id, record, approval, evidence, held)
        finally:
            if held is not None:
                held.alone()  # not taken by a settle (given back, or an error): written now, before what follows

    async def _execute(
        self,
        registry: Registry,
        context: common_pb2.CallContext,
        action_id: str,
        claim_id: str,
        record: CardRecord,
        approval: Checked | None,
        evidence: common_pb2.ApprovalEvidence | None,
        held: ClaimedEvent | None,
    ) -> common_pb2.Action:
        try:
            card = open_card(self.keyring, action_id, record, self.opened)
            # a write run under a standing grant was approved by the grant (signed by an issuer, verified at
            # CreateGrant, its use taken by grant_use.lua); its MAC'd card names it. Any other claim must carry
            # the approval its card demands.
            mismatch = "" if card.grant else claimed_as_sealed(card.approval, card.approval_digest, card.risk, approval)
            if mismatch:  # a hash field claim.lua reads was changed in Redis: never run, whatever it says
                raise DataLoss(Reason.CONFIRMATION_TAMPERED, f"{mismatch}: the stored card was changed; not executed")
        except DataLoss as exc:
            self.metrics.claims.labels(self.metrics.tool(record.tool), "tampered").inc()
            refused = refused_action(action_id, record.tool, exc.reason, exc.message, self._now_ms())
            await self.settler.settle(action_id, record.kid, claim_id, with_approval(refused, evidence), claimed=held)
            raise
        tracing.annotate(action_id=action_id, tool=card.tool, capability=card.capability, risk=card.risk)
        with self.metrics.timed("policy"):
            tool = self._recheck(registry, context, card, approved=evidence is not None or bool(card.grant))
        if isinstance(tool, FailedPrecondition):
            refused = refused_action(action_id, card.tool, tool.reason, tool.message, self._now_ms())
            refused.receipt.grant_id = card.grant
            await self.settler.settle(action_id, card.kid, claim_id, with_approval(refused, evidence), claimed=held)
            record_settled(self.audit, self.metrics, card, refused)
            raise tool
        # the prepared version travels as If-Match: a resource changed since the card was shown is not written
        meta = CallMeta(
            idempotency_key=action_id,
            attempt=1,
            policy_version=card.policy_version,
            tenant_id=context.tenant_id,
            actor_id=context.actor_id,
            subject_id=context.subject_id,
            locale=context.locale,
            if_match=card.resource_version,
            trace_headers=tracing.outgoing_headers,
        )
        call = tool.adapter.execute
        with (
            self.metrics.timed("execute", span=False),
            tracing.client_span(
                tool.name,
                tool.adapter.kind,
                call.method if call else "Execute",
                call.url if call else tool.adapter.target,
            ) as span,
        ):
            start = time.perf_counter()
            outcome = await self.adapters[tool.adapter.kind].execute(
                tool, card.arguments, meta, self.timing.downstream_deadline
            )
            elapsed = time.perf_counter() - start
            span.set_attribute("countersign.outcome", outcome.kind.value)
            tracing.end_client_span(span, tool.adapter.kind, outcome.status, outcome.reason)
        label = self.metrics.tool(tool.name)
        self.metrics.downstream.labels(label, tool.adapter.kind).observe(elapsed)
        not_sent = outcome.kind is Kind.FAILED and outcome.reason == Reason.NOT_SENT
        self.metrics.executions.labels(label, "not_sent" if not_sent else outcome.kind.value).inc()
        tracing.annotate(outcome=outcome.kind.value, replayed=False)
        if not_sent:
            if held is not None:
                held.alone()  # claimed, then released: in that order
            return await self._give_back(action_id, claim_id, tool, outcome)
        action = with_approval(to_action(action_id, tool, card, outcome, self._now_ms()), evidence)
        await self.settler.settle(action_id, card.kid, claim_id, action, claimed=held)
        record_settled(self.audit, self.metrics, card, action)
        decision(
            action_id, tool.name, "executed", outcome.reason or outcome.kind.value.upper(), outcome=outcome.kind.value
        )
        return action

    async def _give_back(self, action_id: str, claim_id: str, tool: Tool, outcome: Outcome) -> common_pb2.Action:
        """Nothing reached the downstream: put the card back (READY, same token) and say when to try again."""
        result = await self.store.release(action_id, claim_id)
        decision(action_id, tool.name, "released", Reason.NOT_SENT, result=result)
        where = address(tool)  # the caller and the refused log line name the tool and where it is
        never = f"the request to {tool.name!r} at {where} was never sent ({outcome.message})"
        named = {"tool": tool.name, "downstream": where}
        if result == "ready":
            self.audit.event(action_id, "released", reason=Reason.DOWNSTREAM_NOT_SENT)
            raise Unavailable(
                Reason.DOWNSTREAM_NOT_SENT,
                f"{never}; nothing reached the downstream and the card is ready again: confirm the same token later",
                metadata=named,
                retry_after=NOT_SENT_RETRY_AFTER,
            )
        if result == "expired":
            self.audit.event(action_id, "released", reason=Reason.DOWNSTREAM_NOT_SENT, expired=True)
            raise Unavailable(
                Reason.DOWNSTREAM_NOT_SENT,
                f"{never}, and the card expired meanwhile: nothing reached the downstream; ask for a new card",
                metadata=named,
            )
        found = await self.store.peek(action_id)  # a reconciler holds it: where it stands now
        if not isinstance(found, RunRecord):
            raise Unavailable(Reason.DOWNSTREAM_NOT_SENT, never, metadata=named)
        return open_action(self.keyring, action_id, found, replayed=True)

    def _recheck(
        self, registry: Registry, context: common_pb2.CallContext, card: Card, *, approved: bool
    ) -> Tool | FailedPrecondition:
        """Policy again, against the registry in force at claim time (docs/design.md §5): and a tool that needs a
        signed approval now runs only with one (claim.lua refuses that first, leaving the card READY; this is the
        second line, for a registry that changed between the claim and here)."""
        try:
            # the context is the one the claim checked (check_context), or Invoke's under a grant (authorize)
            allowed = policy.authorize(
                registry, context, card.tool, card.arguments, policy.Phase.EXECUTE, claimed=True, context_checked=True
            )
        except CountersignError as exc:
            return _policy_changed(f" ({exc.reason})")
        if isinstance(allowed, Capability) or not allowed.tool.is_write:
            return _policy_changed()
        tool = allowed.tool
        if card.policy_version != registry.policy_version and (
            (tool.risk, tool.confirmation, tool.capability) != (card.risk, card.confirmation, card.capability)
        ):
            return _policy_changed()
        if tool.approval == "signed" and not approved:
            return _policy_changed(" (it needs the user's signed approval now)")
        return tool


def _policy_changed(detail: str = "") -> FailedPrecondition:
    """POLICY_CHANGED (made only when the re-check refuses: an error object costs ~7k instructions)."""
    return FailedPrecondition(
        Reason.POLICY_CHANGED, f"the registry changed since the card was issued; the action was not executed{detail}"
    )


def record_settled(audit: Audit, metrics: Metrics, card: Card, action: common_pb2.Action) -> None:
    """An inverse settled (its card was confirmed and ran): the original's chain records it, once per run."""
    if not card.compensates:
        return
    outcome = {
        common_pb2.ACTION_STATE_SUCCEEDED: "compensated",
        common_pb2.ACTION_STATE_UNKNOWN: "unknown",
    }.get(action.state, "failed")
    metrics.compensations.labels(metrics.tool(card.compensates_tool), outcome).inc()
    audit.event(card.compensates, "compensated", inverse=action.action_id, outcome=outcome, reason=action.error.reason)
