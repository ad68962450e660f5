"""Compensation under approval: undo a SUCCEEDED action by the inverse its tool declares, proposed as a card.

Compensate never runs the inverse itself (I1: an undo is a write like any other). It issues the inverse's
confirmation card, or returns the one that waits, or, once the inverse was confirmed, its outcome. The inverse is
an action of its own: its id is derived from the original's (path/inverse.py; a second Compensate lands on the
same card), its idempotency key is that id, it passes the same policy (the caller must be allowed to run the
inverse, under the registry in force), and it is confirmed through Confirm like any card, with whatever approval
its tool requires. Two concurrent Confirms of it run it once (claim.lua); a declined card leaves the original
SUCCEEDED, and a later Compensate proposes again.

The original's state is derived from the inverse's record, never stored twice (path/inverse.py); the original's
audit chain records the inverse's outcome when it settles (path/execute.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from countersign.adapters.base import Prepared
from countersign.audit import Audit
from countersign.errors import FailedPrecondition, InvalidArgument
from countersign.keyring import Keyring
from countersign.observability.logs import decision
from countersign.observability.metrics import Metrics
from countersign.path import cards, policy, prepare
from countersign.path.inverse import MAX_PROPOSALS, as_action, overlay, standing
from countersign.path.receipts import open_action
from countersign.reasons import Reason
from countersign.registry import Capability, Registry, Tool
from countersign.registry.templates import PLACEHOLDER, render
from countersign.store import Appended, CardRecord, Issued, RunRecord, states
from countersign.store.protocols import CardStore
from countersign.v1 import common_pb2, gateway_pb2


class Compensator:
    def __init__(
        self,
        *,
        store: CardStore,
        keyring: Keyring,
        registry: Registry,
        metrics: Metrics,
        audit: Audit,
        confirm_ttl_ms: int,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store, self.keyring, self.registry = store, keyring, registry
        self.metrics, self.audit, self.confirm_ttl_ms, self.clock = metrics, audit, confirm_ttl_ms, clock

    async def compensate(self, context: common_pb2.CallContext, action_id: str) -> gateway_pb2.CompensateResponse:
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
        args = self._arguments(tool.compensation.args, original)
        try:
            allowed = policy.authorize(registry, context, tool.compensation.tool, args, policy.Phase.COMPENSATE)
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
        comp_id, current = await standing(self.store, self.keyring, action_id)
        if current is None:
            return await self._propose(context, comp_id, allowed, original)
        inverse = as_action(self.keyring, comp_id, current)
        if inverse is not None and inverse.state == common_pb2.ACTION_STATE_REJECTED:
            raise FailedPrecondition(
                Reason.NOT_COMPENSABLE,
                f"the user declined this compensation {MAX_PROPOSALS} times; it is not proposed again",
            )
        return self._answer(original, comp_id, current, replayed=True)

    async def _propose(
        self, context: common_pb2.CallContext, comp_id: str, allowed: policy.Allowed, original: common_pb2.Action
    ) -> gateway_pb2.CompensateResponse:
        """Issue the inverse's card (or answer the one another call issued meanwhile)."""
        record = self._card(context, comp_id, allowed.tool, allowed.arguments, original)
        issued = await self.store.issue(comp_id, record, self.confirm_ttl_ms)  # its events: the writer's
        assert not isinstance(issued, Appended)  # sent without an event: issue.lua has no chain to find moved
        if not isinstance(issued, Issued):
            return self._answer(original, comp_id, issued, replayed=True)
        # the inverse is an action like any other: its chain starts with its card (audit.verify expects it)
        self.audit.event(
            comp_id,
            "issued",
            tool=allowed.tool.name,
            capability=allowed.tool.capability,
            policy_version=self.registry.policy_version,
            compensates=original.action_id,
            args_hmac=self.keyring.digest("args", allowed.canonical_args),
        )
        self.audit.event(original.action_id, "compensation_proposed", inverse=comp_id)
        self.metrics.compensations.labels(self.metrics.tool(original.tool_name), "proposed").inc()
        decision(
            original.action_id, original.tool_name, "compensation_proposed", "CONFIRMATION_REQUIRED", inverse=comp_id
        )
        return self._answer(original, comp_id, record, replayed=False)

    def _answer(
        self, original: common_pb2.Action, comp_id: str, found: CardRecord | RunRecord, *, replayed: bool
    ) -> gateway_pb2.CompensateResponse:
        """The original seen through its inverse, and the inverse's card while it waits for the user."""
        out = gateway_pb2.CompensateResponse(action=overlay(original, as_action(self.keyring, comp_id, found)))
        out.action.replayed = replayed
        if isinstance(found, CardRecord):  # verified: an edited card is DATA_LOSS, never shown to the user
            out.confirmation.CopyFrom(cards.to_proto(self.keyring, cards.open_card(self.keyring, comp_id, found)))
        return out

    def _card(
        self,
        context: common_pb2.CallContext,
        comp_id: str,
        inverse: Tool,
        arguments: dict[str, Any],
        original: common_pb2.Action,
    ) -> CardRecord:
        """The inverse's card: its arguments from the receipt, its preview from the registry, the resource version
        the receipt names (sent as If-Match), the original it undoes."""
        prepared = Prepared(arguments=arguments, resource_version=original.receipt.resource_version)
        preview = prepare.preview(inverse, prepared, comp_id)
        preview.details.add(label="compensates", value=f"{original.tool_name} {original.action_id}")
        return cards.seal(
            self.keyring,
            action_id=comp_id,
            binding=self.keyring.binding(self.keyring.active, cards.owner(context)),
            tool=inverse,
            policy_version=self.registry.policy_version,
            arguments=arguments,
            resource_version=original.receipt.resource_version,
            preview=preview,
            now_ms=int(self.clock() * 1000),
            ttl_ms=self.confirm_ttl_ms,
            tenant=context.tenant_id,
            extra={"compensates": original.action_id, "compensates_tool": original.tool_name},
        )

    def _arguments(self, templates: Any, original: common_pb2.Action) -> dict[str, Any]:
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
