"""Scripts called together go to Redis together (store/batches.py, RedisStore's one path to a script), against a
real redis-server.

While one script exchange is on its way, the scripts called meanwhile wait for it and then go in one pipeline: one
write, one wake-up of Redis (issue 17: on two shared cores the write that wakes Redis was the largest single cost
of a Confirm). What must not change: each caller gets its own reply or its own error, a script Redis lost is loaded
again, and a caller gone before its script was sent never has it run.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from redis.exceptions import ResponseError

from countersign.errors import StoreUnavailable
from countersign.store import CardRecord, Issued, RunRecord, Won, keys
from countersign.store.redis_store import RedisStore
from countersign.testing import processes

B = "owner-binding"


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[RedisStore]:
    proc = processes.start_redis(tmp_path)
    s = RedisStore.from_url(proc.info["url"], socket_timeout=2, connect_timeout=2, retries=0)
    try:
        yield s
    finally:
        await s.close()
        proc.stop()


def card() -> CardRecord:
    body = json.dumps({"expires_at_ms": int(time.time() * 1000) + 60_000, "tool": "create_todo"}).encode()
    return CardRecord("k1", "create_todo", body, "card-mac", B)


async def reads_processed(store: RedisStore) -> int:
    return int((await store.client.info("stats"))["total_reads_processed"])


async def test_scripts_called_together_take_fewer_writes_and_each_gets_its_own_reply(store: RedisStore) -> None:
    await store.peek(os.urandom(16).hex())  # the connection made and the scripts known
    actions = [os.urandom(16).hex() for _ in range(40)]
    before = await reads_processed(store)
    issued = await asyncio.gather(*(store.issue(a, card(), 60_000) for a in actions))
    reads = await reads_processed(store) - before
    assert all(isinstance(i, Issued) for i in issued)
    again = await asyncio.gather(*(store.issue(a, card(), 60_000) for a in actions))
    assert all(isinstance(c, CardRecord) for c in again)  # each its own: the card that exists now
    assert reads < 20, f"{reads} reads by Redis for 40 scripts: they were not sent together"


async def test_an_error_in_one_script_of_a_batch_is_its_callers_alone(store: RedisStore) -> None:
    await store.peek(os.urandom(16).hex())
    good = [os.urandom(16).hex() for _ in range(10)]
    bad_action = os.urandom(16).hex()
    bad = store._script(  # a TTL that is not a number: Redis refuses this one script
        "issue", [keys.card_key(bad_action), keys.run_key(bad_action)], [B, "t", b"{}", "m", "k1", "soon", "", "", ""]
    )
    results = await asyncio.gather(*(store.issue(a, card(), 60_000) for a in good), bad, return_exceptions=True)
    assert all(isinstance(r, Issued) for r in results[:-1])
    assert isinstance(results[-1], StoreUnavailable | ResponseError), results[-1]


async def test_scripts_redis_lost_are_loaded_again_inside_a_batch(store: RedisStore) -> None:
    await store.peek(os.urandom(16).hex())
    await store.client.script_flush()
    actions = [os.urandom(16).hex() for _ in range(20)]
    issued = await asyncio.gather(*(store.issue(a, card(), 60_000) for a in actions))
    assert all(isinstance(i, Issued) for i in issued)


async def test_a_caller_gone_before_its_script_was_sent_never_has_it_run(store: RedisStore) -> None:
    await store.peek(os.urandom(16).hex())
    first, gone = os.urandom(16).hex(), os.urandom(16).hex()
    await store.client.execute_command("CLIENT", "PAUSE", 400, "ALL")  # the first exchange waits on Redis
    leader = asyncio.ensure_future(store.issue(first, card(), 60_000))
    await asyncio.sleep(0.05)
    follower = asyncio.ensure_future(store.issue(gone, card(), 60_000))
    await asyncio.sleep(0.05)
    follower.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await follower
    assert isinstance(await leader, Issued)
    await asyncio.sleep(0.1)
    assert await store.peek(gone) is None
    assert await store.peek(first) is not None


# -- the exchanges' own bound (batches.Exchanges: one connection, a deadline per attempt, a lazily armed watchdog) --


async def test_a_stopped_redis_fails_a_script_call_within_its_attempts_deadlines_and_the_next_call_works(
    tmp_path: Path,
) -> None:
    proc = processes.start_redis(tmp_path)
    s = RedisStore.from_url(proc.info["url"], socket_timeout=0.3, connect_timeout=0.3, retries=1)
    try:
        await s.peek(os.urandom(16).hex())  # connected
        proc.pause()  # SIGSTOP: the socket takes the write, nothing answers
        try:
            started = time.monotonic()
            calls = [s.peek(os.urandom(16).hex()) for _ in range(3)]  # one leads, two wait for it and batch
            results = await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True), 10)  # fails, not hangs
            took = time.monotonic() - started
        finally:
            proc.resume()
        assert all(isinstance(r, StoreUnavailable) for r in results), results
        # each attempt ends at its deadline (0.6 s), two attempts per exchange; the waiters' exchange after it
        assert took < 2 * 2 * 0.6 + 0.5, took
        assert await s.peek(os.urandom(16).hex()) is None  # a new connection, replies in step again
        first = os.urandom(16).hex()
        assert isinstance(await s.issue(first, card(), 60_000), Issued)
        assert isinstance(await s.peek(first), CardRecord)
    finally:
        await s.close()
        proc.stop()


async def test_a_caller_cancelled_during_its_exchange_is_cancelled_not_timed_out_and_the_stream_stays_in_step(
    store: RedisStore,
) -> None:
    await store.peek(os.urandom(16).hex())
    await store.client.execute_command("CLIENT", "PAUSE", 300, "ALL")
    leader = asyncio.ensure_future(store.peek(os.urandom(16).hex()))
    await asyncio.sleep(0.05)
    leader.cancel()
    with pytest.raises(asyncio.CancelledError):
        await leader
    await asyncio.sleep(0.3)
    action = os.urandom(16).hex()
    assert isinstance(await store.issue(action, card(), 60_000), Issued)  # not the cancelled call's reply
    assert isinstance(await store.peek(action), CardRecord)


async def test_a_restarted_redis_is_reached_again_by_the_retry(tmp_path: Path) -> None:
    proc = processes.start_redis(tmp_path)
    url = proc.info["url"]
    s = RedisStore.from_url(url, socket_timeout=1, connect_timeout=1, retries=1)
    again: subprocess.Popen[bytes] | None = None
    try:
        await s.peek(os.urandom(16).hex())
        proc.stop()
        again = _redis_at(tmp_path, url)
        action = os.urandom(16).hex()
        assert isinstance(await s.issue(action, card(), 60_000), Issued)  # the dead connection, then a new one
    finally:
        await s.close()
        if again is not None:
            again.terminate()
            again.wait(10)


def _redis_at(work: Path, url: str) -> subprocess.Popen[bytes]:
    """A new redis-server on the unix socket of ``url`` (the one stopped), once it accepts connections."""
    sock = url.removeprefix("unix://")
    Path(sock).unlink(missing_ok=True)
    popen = subprocess.Popen(
        ["redis-server", "--port", "0", "--unixsocket", sock, "--save", "", "--appendonly", "no", "--dir", str(work)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while not Path(sock).exists():
        assert time.monotonic() < deadline, "redis-server did not start"
        time.sleep(0.02)
    return popen


class _LoseOneReply:
    """A TCP proxy to a redis-server's unix socket that, once armed, forwards the next command and then resets the
    client's connection instead of passing the reply on: Redis ran the script, its caller never heard."""

    def __init__(self, sock: str) -> None:
        self.sock, self.armed, self.lost = sock, False, 0
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def _serve(self, creader: asyncio.StreamReader, cwriter: asyncio.StreamWriter) -> None:
        ureader, uwriter = await asyncio.open_unix_connection(self.sock)

        async def up() -> None:
            while data := await creader.read(65536):
                uwriter.write(data)
                await uwriter.drain()

        async def down() -> None:
            while data := await ureader.read(65536):
                if self.armed:
                    self.armed, self.lost = False, self.lost + 1
                    cwriter.transport.abort()
                    return
                cwriter.write(data)
                await cwriter.drain()

        with contextlib.suppress(OSError, ConnectionError):
            await asyncio.gather(up(), down())
        uwriter.close()
        cwriter.close()

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()


