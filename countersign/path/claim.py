"""Claim: Confirm's step that makes one caller the executor (I3), or answers every other caller from the record.

token (constant time, before Redis) -> context may write now (refused here: the card stays READY)
  -> the approval, if any, verified (path/approval.py: no Redis, no network while its key is known)
  -> claim.lua: ready -> running, only with the approval the card requires
       won        the card, for the executor (with the approval's evidence)
       a record   replayed: the settled outcome, or RUNNING (waited for, bounded by wait_ms), whatever approval
                  this Confirm carries: the outcome tells its owner nothing new (the owner is checked)
       refused    CONFIRMATION_EXPIRED, ROLE_NOT_ALLOWED, APPROVAL_REQUIRED, APPROVAL_INVALID, POLICY_CHANGED
                  (a signed approval the registry requires now; each of these leaves the card READY),
                  CONFIRMATION_BINDING_MISMATCH
"""

from __future__ import annotations

import os
from typing import NamedTuple

from countersign.keyring import Keyring
from countersign.observability import tracing
from countersign.observability.logs import decision
from countersign.observability.metrics import Metrics
from countersign.path import approval as approvals_mod
from countersign.path import policy
from countersign.path.approval import Approvals, Checked
from countersign.path.cards import owner, refusal_error
from countersign.path.receipts import open_action
from countersign.registry import Registry
from countersign.store import CardRecord, Refused, RunRecord, Won
from countersign.store.protocols import ClaimStore
from countersign.v1 import common_pb2


class Claimed(NamedTuple):
    """This caller holds the claim: the executor runs the card under ``claim_id``."""

    action_id: str
    claim_id: str
    card: CardRecord
    approval: Checked | None = None  # the approval it was claimed with (verified; its digest and acr compared)
    chain_at: tuple[int, str] = (0, "")  # where the action's audit chain ended at the claim (claim.lua)


class Claims:
    def __init__(
        self,
        store: ClaimStore,
        keyring: Keyring,
        metrics: Metrics,
        *,
        lease_ms: int,
        max_wait: float,
        approvals: Approvals | None = None,
    ) -> None:
        self.store, self.keyring, self.metrics = store, keyring, metrics
        self.lease_ms, self.max_wait = lease_ms, max_wait
        self.approvals = approvals or Approvals(None)

    async def claim(
        self, registry: Registry, context: common_pb2.CallContext, token: str, wait_ms: int, approval: str = ""
    ) -> Claimed | common_pb2.Action:
        """The claim for this caller, or the action as it stands (replayed) when another caller claimed it."""
        kid, action_id = self.keyring.parse_token(token)  # constant time, before Redis
        policy.check_context(context)
        policy.may_write_now(context)  # refused here: the card stays READY
        checked = await self.approvals.check(registry.signed_writes, context, action_id, approval)  # before Redis
        binding = self.keyring.binding(kid, owner(context))
        claim_id = os.urandom(12).hex()
        with self.metrics.timed("claim"):
            found = await self.store.claim(
                action_id, binding, registry.denied_tools(context.role), claim_id, self.lease_ms, checked.claim
            )
        tracing.annotate(action_id=action_id)
        if isinstance(found, Refused):
            self.metrics.claims.labels("other", found.why).inc()
            if found.why in ("approval_required", "approval_invalid"):
                error = approvals_mod.refusal(found, checked)
                decision(action_id, "", "refused", error.reason, check=found.check)
                raise error
            raise refusal_error(found)
        if isinstance(found, RunRecord):
            return await self._replay(action_id, found, wait_ms)
        assert isinstance(found, Won)
        self.metrics.claims.labels(self.metrics.tool(found.card.tool), "won").inc()
        return Claimed(action_id, claim_id, found.card, checked, found.chain_at)

    async def settled(self, action_id: str, found: RunRecord, wait_ms: int) -> RunRecord:
        """The record once it settles, or as it stands after wait_ms (bounded by --max-wait)."""
        return await self.store.wait_settled(action_id, found, min(wait_ms / 1000, self.max_wait))

    async def _replay(self, action_id: str, found: RunRecord, wait_ms: int) -> common_pb2.Action:
        label = self.metrics.tool(found.tool)
        tracing.annotate(tool=found.tool, replayed=True)
        self.metrics.claims.labels(label, "running" if found.state == "running" else "replayed").inc()
        found = await self.store.wait_settled(action_id, found, min(wait_ms / 1000, self.max_wait))
        action = open_action(self.keyring, action_id, found, replayed=True)
        if found.state != "running":
            self.metrics.replay_hits.labels(label, "confirm").inc()
        decision(action_id, found.tool, "replayed", found.reason or found.state.upper())
        return action
