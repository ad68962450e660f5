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
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from redis.exceptions import ResponseError

from countersign.errors import StoreUnavailable
from countersign.store import CardRecord, Issued, keys
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
