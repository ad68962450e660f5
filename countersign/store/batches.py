"""Scripts called together go to Redis together (RedisStore's one path to a script's reply), on one connection of
their own, each exchange bounded by one lazily armed timer.

At most EXCHANGES script exchanges are on their way to Redis at once; scripts called meanwhile wait for one to come
back and then go together, in one write: one wake-up of Redis for all of them (a write that wakes Redis costs more
CPU than anything the sidecar computes for a Confirm: notes/lean-cpu.md). Each script is still its own EVALSHA, its
own atomic step, with its own reply or error. A cluster client splits a pipeline by slot, so it keeps one call per
script through redis-py.

With one exchange at a time, one connection carries them all (``Exchanges``): the EVALSHAs packed by hiredis
(connect.py), written at once, their replies read in order. redis-py's client would spend, per command, a pool
checkout and check-in (a lock, its connection-count records), its retry wrapper, an ``asyncio.wait_for`` task around
the write and an ``asyncio.timeout`` around the read (~335k instructions per script call against ~88k here:
notes/lean-cpu3.md).
The bound stays real: every attempt of an exchange (write and read) has a deadline, the socket timeout after it
started (plus the connect timeout when it must connect first: the connect and its handshake); a watchdog timer
armed at most once per deadline (not per exchange) cancels an exchange still running past it, which then fails
as a timeout (the connection is dropped: redis-py disconnects a connection whose read was interrupted). A
timed-out or broken attempt is tried again on a new connection, up to ``retries`` times, as redis-py's ``Retry``
did (its default errors: connection errors and timeouts).
"""

from __future__ import annotations

import asyncio
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

EXCHANGES = 1  # script exchanges with Redis at once; the scripts called meanwhile go together in the next

Queued = tuple[str, list[str], list[Any], "asyncio.Future[Any]"]


class Exchanges:
    """One connection for script exchanges (one at a time), outside redis-py's pool: each attempt bounded by a
    deadline that a lazily armed watchdog enforces."""

    def __init__(self, pool: Any, *, attempt_timeout: float, retries: int, connect_timeout: float = 0.0) -> None:
        # no socket timeout on this connection: redis-py would arm a timer per write and per read; the attempt's
        # deadline bounds both (and the connect and its handshake: connect_timeout more when it must connect)
        self.conn = pool.connection_class(**{**pool.connection_kwargs, "socket_timeout": None})
        self.attempt_timeout, self.retries, self.connect_timeout = attempt_timeout, retries, connect_timeout
        self._runner: asyncio.Task[Any] | None = None  # the task of the attempt in flight
        self._deadline = 0.0
        self._expired = False  # the watchdog cancelled the attempt in flight
        self._watch: asyncio.TimerHandle | None = None

    async def close(self) -> None:
        await self.conn.disconnect()

    def _expire(self) -> None:
        """The watchdog: cancel an attempt past its deadline, or wait for the deadline of the one in flight."""
        self._watch = None
        if self._runner is None:
            return
        loop = asyncio.get_running_loop()
        if loop.time() >= self._deadline:
            self._expired = True
            self._runner.cancel()
        else:
            self._watch = loop.call_at(self._deadline, self._expire)

    async def run(self, commands: list[tuple[Any, ...]]) -> list[Any]:
        """The replies of ``commands`` (EVALSHA argument tuples), in order: each a value or the ResponseError that
        command got. Raises a redis-py ConnectionError or TimeoutError once every attempt failed."""
        packed = [chunk for command in commands for chunk in self.conn.pack_command(*command)]
        attempt = 0
        while True:
            try:
                return await self._attempt(packed, len(commands))
            except (RedisConnectionError, RedisTimeoutError, OSError):
                if attempt >= self.retries:
                    raise
                attempt += 1

    async def _attempt(self, packed: list[bytes], commands: int) -> list[Any]:
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()
        conn = self.conn
        limit = self.attempt_timeout + (0.0 if conn.is_connected else self.connect_timeout)
        self._runner, self._deadline, self._expired = task, loop.time() + limit, False
        if self._watch is None:
            self._watch = loop.call_at(self._deadline, self._expire)
        try:
            if not conn.is_connected:
                await conn.connect()  # as the pool connects (a Sentinel-managed connection asks for the master)
            await conn.send_packed_command(packed, check_health=False)
            replies: list[Any] = []
            for _ in range(commands):
                try:
                    replies.append(await conn.read_response())
                except ResponseError as exc:  # that script's error: the stream stays in step
                    replies.append(exc)
            return replies
        except asyncio.CancelledError:
            await conn.disconnect(nowait=True)  # a half-read stream is never used again
            if self._expired and task.uncancel() == 0:  # the watchdog's cancel, not the caller's
                raise RedisTimeoutError(f"no answer from Redis within {limit:g} s") from None
            raise
        except BaseException:
            await conn.disconnect(nowait=True)  # a half-read stream is never used again
            raise
        finally:
            self._runner = None


