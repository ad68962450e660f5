"""The store's standing grants (docs/design.md §12): one owner's grants in one hash, in one slot; a write under a
grant is two steps, grant_use.lua in the owner's slot and grant_run.lua in the action's. RedisStore inherits this
(it imports redis through RedisStore's client only)."""

from __future__ import annotations

from typing import Any

from countersign.errors import Unavailable
from countersign.store import keys
from countersign.store.keys import card_key, run_key
from countersign.store.records import CardRecord, GrantRecord, RunRecord
from countersign.store.replies import card_record, raw, run_record, text
from countersign.store.results import (
    GrantCreated,
    GrantNotTaken,
    GrantRevoked,
    GrantsFull,
    GrantTaken,
    Won,
)


class RedisGrants:
    client: Any
    wait_replicas: int

    async def _call(self, awaitable: Any) -> Any:
        raise NotImplementedError  # RedisStore's

    async def _script(self, name: str, keys_: list[str], args: list[Any]) -> tuple[str, dict[str, Any]]:
        raise NotImplementedError  # RedisStore's

    async def _durable_script(self, name: str, keys_: list[str], args: list[Any]) -> tuple[str, dict[str, Any]]:
        raise NotImplementedError  # RedisStore's

    async def _acknowledged(self, name: str, keys_: list[str], args: list[Any]) -> tuple[str, dict[str, Any], int]:
        raise NotImplementedError  # RedisStore's

    def _not_acknowledged(self, name: str, acked: int) -> Unavailable:
        raise NotImplementedError  # RedisStore's

    # -- one owner's standing grants ----------------------------------------------------------------

    async def grants(self, owner: str) -> list[GrantRecord]:
        """Every grant the owner's hash holds (expired and revoked ones included: the caller decides), in one
        round trip."""
        found: dict[bytes, bytes] = await self._call(self.client.hgetall(keys.grants_key(owner)))
        fields = {text(k): v for k, v in found.items()}
        return [
            GrantRecord(
                name,
                value,
                int(fields.get(f"{name}:n", b"0") or 0),
                fields.get(f"{name}:st") == b"revoked",
            )
            for name, value in fields.items()
            if ":" not in name
        ]

    # -- standing grants (one owner's in one slot; a write under a grant: grant_use, then grant_run) -----

    async def grant_create(
        self, owner: str, grant_id: str, sealed: bytes, exp_ms: int, keep_ms: int, max_live: int
    ) -> GrantCreated | GrantRecord | GrantsFull:
        """Record a grant unless it exists: GrantCreated, the grant recorded before, or GrantsFull."""
        kind, f = await self._script(
            "grant_create", [keys.grants_key(owner)], [grant_id, sealed, exp_ms, keep_ms, max_live]
        )
        if kind == "created":
            return GrantCreated()
        if kind == "exists":
            return GrantRecord(grant_id, raw(f["sealed"]), int(f["taken"]), text(f["st"]) == "revoked")
        return GrantsFull(int(f["live"]))

    async def grant_use(
        self, owner: str, grant_id: str, action_id: str, mac: str, uses: int, exp_ms: int, keep_ms: int
    ) -> GrantTaken | GrantNotTaken:
        """Take one use of a grant for an action (step one of a write under a grant; at most ``uses`` actions
        ever take one, and one action at most one). With --redis-wait-replicas, a use too few replicas
        acknowledged is UNAVAILABLE and nothing runs: a failover must not hand the use out again."""
        kind, f = await self._durable_script(
            "grant_use",
            [keys.grants_key(owner), keys.grant_used_key(owner, grant_id)],
            [grant_id, action_id, mac, uses, exp_ms, keep_ms],
        )
        if kind in ("took", "again"):
            return GrantTaken(int(f["left"]), again=kind == "again")
        return kind  # type: ignore[return-value]   # spent | revoked | expired | none | tampered

    async def grant_revoke(self, owner: str, grant_id: str) -> GrantRevoked | None:
        """Revoke one of the owner's grants: the grant as stored (revoked now or before), or None. With
        --redis-wait-replicas, a revocation too few replicas acknowledged is UNAVAILABLE (revoke again)."""
        kind, f = await self._durable_script("grant_revoke", [keys.grants_key(owner)], [grant_id])
        if kind == "none":
            return None
        return GrantRevoked(GrantRecord(grant_id, raw(f["sealed"]), int(f["taken"]), True), before=kind == "already")

    async def grant_run(
        self, action_id: str, card: CardRecord, claim_id: str, lease_ms: int, grant_id: str
    ) -> Won | RunRecord | CardRecord:
        """Issue an action covered by a grant directly as running (step two): Won, the action's record when it
        exists (replay, RUNNING), or the card of it that waits for the user.

        With --redis-wait-replicas, a won run too few replicas acknowledged is put back (release.lua: it becomes
        a READY card, the request never sent) and the caller gets UNAVAILABLE REPLICAS_NOT_ACKNOWLEDGED."""
        keys_ = [card_key(action_id), run_key(action_id)]
        args = [card.binding, card.tool, card.body, card.mac, card.kid, claim_id, lease_ms, grant_id]
        kind, f, acked = await self._acknowledged("grant_run", keys_, args)
        if acked < self.wait_replicas and kind == "won":
            await self._script("release", keys_, [claim_id])
            raise self._not_acknowledged("grant_run", acked)
        if kind == "won":
            return Won(card_record(f, binding=card.binding))
        if kind == "run":
            return run_record(f)
        return card_record(f, tool=card.tool, binding=card.binding)
