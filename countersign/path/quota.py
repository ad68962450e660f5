"""Per-tenant quota: one tenant cannot fill the store for everyone (issue 11, item 16).

What a tenant keeps in Redis is counted in records: actions (a card, then its run record and continuation; each
bounded in size) and turns (the list of one turn's read facts and proposed actions). Each is a member of the
tenant's own sorted set (``store/lua/quota.lua``), scored by when its record is gone at the latest (``--replay-ttl``),
so the count needs no bookkeeping when records expire, and a member added twice counts once.

The set lives in the tenant's slot, not the action's: the check cannot be one atomic step with the action's
scripts (they must stay in the action's slot for Redis Cluster), so it is a step of its own, before anything is
stored. To keep that step off the Invoke path, a sidecar counts in batches while a tenant is far from its cap:

    far   the count heard less than STALE s ago, plus what this sidecar admitted since, plus this call, is at
          most half the cap: admitted at once; the members are sent in the background, a batch per tenant
          every FLUSH_EVERY
    near  (or not heard lately): Redis first, with the members still unsent; refused there if over the cap

Trade-offs, all on the side of a tenant far from its cap: with one sidecar the cap is exact. With several,
each counts the others' admissions only once they are sent and heard (within about two FLUSH_EVERY), so near
the cap a tenant may end a little over it: by what other sidecars admitted on the batched path in that time,
and they use it only below half the cap. A sidecar killed between admitting and sending leaves up to
FLUSH_EVERY of its admissions uncounted (SIGTERM sends them). A record counts for the longest it may live even
if it went sooner (a card rejected), so the cap is on records created within --replay-ttl; an unresolved
action that outlives --replay-ttl stops counting.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from countersign.errors import CountersignError, ResourceExhausted
from countersign.reasons import Reason
from countersign.store import QuotaCount
from countersign.store.protocols import QuotaStore

log = logging.getLogger("countersign.quota")
FLUSH_EVERY = 0.05  # seconds a far-from-the-cap member may wait before it is sent (in one batch per tenant)
STALE = 1.0  # seconds after which a heard count is too old to admit without asking
MAX_TENANTS = 10_000  # idle tenants beyond this are forgotten (their count is asked again)


@dataclass
class _Tenant:
    known: int = 0  # members Redis said it held, at heard_at
    heard_at: float = float("-inf")
    unsent: dict[str, None] = field(default_factory=dict)  # admitted here, not yet in Redis (ordered, unique)
    sending: int = 0  # members on their way to Redis right now
    flusher: asyncio.Task[Any] | None = None


class Quota:
    def __init__(
        self,
        store: QuotaStore,
        tenant_quota: int,
        replay_ttl_ms: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.store, self.tenant_quota, self.replay_ttl_ms = store, tenant_quota, replay_ttl_ms
        self.clock, self.wall = clock, wall
        self.far = tenant_quota // 2  # below half the cap a tenant is admitted at once (the batched path)
        self._tenants: dict[str, _Tenant] = {}

    async def take(self, tenant: str, members: list[str]) -> None:
        """Count members a call is about to store; raise QUOTA_EXCEEDED (and count nothing) beyond the cap."""
        t = self._tenants.get(tenant) or self._new(tenant)
        estimate = t.known + t.sending + len(t.unsent) + len(members)
        if self.clock() - t.heard_at < STALE and estimate <= self.far:
            t.unsent.update(dict.fromkeys(members))
            if t.flusher is None:
                t.flusher = asyncio.ensure_future(self._flush_later(tenant, t))
            return
        heard = await self._send(t, tenant, members)
        if not heard.counted:
            wait = max(0.0, heard.first_gone_ms / 1000 - self.wall())
            raise ResourceExhausted(
                Reason.QUOTA_EXCEEDED,
                f"this tenant keeps {heard.held} records in the sidecar's store (actions and "
                f"turns, each counted for --replay-ttl), as many as --tenant-quota allows ({self.tenant_quota}); "
                f"nothing was stored. The oldest stops counting in {wait:.0f} s",
                metadata={"cap": str(self.tenant_quota)},
                retry_after=wait,
            )

    async def forget(self, tenant: str, members: list[str]) -> None:
        """Stop counting members whose records were never stored (a prepare refused: no card)."""
        t = self._tenants.get(tenant)
        sent = [m for m in members if t is None or m not in t.unsent]
        for m in members:
            if t is not None:
                t.unsent.pop(m, None)
        if sent:
            await self.store.quota_forget(tenant, sent)

    async def drain(self, timeout: float) -> None:
        """At shutdown: send what was admitted and not yet counted."""
        pending = [t.flusher for t in self._tenants.values() if t.flusher is not None]
        if pending:
            await asyncio.wait(pending, timeout=timeout)

    async def _send(self, t: _Tenant, tenant: str, members: list[str]) -> QuotaCount:
        """One round trip: the unsent members (counted whatever the cap), then these (checked)."""
        stored = list(t.unsent)
        t.unsent.clear()
        t.sending += len(stored) + len(members)
        try:
            heard = await self.store.quota(tenant, stored, members, self.tenant_quota, self.replay_ttl_ms)
        except CountersignError:
            t.unsent.update(dict.fromkeys(stored))  # sent again with the next batch
            raise
        finally:
            t.sending -= len(stored) + len(members)
        t.known, t.heard_at = heard.held, self.clock()
        return heard

    async def _flush_later(self, tenant: str, t: _Tenant) -> None:
        delay = FLUSH_EVERY
        try:
            while t.unsent:
                await asyncio.sleep(delay)
                try:
                    await self._send(t, tenant, [])
                    delay = FLUSH_EVERY
                except CountersignError as exc:  # kept, and sent with the next batch
                    delay = min(delay * 2, 5.0)
                    log.warning(
                        json.dumps({"event": "quota_flush_failed", "reason": exc.reason, "members": len(t.unsent)})
                    )
        finally:
            t.flusher = None

    def _new(self, tenant: str) -> _Tenant:
        if len(self._tenants) >= MAX_TENANTS:
            for name, idle in list(self._tenants.items()):
                if not idle.unsent and idle.flusher is None and not idle.sending:
                    del self._tenants[name]
        t = self._tenants[tenant] = _Tenant()
        return t