class ScriptBatches:
    def __init__(
        self,
        client: Any,
        scripts: dict[str, Any],
        op_timeout: float,
        *,
        attempt_timeout: float | None = None,
        retries: int = 0,
        connect_timeout: float = 0.0,
    ) -> None:
        self.client = client
        self.scripts = scripts
        self.op_timeout = op_timeout
        self.batching = isinstance(client, aioredis.Redis)  # one Redis server behind one client
        self.exchanges = (
            Exchanges(
                client.connection_pool,
                attempt_timeout=attempt_timeout or op_timeout,
                retries=retries,
                connect_timeout=connect_timeout,
            )
            if self.batching
            else None
        )
        self._exchanges = 0
        self._queue: list[Queued] = []
        self._flushes: set[asyncio.Task[None]] = set()

    async def close(self) -> None:
        if self.exchanges is not None:
            await self.exchanges.close()

    def _command(self, name: str, keys_: list[str], args: list[Any]) -> tuple[Any, ...]:
        return ("EVALSHA", self.scripts[name].sha, len(keys_), *keys_, *args)

    async def _load_and_run(self, name: str, keys_: list[str], args: list[Any]) -> Any:
        """A script Redis lost (restarted, flushed): redis-py's Script loads it and runs it."""
        return await self.scripts[name](keys=keys_, args=args)

    async def run(self, name: str, keys_: list[str], args: list[Any]) -> Any:
        """One script's reply. At most EXCHANGES script exchanges are on their way to Redis at once; scripts called
        meanwhile wait for one to come back and then go together, in one write (one wake-up of Redis for all of
        them; on this 2-core machine a write that wakes Redis costs more CPU than anything the sidecar computes for
        a Confirm). Each script is still its own atomic step. Bounded: the exchange in flight, then this one's
        (each at most op_timeout: its attempts' deadlines)."""
        if self.exchanges is None:
            return await self.scripts[name](keys=keys_, args=args)
        if self._exchanges < EXCHANGES:
            self._exchanges += 1
            try:
                (reply,) = await self.exchanges.run([self._command(name, keys_, args)])
                if isinstance(reply, NoScriptError):
                    return await self._load_and_run(name, keys_, args)
                if isinstance(reply, Exception):
                    raise reply
                return reply
            finally:
                self._exchange_done()
        waiter: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._queue.append((name, keys_, args, waiter))
        return await waiter

    def _take(self) -> list[Queued]:
        batch = [item for item in self._queue if not item[3].done()]  # a caller gone before it was sent: not sent
        self._queue = []
        return batch

    def _exchange_done(self) -> None:
        self._exchanges -= 1
        batch = self._take()
        if batch:
            self._exchanges += 1
            flush = asyncio.ensure_future(self._flush(batch))
            self._flushes.add(flush)
            flush.add_done_callback(self._flushes.discard)

    async def _flush(self, batch: list[Queued]) -> None:
        """The scripts that waited, one write per batch; then, in this same task, the scripts that queued meanwhile
        (under load a flush follows a flush: one task for the run of them, not one per batch)."""
        try:
            while batch:
                await self._send(batch)
                batch = self._take()
        except BaseException:
            self._exchange_done()  # cancelled (shutdown): what queued meanwhile still gets its answer or error
            raise
        self._exchanges -= 1

    async def _send(self, batch: list[Queued]) -> None:
        """One write of the scripts of ``batch``; each caller gets its own reply (or its own error)."""
        assert self.exchanges is not None
        try:
            try:
                replies = await self.exchanges.run([self._command(name, keys_, args) for name, keys_, args, _ in batch])
            except Exception as exc:  # the callers' _call turns a Redis failure into StoreUnavailable
                for *_, waiter in batch:
                    if not waiter.done():
                        waiter.set_exception(exc)
                return
            for (name, keys_, args, waiter), reply in zip(batch, replies, strict=True):
                if isinstance(reply, NoScriptError):  # Redis lost its scripts (restarted, flushed): load, run
                    try:
                        reply = await self._load_and_run(name, keys_, args)
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
