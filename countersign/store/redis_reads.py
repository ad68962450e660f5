"""The store's reads and lists: what a turn did, the reconciler's index and scans, the audit evidence, the raw
records the operator reads, the id key. No transition of an action's state machine happens here (those are one
Lua script each, redis_store.py); RedisStore inherits these."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, TypeVar

import redis.asyncio as aioredis

from countersign.store import keys
from countersign.store.keys import card_key, run_key
from countersign.store.records import AuditEvidence, RunSummary
from countersign.store.replies import text

T = TypeVar("T")


class RedisReads:
    client: Any

    async def _call(self, awaitable: Awaitable[T]) -> T:
        raise NotImplementedError  # RedisStore's: the timeout, and Redis failures as StoreUnavailable

    async def _script(self, name: str, keys_: list[str], args: list[Any]) -> tuple[str, dict[str, Any]]:
        raise NotImplementedError  # RedisStore's: one script of store/lua, its reply by name

    # -- what one user turn did: read facts and proposed actions -------------------------------

    async def remember(self, turn: str, entry: bytes, ttl_ms: int, keep: int = 64) -> None:
        await self._script("turn_remember", [keys.turn_list_key(turn)], [entry, keep, ttl_ms])

    async def recall(self, turn: str) -> list[bytes]:
        entries: list[bytes] = await self._call(self.client.lrange(keys.turn_list_key(turn), 0, -1))
        return entries

    # -- the approval inbox: approvals that arrived out of band, for any sidecar's waiting call --------

    async def inbox_push(self, action_id: str, approval: str, ttl_ms: int) -> None:
        key = keys.inbox_key(action_id)
        pipe = self.client.pipeline(transaction=True)  # one slot: the action's hash tag
        pipe.rpush(key, approval)
        pipe.ltrim(key, -8, -1)  # a user who approves again and again keeps the last few
        pipe.pexpire(key, ttl_ms)
        await self._call(pipe.execute())

    async def inbox_take(self, action_id: str) -> str | None:
        """The oldest approval waiting for this action, removed (each is taken once, by one call)."""
        found = await self._call(self.client.lpop(keys.inbox_key(action_id)))
        return text(found) if found is not None else None

    # -- the reconciler's index and scans ---------------------------------------------------------

    async def run_tool(self, action_id: str) -> str:
        """The tool of an action's run record ("" when there is none); read-only."""
        tool = await self._call(self.client.hget(run_key(action_id), "tool"))
        return text(tool) if tool is not None else ""

    async def open_add(self, action_id: str, due_ms: int) -> None:
        """Index an action that may need reconciling (running now, or unknown), by when to look at it."""
        await self._call(self.client.zadd(keys.OPEN_KEY, {action_id: due_ms}))

    async def open_remove(self, action_id: str) -> None:
        await self._call(self.client.zrem(keys.OPEN_KEY, action_id))

    async def open_due(self, now_ms: int, count: int) -> list[str]:
        rows = await self._call(self.client.zrangebyscore(keys.OPEN_KEY, "-inf", now_ms, start=0, num=count))
        return [text(r) for r in rows]

    async def scan_runs(self, cursor: int, count: int) -> tuple[int, list[str]]:
        """One step of a SCAN over run records; returns the next cursor and action ids seen."""
        if not isinstance(self.client, aioredis.Redis):  # a cluster: one full pass over every node

            async def every() -> list[str]:
                return [
                    keys.action_of(text(k), "run")
                    async for k in self.client.scan_iter(match=keys.RUN_PATTERN, count=count)
                ]

            return 0, await self._call(every())
        nxt, found = await self._call(self.client.scan(cursor=cursor, match=keys.RUN_PATTERN, count=count))
        return int(nxt), [keys.action_of(text(k), "run") for k in found]

    async def run_states(self, action_ids: list[str]) -> list[RunSummary]:
        """State, lease, next reconcile time and tool of each run record, in one round trip."""
        if not action_ids:
            return []
        pipe = self.client.pipeline(transaction=False)
        for action_id in action_ids:
            pipe.hmget(run_key(action_id), "st", "lease", "rdue", "tool")
        rows = await self._call(pipe.execute())
        return [
            RunSummary(text(st or b""), int(lease or 0), int(due or 0), text(tool or b""))
            for st, lease, due, tool in rows
        ]

    # -- audit evidence and raw records (read-only) --------------------------------------------------

    async def events(self, action_id: str) -> list[tuple[str, bytes]]:
        rows = await self._call(self.client.xrange(keys.events_key(action_id)))
        return [(text(entry_id), fields[b"e"]) for entry_id, fields in rows]

    async def audit_actions(self) -> list[str]:
        """Every action that has an audit chain."""

        async def every() -> list[str]:
            return [
                keys.action_of(text(key), "events")
                async for key in self.client.scan_iter(match=keys.EVENTS_PATTERN, count=1000)
            ]

        return await self._call(every())

    async def audited_ids(self) -> list[str]:
        """Every action Redis knows anything about: a card, a run record, a chain or anchor, or an entry in
        the unresolved index. What ``audit verify`` cross-checks (one SCAN pass; read-only)."""

        async def every() -> set[str]:
            ids = {text(member) for member in await self.client.zrange(keys.OPEN_KEY, 0, -1)}
            async for key in self.client.scan_iter(match=keys.ACTION_PATTERN, count=1000):
                name = text(key)
                tag, _, kind = name[3:].rpartition(":")
                if kind in ("card", "run", "audit", "events") and tag.startswith("{") and tag.endswith("}"):
                    ids.add(tag[1:-1])
            return ids

        return sorted(await self._call(every()))

    async def audit_evidence(self, action_ids: list[str]) -> list[AuditEvidence]:
        """What Redis holds about each action, in one round trip (read-only: no transition is applied)."""
        if not action_ids:
            return []
        pipe = self.client.pipeline(transaction=False)
        for action_id in action_ids:
            pipe.xrange(keys.events_key(action_id))
            pipe.hgetall(keys.audit_key(action_id))
            pipe.hgetall(card_key(action_id))
            pipe.hgetall(run_key(action_id))
            pipe.zscore(keys.OPEN_KEY, action_id)
        rows = await self._call(pipe.execute())
        out = []
        for i, action_id in enumerate(action_ids):
            events, anchor, card, run, indexed = rows[5 * i : 5 * i + 5]
            out.append(
                AuditEvidence(
                    action_id,
                    [(text(entry_id), fields.get(b"e", b"")) for entry_id, fields in events],
                    {text(k): text(v) for k, v in anchor.items()},
                    {text(k): v for k, v in card.items()},
                    {text(k): v for k, v in run.items()},
                    indexed is not None,
                )
            )
        return out

    async def record(self, action_id: str) -> dict[str, bytes]:
        """The raw run record (read-only: no transition is applied)."""
        found: dict[bytes, bytes] = await self._call(self.client.hgetall(run_key(action_id)))
        return {text(k): v for k, v in found.items()}

    # -- the id key ----------------------------------------------------------------------------

    async def pin_id_key(self, fingerprint: str) -> str:
        """The id key's fingerprint every sidecar on this Redis must share: the first one to start records its
        own; later ones read it back."""
        await self._call(self.client.set(keys.ID_KEY, fingerprint, nx=True))  # (SET NX GET needs Redis 7)
        pinned = await self._call(self.client.get(keys.ID_KEY))
        return fingerprint if pinned is None else text(pinned)