async def test_a_claim_whose_reply_was_lost_is_retried_and_still_won_once_by_its_own_claim_id(tmp_path: Path) -> None:
    """An attack on the exchanges' retry: the connection breaks after Redis ran claim.lua and before its reply
    arrived. The retry sends the same claim again on a new connection; claim.lua answers the holder of the claim id
    "won" again (nothing changes twice), and any other claimer still loses."""
    proc = processes.start_redis(tmp_path)
    proxy = _LoseOneReply(proc.info["url"].removeprefix("unix://"))
    port = await proxy.start()
    s = RedisStore.from_url(f"redis://127.0.0.1:{port}", socket_timeout=2, connect_timeout=2, retries=1)
    try:
        action = os.urandom(16).hex()
        assert isinstance(await s.issue(action, card(), 60_000), Issued)
        proxy.armed = True
        assert isinstance(await s.claim(action, B, ",", "claim-1", 30_000), Won)
        assert proxy.lost == 1, "the first reply was lost on the way"
        run = await s.peek(action)
        assert isinstance(run, RunRecord) and run.state == "running"
        assert await s.client.hget(keys.run_key(action), "claim") == b"claim-1"  # claimed once, by its claim id
        assert not isinstance(await s.claim(action, B, ",", "claim-2", 30_000), Won)  # a second claimer loses
    finally:
        await s.close()
        await proxy.close()
        proc.stop()
