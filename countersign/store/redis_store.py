"""The store over Redis: runs the scripts in ``store/lua`` and names their replies (replies.py); its reads are
redis_reads.py, its standing grants redis_grants.py, its connection connect.py (the only modules that import
redis).

Each transition is one script, one atomic step (docs/design.md §7); its reply is decoded by name into a record or
a typed result (results.py). Any Redis failure (refused, timed out, lost) raises ``StoreUnavailable``: the caller
fails closed (I7) and nothing executes. Consumers see this class through the small protocols of protocols.py.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any, TypeVar

from redis.exceptions import RedisClusterException, RedisError

from countersign.errors import StoreUnavailable, Unavailable
from countersign.reasons import Reason
from countersign.store import keys
from countersign.store.batches import ScriptBatches
from countersign.store.connect import connect
from countersign.store.keys import audit_key, card_key, cont_key, events_key, run_key
from countersign.store.records import (
    NO_APPROVAL,
    Anchor,
    CardRecord,
    Chained,
    ClaimApproval,
    RunRecord,
)
from countersign.store.redis_conts import RedisConts
from countersign.store.redis_grants import RedisGrants
from countersign.store.redis_reads import RedisReads
from countersign.store.replies import SCRIPTS, card_record, decode, raw, run_record, text
from countersign.store.results import (
    Appended,
    Busy,
    Defer,
    Issued,
    QuotaCount,
    ReconcileWork,
    Refused,
    Rejected,
    Release,
    Resolved,
    Settle,
    Won,
)

T = TypeVar("T")
# what a store call that got no answer raises (redis-py, its cluster client, the socket, a deadline): StoreUnavailable
UNANSWERED = (RedisError, RedisClusterException, OSError, TimeoutError)


class RedisStore(RedisConts, RedisGrants, RedisReads):
    """Card, run, continuation and audit records in Redis, one Lua script per transition (reads: RedisReads)."""

    wait_replicas = 0
    wait_timeout_ms = 100
    # called with (script, seconds) after every script's round trip, failed ones included (app.py wires the
    # countersign_redis_duration_seconds histogram here; None: not timed)
    observe: Callable[[str, float], None] | None = None

    def __init__(
        self,
        client: Any,
        *,
        op_timeout: float,
        attempt_timeout: float | None = None,
        retries: int = 0,
        connect_timeout: float = 0.0,
    ) -> None:
        self.client = client
        self.op_timeout = op_timeout
        lua = resources.files("countersign.store").joinpath("lua")
        chain = lua.joinpath("lib", "chain.lua").read_text(encoding="utf-8")
        self._scripts = {}
        for name in SCRIPTS:
            source = lua.joinpath(f"{name}.lua").read_text(encoding="utf-8")
            # one copy of the chain's append (lib/chain.lua) for every script that appends audit events
            self._scripts[name] = client.register_script(chain + source if "chain_append(" in source else source)
        # scripts: attempts of at most attempt_timeout each (the socket timeout; + connect_timeout when connecting),
        # retried as redis-py's Retry did
        self._batches = ScriptBatches(
            client,
            self._scripts,
            op_timeout,
            attempt_timeout=attempt_timeout,
            retries=retries,
            connect_timeout=connect_timeout,
        )

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        socket_timeout: float,
        connect_timeout: float,
        retries: int,
        mode: str = "auto",
        wait_replicas: int = 0,
        wait_timeout_ms: int = 100,
    ) -> RedisStore:
        """A store over the client connect.py builds for ``url`` (raises ValueError for a URL it cannot use)."""
        client = connect(
            url,
            socket_timeout=socket_timeout,
            connect_timeout=connect_timeout,
            retries=retries,
            mode=mode,
            wait_replicas=wait_replicas,
        )
        store = cls(
            client,
            op_timeout=(socket_timeout + connect_timeout) * (retries + 1),
            attempt_timeout=socket_timeout,
            retries=retries,
            connect_timeout=connect_timeout,
        )
        store.wait_replicas, store.wait_timeout_ms = wait_replicas, wait_timeout_ms
        return store

    async def close(self) -> None:
        await self._batches.close()
        await self.client.aclose()

    async def ping(self) -> None:
        """Raise StoreUnavailable unless Redis answers a PING (the readiness probe)."""
        await self._call(self.client.ping())

    async def _call(self, awaitable: Awaitable[T]) -> T:
        try:
            async with asyncio.timeout(self.op_timeout):
                return await awaitable
        except UNANSWERED as exc:
            raise StoreUnavailable(f"the store did not answer: {type(exc).__name__}") from exc

    async def _bounded(self, awaitable: Awaitable[T]) -> T:
        """A script's reply through the batches, whose exchanges bound themselves (batches.py: each attempt's
        deadline, a watchdog, not a timer per call); a cluster client's scripts keep this call's own timeout."""
        if self._batches.exchanges is None:
            return await self._call(awaitable)
        try:
            return await awaitable
        except UNANSWERED as exc:
            raise StoreUnavailable(f"the store did not answer: {type(exc).__name__}") from exc

    async def _script(self, name: str, keys_: list[str], args: list[Any]) -> tuple[str, dict[str, Any]]:
        if self.observe is None:
            return decode(name, await self._bounded(self._batches.run(name, keys_, args)))
        start = time.perf_counter()
        try:
            reply = await self._bounded(self._batches.run(name, keys_, args))
        finally:
            self.observe(name, time.perf_counter() - start)
        return decode(name, reply)

    async def _acknowledged(self, name: str, keys_: list[str], args: list[Any]) -> tuple[str, dict[str, Any], int]:
        """Run a script; with --redis-wait-replicas, WAIT on the same connection: (kind, fields, replicas that
        acked)."""
        if not self.wait_replicas:
            return *await self._script(name, keys_, args), self.wait_replicas
        pipe = self.client.pipeline(transaction=False)
        await self._scripts[name](keys=keys_, args=args, client=pipe)
        pipe.execute_command("WAIT", self.wait_replicas, self.wait_timeout_ms)
        start = time.perf_counter()
        try:
            reply, acked = await self._call(pipe.execute())
        finally:
            if self.observe is not None:
                self.observe(name, time.perf_counter() - start)  # the script and its WAIT: one round trip
        return *decode(name, reply), int(acked)

    def _not_acknowledged(self, name: str, acked: int) -> Unavailable:
        return Unavailable(
            Reason.REPLICAS_NOT_ACKNOWLEDGED,
            f"{acked} of {self.wait_replicas} replicas acknowledged the {name}; not acting on it",
            retry_after=1.0,
        )

    async def _durable_script(self, name: str, keys_: list[str], args: list[Any]) -> tuple[str, dict[str, Any]]:
        """A transition the sidecar acts on: refused (UNAVAILABLE) when too few replicas acknowledged it
        (docs/design.md §7)."""
        kind, fields, acked = await self._acknowledged(name, keys_, args)
        if acked < self.wait_replicas:
            raise self._not_acknowledged(name, acked)
        return kind, fields

    # -- the action: issue, claim, release, settle, reject, peek ------------------------------------

    async def issue(
        self, action_id: str, card: CardRecord, ttl_ms: int, chain: Chained | None = None
    ) -> Issued | CardRecord | RunRecord | Appended:
        """Create the card: Issued, or the card or record that exists already. ``chain``: the issued event, appended
        in the same step; Appended(False, seq, head), changing nothing, when the chain ends elsewhere (chain it there
        and issue again)."""
        kind, f = await self._script(
            "issue",
            [card_key(action_id), run_key(action_id), audit_key(action_id), events_key(action_id)],
            [
                card.binding,
                card.tool,
                card.body,
                card.mac,
                card.kid,
                ttl_ms,
                card.approval,
                card.digest,
                card.risk,
                *(chain.args() if chain else ()),
            ],
        )
        if kind == "issued":
            return Issued()
        if kind == "conflict":
            return Appended(False, int(f["seq"]), text(f["head"]))
        if kind == "card":
            return card_record(f, tool=card.tool, binding=card.binding)
        return run_record(f)

    async def claim(
        self,
        action_id: str,
        binding: str,
        denied: str,
        claim_id: str,
        lease_ms: int,
        approval: ClaimApproval = NO_APPROVAL,
    ) -> Won | RunRecord | Refused:
        """ready -> running. Won: the caller holds the claim and must settle (or release) it. A RunRecord: someone
        claimed it before (replay, or RUNNING).

        With --redis-wait-replicas, a won claim too few replicas acknowledged is put back (release.lua; the
        request was never sent) and the caller gets UNAVAILABLE REPLICAS_NOT_ACKNOWLEDGED: a failover must not
        lose the claim and let a second caller execute the same action."""
        keys_ = [card_key(action_id), run_key(action_id), audit_key(action_id)]
        args = [binding, denied, claim_id, lease_ms, approval.digest, approval.risks, approval.failed]
        kind, f, acked = await self._acknowledged("claim", keys_, [*args, approval.signed_tools])
        if acked < self.wait_replicas and kind == "won":
            await self._script("release", keys_[:2], [claim_id])
            raise self._not_acknowledged("claim", acked)
        if kind == "won":
            return Won(card_record(f, binding=binding), (int(f["seq"]), text(f["head"])))
        if kind == "run":
            return run_record(f)
        check = text(f.get("why", f.get("check", "")))  # approval_required | approval_invalid
        return Refused(kind, text(f.get("tool", "")), check)  # type: ignore[arg-type]   # expired | forbidden | role

    async def release(self, action_id: str, claim_id: str) -> Release:
        """running -> ready by the claim holder that never sent the request: ready, expired or lost."""
        kind, _ = await self._script("release", [card_key(action_id), run_key(action_id)], [claim_id])
        return kind  # type: ignore[return-value]

    async def settle(
        self,
        action_id: str,
        claim_id: str,
        state: str,
        out: bytes,
        omac: str,
        reason: str,
        receipt_status: str,
        replay_ttl_ms: int,
        chain: Chained | None = None,
    ) -> Settle | Appended:
        """running|unknown -> settled|unknown|review by the claim holder: ok, lost or gone. ``chain``: the events
        of this step, appended with it; Appended(False, seq, head) when the chain ended elsewhere (nothing
        changed: chain them there and settle again)."""
        kind, f = await self._durable_script(
            "settle",
            [run_key(action_id), cont_key(action_id), audit_key(action_id), events_key(action_id)],
            [claim_id, state, out, omac, reason, receipt_status, replay_ttl_ms, *(chain.args() if chain else ())],
        )
        if kind == "conflict":
            return Appended(False, int(f["seq"]), text(f["head"]))
        return kind  # type: ignore[return-value]

    async def reject(
        self, action_id: str, binding: str, out: bytes, omac: str, replay_ttl_ms: int, chain: Chained | None = None
    ) -> Rejected | RunRecord | Refused | Appended:
        """ready -> rejected; ``chain``: its rejected event, appended in the same step, or Appended(False, seq,
        head) changing nothing when the chain ends elsewhere (chain it there and reject again)."""
        kind, f = await self._script(
            "reject",
            [card_key(action_id), run_key(action_id), audit_key(action_id), events_key(action_id)],
            [binding, out, omac, replay_ttl_ms, *(chain.args() if chain else ())],
        )
        if kind == "rejected":
            return Rejected()
        if kind == "conflict":
            return Appended(False, int(f["seq"]), text(f["head"]))
        if kind == "run":
            return run_record(f)
        return Refused(kind)  # type: ignore[arg-type]   # expired | forbidden

    async def peek(self, action_id: str) -> CardRecord | RunRecord | None:
        """Where the action stands (a lapsed lease is turned into unknown on the way)."""
        kind, f = await self._script("peek", [card_key(action_id), run_key(action_id)], [])
        if kind == "run":
            return run_record(f)
        if kind == "card":
            return card_record(f)
        return None

    async def wait_settled(self, action_id: str, run: RunRecord, seconds: float) -> RunRecord:
        """Poll (bounded, with backoff) until a running action settles; the last record seen."""
        deadline = time.monotonic() + seconds
        delay = 0.005
        while run.state == "running" and time.monotonic() < deadline:
            await asyncio.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(delay * 2, 0.1)
            found = await self.peek(action_id)
            if not isinstance(found, RunRecord):
                break
            run = found
        return run

    # -- the tenant's quota (its own slot: one more round trip, and it runs on Cluster) ------------

    async def quota(self, tenant: str, stored: list[str], members: list[str], cap: int, ttl_ms: int) -> QuotaCount:
        """Count what a tenant keeps: the stored members always, the new ones only within the cap (not counted:
        they were not added)."""
        kind, f = await self._script("quota", [keys.quota_key(tenant)], [cap, ttl_ms, len(stored), *stored, *members])
        return QuotaCount(kind == "ok", int(f["count"]), int(f.get("first_gone", 0)))

    async def quota_forget(self, tenant: str, members: list[str]) -> None:
        """Stop counting members whose records were never stored (a prepare refused: no card)."""
        await self._call(self.client.zrem(keys.quota_key(tenant), *members))

    # -- reconciliation ------------------------------------------------------------------------

    async def reconcile_claim(
        self, action_id: str, claim_id: str, work_lease_ms: int
    ) -> ReconcileWork | RunRecord | Busy | None:
        """unknown -> (this reconciler holds it). ReconcileWork, the record when there is nothing to reconcile,
        Busy when another holds it or it is not due, None when there is no record."""
        kind, f = await self._durable_script("reconcile_claim", [run_key(action_id)], [claim_id, work_lease_ms])
        if kind == "won":
            card = CardRecord(text(f["kid"]), text(f["tool"]), raw(f["card"]), text(f["cmac"]))
            return ReconcileWork(card, int(f["attempts"]), int(f["unknown_since_ms"]), int(f["now_ms"]))
        if kind == "run":
            return run_record(f)
        if kind == "busy":
            return Busy(text(f["state"]))
        return None

    async def reconcile_defer(self, action_id: str, claim_id: str, delay_ms: int) -> Defer:
        kind, _ = await self._script("reconcile_defer", [run_key(action_id)], [claim_id, delay_ms])
        return kind  # type: ignore[return-value]

    # -- audit chains and operator resolution ----------------------------------------------------

    async def audit_append(
        self,
        action_id: str,
        after: tuple[int, str],
        events: list[tuple[bytes, str]],
        anchor: Anchor,
        expiry: str,
        ttl_ms: int,
    ) -> Appended:
        """Append chained events if the action's chain still ends at ``after`` (seq, head), and set the anchor
        (MAC'd by the caller) in the same step. expiry: keep | expire | same (lua/audit.lua)."""
        args = Chained(after, events, anchor, expiry, ttl_ms).args()
        kind, f = await self._script("audit", [audit_key(action_id), events_key(action_id)], args)
        if kind == "ok":
            return Appended(True, int(f["seq"]), events[-1][1])
        return Appended(False, int(f["seq"]), text(f["head"]))

    async def resolve(
        self, action_id: str, out: bytes, omac: str, reason: str, receipt_status: str, replay_ttl_ms: int
    ) -> Resolved:
        """unknown|review -> settled by an operator; the record then gets the replay TTL."""
        kind, f = await self._script(
            "resolve", [run_key(action_id), cont_key(action_id)], [out, omac, reason, receipt_status, replay_ttl_ms]
        )
        return Resolved(True) if kind == "ok" else Resolved(False, text(f["state"]))
