"""The path of one call, stage by stage (docs/design.md §3). No I/O of its own: stages and the store do it.

Invoke     registry -> policy -> (read: quota -> adapter now -> the turn's fact)
                               | (write: action id -> quota -> prepare -> preview -> card -> issue)
                               | (write a standing grant covers: ... -> prepare -> grant_use -> grant_run
                                  -> execute -> settle: the action, no card)
Confirm    claim (token, context may write, the approval verified, claim.lua) -> (won: execute -> settle)
                                                                                 | (else: replay / RUNNING)
Reject     token -> reject.lua
GetAction  the owned action -> its outcome, seen through its compensation
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable
from typing import Protocol

from countersign.adapters.base import Adapter, CallMeta, Kind, address
from countersign.audit import Audit
from countersign.audit.writer import Entry
from countersign.errors import CountersignError, FailedPrecondition, ResourceExhausted, Unavailable
from countersign.keyring import Keyring
from countersign.observability import tracing
from countersign.observability.logs import decision
from countersign.observability.metrics import Metrics
from countersign.path import cards, policy, prepare
from countersign.path.claim import Claims
from countersign.path.execute import Executor
from countersign.path.grants import Grant, Grants
from countersign.path.inverse import inverse_of, overlay
from countersign.path.quota import Quota
from countersign.path.receipts import open_action, seal_action
from countersign.path.settle import Timing
from countersign.path.turn import action_entry, fact_entry, read_summary, turn_key
from countersign.reasons import Reason
from countersign.registry import Capability, Registry, Tool
from countersign.store import Appended, CardRecord, Issued, Refused, Rejected, RunRecord, Won
from countersign.store.protocols import CardStore, GrantRunStore, RejectStore, TurnStore
from countersign.v1 import common_pb2, gateway_pb2

# json.dumps(value, ensure_ascii=False) builds this encoder on every call: a read's answer is encoded by one made once
_ANSWER = json.JSONEncoder(ensure_ascii=False).encode
_QUOTA_IDS = 10_000  # tenants' quota ids kept (path/quota.py's MAX_TENANTS): beyond it the cache starts again

_CAP_STATUS = {
    "enabled": common_pb2.CAPABILITY_STATUS_ENABLED,
    "planned": common_pb2.CAPABILITY_STATUS_PLANNED,
    "forbidden": common_pb2.CAPABILITY_STATUS_FORBIDDEN,
}


class PipelineStore(CardStore, GrantRunStore, RejectStore, TurnStore, Protocol):
    """What the pipeline itself does to the store (its stages have their own)."""


class Pipeline:
    def __init__(
        self,
        *,
        registry: Registry,
        store: PipelineStore,
        keyring: Keyring,
        adapters: dict[str, Adapter],
        quota: Quota,
        claims: Claims,
        executor: Executor,
        audit: Audit,
        metrics: Metrics,
        timing: Timing,
        confirm_ttl_ms: int,
        grants: Grants | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.registry, self.store, self.keyring, self.adapters = registry, store, keyring, adapters
        self.quota, self.claims, self.executor, self.audit = quota, claims, executor, audit
        self.metrics, self.timing, self.confirm_ttl_ms, self.clock = metrics, timing, confirm_ttl_ms, clock
        self.grants = grants
        self._quota_ids: dict[str, str] = {}  # tenant id -> its quota id (a keyed hash: the same for the process)

    # -- Invoke --------------------------------------------------------------------------------

    async def invoke(
        self, context: common_pb2.CallContext, tool_name: str, arguments_json: str
    ) -> gateway_pb2.InvokeResponse:
        registry = self.registry
        with self.metrics.timed("policy"):
            allowed = policy.authorize(registry, context, tool_name, arguments_json, policy.Phase.INVOKE)
        if isinstance(allowed, Capability):
            self.metrics.invocations.labels(self.metrics.tool(allowed.tool), "refusal", allowed.status).inc()
            decision("", allowed.tool, "refusal", allowed.status.upper())
            return gateway_pb2.InvokeResponse(
                refusal=gateway_pb2.Refusal(
                    capability_id=allowed.id,
                    status=_CAP_STATUS[allowed.status],  # type: ignore[arg-type]
                    guidance=allowed.guidance_for(context.locale),
                )
            )
        tool = allowed.tool
        tracing.annotate(tool=tool.name, capability=tool.capability, risk=tool.risk)
        meta = CallMeta(
            policy_version=registry.policy_version,
            tenant_id=context.tenant_id,
            actor_id=context.actor_id,
            subject_id=context.subject_id,
            locale=context.locale,
            trace_headers=tracing.outgoing_headers,
        )
        adapter = self.adapters[tool.adapter.kind]
        label = self.metrics.tool(tool.name)
        turn = turn_key(self.keyring, context)
        if not tool.is_write:
            await self._quota(context, ["r:" + turn])
            with self.metrics.timed("read"):
                outcome = await adapter.execute(tool, allowed.arguments, meta, self.timing.downstream_deadline)
            self.metrics.invocations.labels(label, "read", outcome.kind.value).inc()
            await self.store.remember(
                turn,
                fact_entry(tool.name, outcome.kind.value, read_summary(tool, outcome.body, outcome.message)),
                self.timing.replay_ttl_ms,
            )
            if outcome.kind is Kind.SUCCEEDED:
                try:
                    result = gateway_pb2.ToolResult(tool_name=tool.name, result_json=_ANSWER(outcome.body))
                except UnicodeEncodeError:  # a lone surrogate (JSON's \ud800) is no protobuf string: kept escaped
                    result = gateway_pb2.ToolResult(tool_name=tool.name, result_json=json.dumps(outcome.body))
                return gateway_pb2.InvokeResponse(result=result)
            if outcome.kind is Kind.FAILED and outcome.reason != Reason.NOT_SENT:
                raise FailedPrecondition(outcome.reason, outcome.message)
            where = address(tool)
            raise Unavailable(
                Reason.DOWNSTREAM_UNAVAILABLE,
                f"the read {tool.name!r} at {where} got no answer: {outcome.reason} ({outcome.message})",
                metadata={"tool": tool.name, "downstream": where},
            )

        scope = {"request": context.request_id, "session": context.session_id}.get(tool.intent_scope) or os.urandom(
            16
        ).hex()
        action_id = self.keyring.action_id(
            [*cards.owner(context), tool.intent_scope, scope, tool.name, allowed.arguments]
        )
        tracing.annotate(action_id=action_id)
        if tool.intent_scope != "none":
            existing = await self.store.peek(action_id)
            if existing is not None:
                if tool.intent_scope == "session":
                    # found from another turn, maybe: that turn's reply may speak of it (the guard reads the
                    # turn's actions); over the quota it is still answered, only not remembered
                    with contextlib.suppress(ResourceExhausted):
                        await self._quota(context, ["r:" + turn])
                        await self.store.remember(turn, action_entry(action_id), self.timing.replay_ttl_ms)
                return self._existing(action_id, existing, label)
        tenant = await self._quota(context, ["a:" + action_id, "r:" + turn])
        try:
            with self.metrics.timed("prepare"):
                prepared = await prepare.prepare(
                    adapter, tool, allowed.arguments, meta, self.timing.downstream_deadline
                )
            preview = prepare.preview(tool, prepared, action_id, context.locale)
            now_ms = int(self.clock() * 1000)

            def seal(grant_id: str = "") -> CardRecord:
                return cards.seal(
                    self.keyring,
                    action_id=action_id,
                    binding=self.keyring.binding(self.keyring.active, cards.owner(context)),
                    tool=tool,
                    policy_version=registry.policy_version,
                    arguments=prepared.arguments,
                    resource_version=prepared.resource_version,
                    preview=preview,
                    now_ms=now_ms,
                    ttl_ms=self.confirm_ttl_ms,
                    tenant=context.tenant_id,
                    extra={"grant": grant_id} if grant_id else None,
                )

            record = seal()  # a card that cannot be sealed (PREPARED_ARGS_INVALID) takes no grant's use
        except CountersignError:
            with contextlib.suppress(CountersignError):  # the refusal is the answer, whatever Redis does now
                await self.quota.forget(tenant, ["a:" + action_id])  # no card: the action keeps nothing
            raise
        # a standing grant of the caller may cover exactly these prepared arguments: one use taken (step one)
        grant = await self.grants.cover(context, tool, prepared.arguments, action_id) if self.grants else None
        if grant is not None:
            record = seal(grant.grant_id)
            return await self._under_grant(context, tool, action_id, record, grant, allowed.canonical_args, turn)
        # the issued event travels with the card (issue.lua), chained to where this process last saw the chain end
        # (for a new action, nowhere) or where issue.lua says it ends
        args_hmac = self.keyring.digest("args", allowed.canonical_args)
        issued = self.audit.entry(
            "issued",
            tool=tool.name,
            capability=tool.capability,
            policy_version=registry.policy_version,
            args_hmac=args_hmac,
        )
        with self.metrics.timed("issue"):
            found = await self._issue(action_id, record, issued)
        if not isinstance(found, Issued):
            return self._existing(action_id, found, label)
        self.metrics.invocations.labels(label, "write", "card").inc()
        decision(action_id, tool.name, "card", "CONFIRMATION_REQUIRED", args_hmac=args_hmac)
        await self.store.remember(turn, action_entry(action_id), self.timing.replay_ttl_ms)
        card = cards.open_card(self.keyring, action_id, record)
        self.executor.opened.keep(record, card)  # for its claim: the same bytes are not opened twice
        return gateway_pb2.InvokeResponse(confirmation=cards.to_proto(self.keyring, card))

    async def _issue(self, action_id: str, record: CardRecord, issued: Entry) -> Issued | CardRecord | RunRecord:
        """issue.lua with the issued event, chained again as long as the chain moves (8 times; then the card is
        issued without it and the writer appends it)."""
        at = self.audit.head(action_id)
        for _ in range(8):
            chain = self.audit.chained(action_id, at, [issued])
            found = await self.store.issue(action_id, record, self.confirm_ttl_ms, chain)
            if not isinstance(found, Appended):
                if isinstance(found, Issued):
                    self.audit.remember(action_id, chain.head)
                return found
            at = (found.seq, found.head)
        found = await self.store.issue(action_id, record, self.confirm_ttl_ms)
        assert not isinstance(found, Appended)  # sent without an event: issue.lua has no chain to find moved
        if isinstance(found, Issued):
            self.audit.later(action_id, issued)
        return found

    async def _under_grant(
        self,
        context: common_pb2.CallContext,
        tool: Tool,
        action_id: str,
        record: CardRecord,
        grant: Grant,
        canonical_args: bytes,
        turn: str,
    ) -> gateway_pb2.InvokeResponse:
        """Step two of a write under a grant: issued directly as running (grant_run.lua), then executed and settled
        like any claimed action. The action's record when it exists (replay, RUNNING); the card that waits for
        the user when one was issued before the grant covered the call (the use taken stays taken)."""
        label = self.metrics.tool(tool.name)
        claim_id = os.urandom(12).hex()
        with self.metrics.timed("claim"):
            found = await self.store.grant_run(action_id, record, claim_id, self.timing.lease_ms, grant.grant_id)
        if not isinstance(found, Won):
            return self._existing(action_id, found, label)
        args_hmac = self.keyring.digest("args", canonical_args)
        self.audit.event(
            action_id,
            "issued",
            tool=tool.name,
            capability=tool.capability,
            policy_version=self.registry.policy_version,
            args_hmac=args_hmac,
            grant=grant.grant_id,
        )
        self.metrics.invocations.labels(label, "write", "grant").inc()
        decision(action_id, tool.name, "grant", "GRANT_COVERED", args_hmac=args_hmac, grant=grant.grant_id)
        await self.store.remember(turn, action_entry(action_id), self.timing.replay_ttl_ms)
        action = await self.executor.run(self.registry, context, action_id, claim_id, found.card, grant=grant.grant_id)
        return gateway_pb2.InvokeResponse(action=action)

    async def _quota(self, context: common_pb2.CallContext, members: list[str]) -> str:
        """Count what this call would keep against the tenant's cap, before anything is stored (QUOTA_EXCEEDED).
        Returns the tenant's quota id."""
        tenant = self._quota_ids.get(context.tenant_id)
        if tenant is None:
            if len(self._quota_ids) >= _QUOTA_IDS:
                self._quota_ids.clear()
            tenant = self._quota_ids[context.tenant_id] = self.keyring.derived_id("quota", context.tenant_id)
        await self.quota.take(tenant, members)
        return tenant

    def _existing(self, action_id: str, found: CardRecord | RunRecord, label: str) -> gateway_pb2.InvokeResponse:
        """The same call in the same turn: the same card, or the settled outcome."""
        if isinstance(found, CardRecord):
            self.metrics.invocations.labels(label, "write", "same_card").inc()
            return gateway_pb2.InvokeResponse(
                confirmation=cards.to_proto(self.keyring, cards.open_card(self.keyring, action_id, found))
            )
        self.metrics.invocations.labels(label, "write", "replay").inc()
        self.metrics.replay_hits.labels(label, "invoke").inc()
        return gateway_pb2.InvokeResponse(replay=open_action(self.keyring, action_id, found, replayed=True))

    # -- Confirm -------------------------------------------------------------------------------

    async def confirm(
        self, context: common_pb2.CallContext, token: str, wait_ms: int, approval: str = ""
    ) -> common_pb2.Action:
        registry = self.registry
        claimed = await self.claims.claim(registry, context, token, wait_ms, approval)
        if isinstance(claimed, common_pb2.Action):
            return claimed
        return await self.executor.run(
            registry, context, claimed.action_id, claimed.claim_id, claimed.card, claimed.approval, claimed.chain_at
        )

    # -- Reject / GetAction --------------------------------------------------------------------

    async def reject(self, context: common_pb2.CallContext, token: str) -> common_pb2.Action:
        kid, action_id = self.keyring.parse_token(token)
        policy.check_context(context)
        binding = self.keyring.binding(kid, cards.owner(context))
        found = await self.store.peek(action_id)
        tool = found.tool if found is not None else ""
        action = common_pb2.Action(action_id=action_id, state=common_pb2.ACTION_STATE_REJECTED, tool_name=tool)
        action.error.reason, action.error.message = Reason.REJECTED, "the user declined the confirmation"
        out, omac = seal_action(self.keyring, kid, action)
        # the rejected event travels in reject.lua, chained to where this process last saw the chain end (the card
        # it issued), or where reject.lua says it ends
        rejected = [self.audit.entry("rejected", tool=tool, outcome_hmac=self.keyring.digest("outcome", out))]
        at = self.audit.head(action_id)
        for _ in range(8):
            chain = self.audit.chained(action_id, at, rejected)
            result = await self.store.reject(action_id, binding, out, omac, self.timing.replay_ttl_ms, chain)
            if not isinstance(result, Appended):
                break
            at = (result.seq, result.head)
        else:  # the chain kept moving: reject without the event, and let the writer append it
            result = await self.store.reject(action_id, binding, out, omac, self.timing.replay_ttl_ms)
            if isinstance(result, Rejected):
                self.audit.later(action_id, rejected[0])
                return action
        if isinstance(result, Rejected):
            self.audit.remember(action_id, chain.head)
            return action
        assert not isinstance(result, Appended)  # sent without an event: reject.lua has no chain to find moved
        if isinstance(result, Refused):
            raise cards.refusal_error(result)
        return open_action(self.keyring, action_id, result, replayed=True)

    async def get_action(self, context: common_pb2.CallContext, action_id: str, wait_ms: int = 0) -> common_pb2.Action:
        """The owned action as it stands; a RUNNING one waited for up to wait_ms (the MCP front door's retry of a
        call another retry is executing answers with the receipt, as a waiting Confirm does)."""
        found = await cards.owned_action(self.store, self.keyring, context, action_id, admin_modes=cards.ADMIN_READ)
        if isinstance(found, RunRecord) and found.state == "running" and wait_ms > 0:
            found = await self.claims.settled(action_id, found, wait_ms)
        if isinstance(found, CardRecord):
            return common_pb2.Action(action_id=action_id, state=common_pb2.ACTION_STATE_READY, tool_name=found.tool)
        action = open_action(self.keyring, action_id, found, replayed=False)
        if action.state == common_pb2.ACTION_STATE_SUCCEEDED:
            action = overlay(action, await inverse_of(self.store, self.keyring, action_id))
        return action
