"""The path of one call, stage by stage (DESIGN §3). No I/O of its own: stages and the store do it.

    Invoke   registry -> policy -> (read: adapter now) | (write: action id -> prepare -> preview -> issue)
    Confirm  token -> context may write -> claim -> (won: execute) | (else: replay / RUNNING)
    Reject   token -> reject
    GetAction          peek
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable

from countersign.adapters.base import Adapter, CallMeta, Kind, address
from countersign.errors import (
    CountersignError,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    Unavailable,
)
from countersign.guard import ReplyGuard
from countersign.keyring import Keyring, is_action_id
from countersign.observability import tracing
from countersign.observability.logs import decision
from countersign.observability.metrics import Metrics
from countersign.registry import Capability, Registry
from countersign.sidecar import cards, policy, prepare
from countersign.sidecar.audit import Audit
from countersign.sidecar.compensate import Compensator, overlay
from countersign.sidecar.continuations import Continuations, action_entry, fact_entry, read_summary, request_key
from countersign.sidecar.execute import Executor, Timing, open_action, seal_action
from countersign.sidecar.quota import Quota
from countersign.sidecar.reconcile import Reconciler
from countersign.sidecar.store import CardRecord, Refused, RunRecord, Store
from countersign.v1 import common_pb2, gateway_pb2

_CAP_STATUS = {"enabled": common_pb2.CAPABILITY_STATUS_ENABLED, "planned": common_pb2.CAPABILITY_STATUS_PLANNED,
               "forbidden": common_pb2.CAPABILITY_STATUS_FORBIDDEN}


class Pipeline:
    def __init__(self, *, registry: Registry, store: Store, keyring: Keyring, adapters: dict[str, Adapter],
                 timing: Timing, confirm_ttl_ms: int, max_wait: float, metrics: Metrics, guard: ReplyGuard,
                 continuation_lease_ms: int, reconcile_window_ms: int = 600_000, audit_ttl_ms: int = 30 * 86_400_000,
                 tenant_quota: int = 100_000, clock: Callable[[], float] = time.time) -> None:
        self.registry = registry
        self.quota = Quota(store, tenant_quota, timing.replay_ms)
        self.store, self.keyring, self.adapters = store, keyring, adapters
        self.timing, self.confirm_ttl_ms, self.max_wait = timing, confirm_ttl_ms, max_wait
        self.metrics, self.clock = metrics, clock
        self.audit = Audit(store, keyring, metrics, audit_ttl_ms)
        self.executor = Executor(store, keyring, adapters, timing, metrics, self.audit, clock)
        self.reconciler = Reconciler(store=store, keyring=keyring, adapters=adapters, executor=self.executor,
                                     registry=lambda: self.registry, metrics=metrics, audit=self.audit,
                                     work_lease_ms=timing.lease_ms,
                                     window_ms=reconcile_window_ms, lookup_deadline=timing.downstream_deadline)
        self.compensator = Compensator(store=store, keyring=keyring, executor=self.executor,
                                       registry=lambda: self.registry, timing=timing, metrics=metrics,
                                       audit=self.audit, clock=clock)
        self.continuations = Continuations(store=store, keyring=keyring, registry=lambda: self.registry, guard=guard,
                                           audit=self.audit,
                                           lease_ms=continuation_lease_ms, ttl_ms=timing.replay_ms, metrics=metrics)

    # -- Invoke --------------------------------------------------------------------------------

    async def invoke(self, context: common_pb2.CallContext, tool_name: str,
                     arguments_json: str) -> gateway_pb2.InvokeResponse:
        registry = self.registry
        with self.metrics.timed("policy"):
            allowed = policy.authorize(registry, context, tool_name, arguments_json, policy.Phase.INVOKE)
        if isinstance(allowed, Capability):
            self.metrics.invocations.labels(self.metrics.tool(allowed.tool), "refusal", allowed.status).inc()
            decision("", allowed.tool, "refusal", allowed.status.upper())
            return gateway_pb2.InvokeResponse(refusal=gateway_pb2.Refusal(
                capability_id=allowed.id, status=_CAP_STATUS[allowed.status],  # type: ignore[arg-type]
                guidance=allowed.guidance_for(context.locale)))
        tool = allowed.tool
        tracing.annotate(tool=tool.name, capability=tool.capability, risk=tool.risk)
        meta = CallMeta(policy_version=registry.policy_version, tenant_id=context.tenant_id,
                        actor_id=context.actor_id, subject_id=context.subject_id, locale=context.locale,
                        trace_headers=tracing.outgoing_headers)
        adapter = self.adapters[tool.adapter.kind]
        label = self.metrics.tool(tool.name)
        turn = request_key(self.keyring, context)
        if not tool.is_write:
            await self._quota(context, ["r:" + turn])
            with self.metrics.timed("read"):
                outcome = await adapter.execute(tool, allowed.arguments, meta, self.timing.downstream_deadline)
            self.metrics.invocations.labels(label, "read", outcome.kind.value).inc()
            await self.store.remember(turn, fact_entry(
                tool.name, outcome.kind.value, read_summary(tool, outcome.body, outcome.message)),
                self.timing.replay_ms)
            if outcome.kind is Kind.SUCCEEDED:
                return gateway_pb2.InvokeResponse(result=gateway_pb2.ToolResult(
                    tool_name=tool.name, result_json=json.dumps(outcome.body, ensure_ascii=False)))
            if outcome.kind is Kind.FAILED and outcome.reason != "NOT_SENT":
                raise FailedPrecondition(outcome.reason, outcome.message)
            where = address(tool)
            raise Unavailable("DOWNSTREAM_UNAVAILABLE", f"the read {tool.name!r} at {where} got no answer: "
                              f"{outcome.reason} ({outcome.message})", metadata={"tool": tool.name,
                                                                                 "downstream": where})

        scope = {"request": context.request_id, "session": context.session_id}.get(
            tool.intent_scope) or os.urandom(16).hex()
        action_id = self.keyring.action_id(
            [*cards.owner(context), tool.intent_scope, scope, tool.name, allowed.arguments])
        tracing.annotate(action_id=action_id)
        if tool.intent_scope != "none":
            existing = await self.store.peek(action_id)
            if existing is not None:
                if tool.intent_scope == "session":
                    # found from another turn, maybe: that turn's reply may speak of it (the guard reads the
                    # turn's actions); over the quota it is still answered, only not remembered
                    with contextlib.suppress(ResourceExhausted):
                        await self._quota(context, ["r:" + turn])
                        await self.store.remember(turn, action_entry(action_id), self.timing.replay_ms)
                return self._existing(action_id, existing, label)
        tenant = await self._quota(context, ["a:" + action_id, "r:" + turn])
        try:
            with self.metrics.timed("prepare"):
                prepared = await prepare.prepare(adapter, tool, allowed.arguments, meta,
                                                 self.timing.downstream_deadline)
        except CountersignError:
            with contextlib.suppress(CountersignError):   # the refusal is the answer, whatever Redis does now
                await self.quota.forget(tenant, ["a:" + action_id])    # no card: the action keeps nothing
            raise
        record = cards.seal(
            self.keyring, action_id=action_id,
            binding=self.keyring.binding(self.keyring.active, cards.owner(context)), tool=tool,
            policy_version=registry.policy_version, arguments=prepared.arguments,
            resource_version=prepared.resource_version,
            preview=prepare.preview(tool, prepared, action_id),
            now_ms=int(self.clock() * 1000), ttl_ms=self.confirm_ttl_ms)
        with self.metrics.timed("issue"):
            found = await self.store.issue(action_id, record, self.confirm_ttl_ms)
        if found is not None:
            return self._existing(action_id, found, label)
        # the event before any other await: a card whose Invoke fails or is cancelled now still has it
        args_hmac = self.keyring.digest("args", allowed.canonical_args)
        self.audit.event(action_id, "issued", tool=tool.name, capability=tool.capability,
                         policy_version=registry.policy_version, args_hmac=args_hmac)
        self.metrics.invocations.labels(label, "write", "card").inc()
        decision(action_id, tool.name, "card", "CONFIRMATION_REQUIRED", args_hmac=args_hmac)
        await self.store.remember(turn, action_entry(action_id), self.timing.replay_ms)
        return gateway_pb2.InvokeResponse(confirmation=cards.to_proto(
            self.keyring, cards.open_card(self.keyring, action_id, record)))

    async def _quota(self, context: common_pb2.CallContext, members: list[str]) -> str:
        """Count what this call would keep against the tenant's cap, before anything is stored (QUOTA_EXCEEDED).
        Returns the tenant's quota id."""
        tenant = self.keyring.derived_id("quota", context.tenant_id)
        await self.quota.take(tenant, members)
        return tenant

    def _existing(self, action_id: str, found: CardRecord | RunRecord, label: str) -> gateway_pb2.InvokeResponse:
        """The same call in the same turn: the same card, or the settled outcome."""
        if isinstance(found, CardRecord):
            self.metrics.invocations.labels(label, "write", "same_card").inc()
            return gateway_pb2.InvokeResponse(confirmation=cards.to_proto(
                self.keyring, cards.open_card(self.keyring, action_id, found)))
        self.metrics.invocations.labels(label, "write", "replay").inc()
        self.metrics.replay_hits.labels(label, "invoke").inc()
        return gateway_pb2.InvokeResponse(replay=open_action(self.keyring, action_id, found, replayed=True))

    # -- Confirm -------------------------------------------------------------------------------

    async def confirm(self, context: common_pb2.CallContext, token: str, wait_ms: int) -> common_pb2.Action:
        kid, action_id = self.keyring.parse_token(token)          # constant time, before Redis
        policy.check_context(context)
        policy.may_write_now(context)                              # refused here: the card stays READY
        registry = self.registry
        binding = self.keyring.binding(kid, cards.owner(context))
        claim_id = os.urandom(12).hex()
        with self.metrics.timed("claim"):
            found = await self.store.claim(action_id, binding, registry.denied_tools(context.role), claim_id,
                                           self.timing.lease_ms)
        tracing.annotate(action_id=action_id)
        if isinstance(found, Refused):
            self.metrics.claims.labels("other", found.why).inc()
            raise _refusal(found)
        if isinstance(found, RunRecord):
            label = self.metrics.tool(found.tool)
            tracing.annotate(tool=found.tool, replayed=True)
            self.metrics.claims.labels(label, "running" if found.state == "running" else "replayed").inc()
            found = await self.store.wait_settled(action_id, found, min(wait_ms / 1000, self.max_wait))
            action = open_action(self.keyring, action_id, found, replayed=True)
            if found.state != "running":
                self.metrics.replay_hits.labels(label, "confirm").inc()
            decision(action_id, found.tool, "replayed", found.reason or found.state.upper())
            return action
        self.metrics.claims.labels(self.metrics.tool(found.tool), "won").inc()
        return await self.executor.run(registry, context, action_id, claim_id, found)

    # -- Reject / GetAction --------------------------------------------------------------------

    async def reject(self, context: common_pb2.CallContext, token: str) -> common_pb2.Action:
        kid, action_id = self.keyring.parse_token(token)
        policy.check_context(context)
        binding = self.keyring.binding(kid, cards.owner(context))
        found = await self.store.peek(action_id)
        tool = found.tool if found is not None else ""
        action = common_pb2.Action(action_id=action_id, state=common_pb2.ACTION_STATE_REJECTED, tool_name=tool)
        action.error.reason, action.error.message = "REJECTED", "the user declined the confirmation"
        out, omac = seal_action(self.keyring, kid, action)
        result = await self.store.reject(action_id, binding, out, omac, self.timing.replay_ms)
        if result is None:
            self.audit.event(action_id, "rejected", tool=tool, outcome_hmac=self.keyring.digest("outcome", out))
            return action
        if isinstance(result, Refused):
            raise _refusal(result)
        return open_action(self.keyring, action_id, result, replayed=True)

    async def get_action(self, context: common_pb2.CallContext, action_id: str) -> common_pb2.Action:
        policy.check_context(context)
        if not is_action_id(action_id):
            raise InvalidArgument("REQUEST_INVALID", "action_id must be 32 lower-case hex characters")
        found = await self.store.peek(action_id)
        if found is None:
            raise NotFound("ACTION_NOT_FOUND", "no such action: never issued, or its card expired")
        cards.require_owner(self.keyring, action_id, found, context)
        if isinstance(found, CardRecord):
            return common_pb2.Action(action_id=action_id, state=common_pb2.ACTION_STATE_READY, tool_name=found.tool)
        action = open_action(self.keyring, action_id, found, replayed=False)
        if action.state == common_pb2.ACTION_STATE_SUCCEEDED:
            action = overlay(action, await self.compensator.inverse_of(action_id))
        return action


def _refusal(refused: Refused) -> Exception:
    if refused.why == "expired":
        return NotFound("CONFIRMATION_EXPIRED", "the confirmation expired or was never issued")
    if refused.why == "role":
        return PermissionDenied("ROLE_NOT_ALLOWED", f"your role may not run {refused.tool!r}; the card is "
                                "still waiting")
    return PermissionDenied("CONFIRMATION_BINDING_MISMATCH", "this confirmation belongs to another owner "
                            "or session")
