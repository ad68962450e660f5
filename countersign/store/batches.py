"""Scripts called together go to Redis together (RedisStore's one path to a script's reply).

At most EXCHANGES script exchanges are on their way to Redis at once; scripts called meanwhile wait for one to come
back and then go together, in one pipeline: one write to the socket and one wake-up of Redis for all of them (a
write that wakes Redis costs more CPU than anything the sidecar computes for a Confirm: notes/lean-cpu.md). Each
script is still its own EVALSHA, its own atomic step, with its own reply or error. A cluster client splits a
pipeline by slot, so it keeps one call per script.
"""

from __future__ import annotations

import asyncio
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import NoScriptError

EXCHANGES = 1  # script exchanges with Redis at once; the scripts called meanwhile go together in the next


class ScriptBatches:
    def __init__(self, client: Any, scripts: dict[str, Any], op_timeout: float) -> None:
        self.client = client
        self.scripts = scripts
        self.op_timeout = op_timeout
        self.batching = isinstance(client, aioredis.Redis)  # one Redis server behind one client
        self._exchanges = 0
        self._queue: list[tuple[str, list[str], list[Any], asyncio.Future[Any]]] = []
        self._flushes: set[asyncio.Task[None]] = set()

    async def run(self, name: str, keys_: list[str], args: list[Any]) -> Any:
        """One script's reply. At most EXCHANGES script exchanges are on their way to Redis at once; scripts called
        meanwhile wait for one to come back and then go together, in one pipeline (one write to the socket, one
        wake-up of Redis for all of them; on this 2-core machine a write that wakes Redis costs more CPU than
        anything the sidecar computes for a Confirm). Each script is still its own atomic step."""
        if not self.batching:
            return await self.scripts[name](keys=keys_, args=args)
        if self._exchanges < EXCHANGES:
            self._exchanges += 1
            try:
                return await self.scripts[name](keys=keys_, args=args)
            finally:
                self._exchange_done()
        waiter: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._queue.append((name, keys_, args, waiter))
        return await waiter

    def _exchange_done(self) -> None:
        self._exchanges -= 1
        batch = [item for item in self._queue if not item[3].done()]  # a caller gone before it was sent: not sent
        self._queue = []
        if batch:
            self._exchanges += 1
            flush = asyncio.ensure_future(self._flush(batch))
            self._flushes.add(flush)
            flush.add_done_callback(self._flushes.discard)

    async def _flush(self, batch: list[tuple[str, list[str], list[Any], asyncio.Future[Any]]]) -> None:
        """One pipeline of the scripts that waited; each caller gets its own reply (or its own error)."""
        try:
            pipe = self.client.pipeline(transaction=False)
            for name, keys_, args, _ in batch:
                pipe.execute_command("EVALSHA", self.scripts[name].sha, len(keys_), *keys_, *args)
            try:
                async with asyncio.timeout(self.op_timeout):
                    replies = await pipe.execute(raise_on_error=False)
            except Exception as exc:  # the callers' _call turns a Redis failure into StoreUnavailable
                for *_, waiter in batch:
                    if not waiter.done():
                        waiter.set_exception(exc)
                return
            for (name, keys_, args, waiter), reply in zip(batch, replies, strict=True):
                if isinstance(reply, NoScriptError):  # Redis lost its scripts (restarted, flushed): load, run
                    try:
                        reply = await self.scripts[name](keys=keys_, args=args)
                    except Exception as exc:
                        reply = exc
                if waiter.done():
                    continue
                if isinstance(reply, Exception):
                    waiter.set_exception(reply)
                else:
                    waiter.set_result(reply)
        finally:
            for *_, waiter in batch:  # cancelled (shutdown): no caller waits for ever
                if not waiter.done():
                    waiter.set_exception(ConnectionError("the store call was cancelled"))
            self._exchange_done()
