"""Compensation: undo a SUCCEEDED action by the inverse its tool declares, exactly once.

The inverse is an action of its own, with an id derived from the original (so a second Compensate
lands on the same one) and its own idempotency key. It is issued and claimed through the same
scripts as any write, passes the same policy (the caller must be allowed to run the inverse, under
the registry in force), and its outcome is reconciled like any action when it is UNKNOWN.

The original's state is derived from the inverse's record, never stored twice (path/inverse.py).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any, Protocol

from countersign.adapters.base import deadline
from countersign.audit import Audit
from countersign.errors import FailedPrecondition, InvalidArgument
from countersign.keyring import Keyring
from countersign.observability.logs import decision
from countersign.observability.metrics import Metrics
from countersign.path import cards, policy
from countersign.path.execute import Executor
from countersign.path.inverse import inverse_id, overlay
from countersign.path.receipts import open_action
from countersign.path.settle import Timing
from countersign.reasons import Reason
from countersign.registry import Capability, Registry
from countersign.registry.templates import PLACEHOLDER, render
from countersign.store import Issued, Refused, RunRecord, Won, states
from countersign.store.protocols import CardStore, ClaimStore
from countersign.v1 import common_pb2


class CompensateStore(CardStore, ClaimStore, Protocol):
    """Compensate issues and claims the inverse like any write."""


class Compensator:
    def __init__(
        self,
        *,
        store: CompensateStore,
        keyring: Keyring,
        executor: Executor,
        registry: Registry,
        timing: Timing,
        metrics: Metrics,
        audit: Audit,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store, self.keyring, self.executor, self.registry = store, keyring, executor, registry
        self.timing, self.metrics, self.audit, self.clock = timing, metrics, audit, clock

    async def compensate(self, context: common_pb2.CallContext, action_id: str) -> common_pb2.Action:
        registry = self.registry
        found = await cards.owned_action(self.store, self.keyring, context, action_id)
        original = (
            open_action(self.keyring, action_id, found, replayed=False)
            if isinstance(found, RunRecord)
            else common_pb2.Action(action_id=action_id, state=common_pb2.ACTION_STATE_READY, tool_name=found.tool)
        )
        if original.state != common_pb2.ACTION_STATE_SUCCEEDED:
            raise FailedPrecondition(
                Reason.NOT_COMPENSABLE,
                f"only a SUCCEEDED action can be compensated; this one is {states.name(original.state)}",
            )
        tool = registry.tools.get(original.tool_name)
        if tool is None or tool.compensation is None:
            raise FailedPrecondition(
                Reason.NO_COMPENSATION, f"{original.tool_name!r} declares no compensation in the registry"
            )
        args = self._arguments(tool.compensation.args, found, original)
        try:
            allowed = policy.authorize(
                registry, context, tool.compensation.tool, args, policy.Phase.COMPENSATE, claimed=True
            )
        except InvalidArgument as exc:
            # the inverse's arguments come from the receipt (a downstream's answer), not from this caller:
            # e.g. a resource id ".." that would send DELETE /todos/.. — nothing is issued, nothing sent
            raise FailedPrecondition(
                Reason.NOT_COMPENSABLE,
                f"the inverse {tool.compensation.tool!r} cannot run on this receipt: {exc.message}",
            ) from exc
        if isinstance(allowed, Capability):
            raise FailedPrecondition(
                Reason.POLICY_CHANGED, f"the inverse {tool.compensation.tool!r} is {allowed.status} now"
            )
        inverse = allowed.tool
        comp_id = inverse_id(self.keyring, action_id)
        binding = self.keyring.binding(self.keyring.active, cards.owner(context))
        preview = common_pb2.Preview(title=f"compensate {original.tool_name}", target=original.receipt.resource_id)
        record = cards.seal(
            self.keyring,
            action_id=comp_id,
            binding=binding,
            tool=inverse,
            policy_version=registry.policy_version,
            arguments=allowed.arguments,
            resource_version=original.receipt.resource_version,
            preview=preview,
            now_ms=int(self.clock() * 1000),
            ttl_ms=self.timing.lease_ms,
            tenant=context.tenant_id,
            extra={"compensates": action_id},
        )
        existing = await self.store.issue(comp_id, record, self.timing.lease_ms)
        if isinstance(existing, Issued):
            # the inverse is an action like any other: its chain starts with its card (audit.verify expects it)
            self.audit.event(
                comp_id,
                "issued",
                tool=inverse.name,
                capability=inverse.capability,
                policy_version=registry.policy_version,
                compensates=action_id,
                args_hmac=self.keyring.digest("args", allowed.canonical_args),
            )
        else:  # issued (and maybe sealed) by another sidecar, perhaps under another key
            binding = cards.binding_of(self.keyring, existing, context)
        claim_id = os.urandom(12).hex()
        claimed = await self.store.claim(
            comp_id, binding, registry.denied_tools(context.role), claim_id, self.timing.lease_ms
        )
        if isinstance(claimed, Refused):
            raise cards.refusal_error(claimed)
        if isinstance(claimed, Won):
            result = await self.executor.run(registry, context, comp_id, claim_id, claimed.card)
            outcome = {common_pb2.ACTION_STATE_SUCCEEDED: "compensated"}.get(result.state, "failed")
            if result.state == common_pb2.ACTION_STATE_UNKNOWN:
                outcome = "unknown"
            self.metrics.compensations.labels(self.metrics.tool(original.tool_name), outcome).inc()
            self.audit.event(action_id, "compensated", inverse=comp_id, outcome=outcome, reason=result.error.reason)
            decision(
                action_id, original.tool_name, "compensated", result.error.reason or outcome.upper(), inverse=comp_id
            )
        else:
            # a second Compensate waits (bounded) for the first to finish, then returns its outcome
            settled = await self.store.wait_settled(
                comp_id, claimed, deadline(inverse, self.timing.downstream_deadline) + 1
            )
            result = open_action(self.keyring, comp_id, settled, replayed=True)
        out = overlay(original, result)
        out.replayed = not isinstance(claimed, Won)
        return out

    def _arguments(self, templates: Any, found: Any, original: common_pb2.Action) -> dict[str, Any]:
        """The inverse's arguments: templates over the receipt (and the action), one value each."""
        values = {
            "receipt.resource_id": original.receipt.resource_id,
            "receipt.resource_version": original.receipt.resource_version,
            "action_id": original.action_id,
            "idempotency_key": original.action_id,
        }
        out: dict[str, Any] = {}
        for key, template in templates.items():
            names = PLACEHOLDER.findall(template)
            if len(names) == 1 and template == "{" + names[0] + "}" and names[0] in values:
                out[key] = values[names[0]]
            else:
                out[key] = render(template, values)
        return out
