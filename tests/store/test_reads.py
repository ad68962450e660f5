"""The store's reads and lists against a real redis-server (store/redis_reads.py): the reconciler's index and
scans, the audit evidence ``audit verify`` cross-checks, the id key's pin, and the two store calls the path makes
only on its refusals (a quota given back, a claim too few replicas acknowledged). Each was reached only through
tests/e2e before, so ``make mutate`` saw none of it tested (issue 11, "Test strength").

Each test has a redis-server of its own (a SCAN or an index read sees only what the test wrote).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from countersign.errors import Unavailable
from countersign.store import Anchor, CardRecord, Issued, QuotaCount, ReconcileWork, RunSummary, Won, keys
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


def aid() -> str:
    return os.urandom(16).hex()


def now_ms() -> int:
    return int(time.time() * 1000)


def card(tool: str = "create_todo") -> CardRecord:
    body = json.dumps({"expires_at_ms": now_ms() + 60_000, "tool": tool}).encode()
    return CardRecord("k1", tool, body, "card-mac", B)


async def running(store: RedisStore, tool: str = "create_todo", lease_ms: int = 30_000) -> str:
    action = aid()
    assert isinstance(await store.issue(action, card(tool), 60_000), Issued)
    assert isinstance(await store.claim(action, B, ",", "c-1", lease_ms), Won)
    return action


# -- what one user turn did ------------------------------------------------------------------------------------------


async def test_a_turn_recalls_what_it_remembered_in_order_the_last_keep_entries(store: RedisStore) -> None:
    for entry in (b"read:1", b"read:2", b"proposed:3"):
        await store.remember("turn-a", entry, 60_000)
    assert await store.recall("turn-a") == [b"read:1", b"read:2", b"proposed:3"]
    await store.remember("turn-a", b"read:4", 60_000, keep=2)
    assert await store.recall("turn-a") == [b"proposed:3", b"read:4"]
    assert await store.recall("turn-b") == []
    for i in range(70):  # by default a turn keeps its last 64 entries
        await store.remember("turn-c", b"e%d" % i, 60_000)
    assert await store.recall("turn-c") == [b"e%d" % i for i in range(6, 70)]
    assert 0 < await store.client.pttl(keys.turn_list_key("turn-a")) <= 60_000


# -- the reconciler's index and scans ------------------------------------------------------------------------------


async def test_the_open_index_gives_what_is_due_oldest_first_at_most_count(store: RedisStore) -> None:
    a, b, c, later = aid(), aid(), aid(), aid()
    for action, due in ((b, 2_000), (a, 1_000), (c, 3_000), (later, 9_000)):
        await store.open_add(action, due)
    assert await store.open_due(3_000, 10) == [a, b, c]  # due at exactly now is due
    assert await store.open_due(2_999, 10) == [a, b]
    assert await store.open_due(3_000, 2) == [a, b]
    await store.open_add(a, 5_000)  # looked at again later: moved, not duplicated
    assert await store.open_due(9_000, 10) == [b, c, a, later]
    await store.open_remove(b)
    await store.open_remove(aid())  # one never indexed: nothing happens
    assert await store.open_due(9_000, 10) == [c, a, later]
    assert await store.open_due(999, 10) == []


async def test_a_scan_of_run_records_finds_each_once_and_nothing_else(store: RedisStore) -> None:
    runs = {await running(store) for _ in range(25)}
    ready = aid()
    await store.issue(ready, card(), 60_000)  # a card: no run record yet
    await store.open_add(aid(), 1)
    seen: list[str] = []
    cursor, steps = 0, 0
    while True:
        cursor, found = await store.scan_runs(cursor, 5)
        seen += found
        steps += 1
        if cursor == 0:
            break
    assert sorted(seen) == sorted(runs) and len(seen) == len(runs)
    assert steps > 1, "the cursor is handed back, so a sweep can be spread over ticks"


async def test_run_states_read_each_record_in_the_order_asked(store: RedisStore) -> None:
    before = now_ms()
    first, second = await running(store, "create_todo", 30_000), await running(store, "delete_todo", 50_000)
    missing = aid()
    states = await store.run_states([second, missing, first])
    assert [(s.state, s.tool) for s in states] == [("running", "delete_todo"), ("", ""), ("running", "create_todo")]
    assert before + 50_000 <= states[0].lease_ms <= now_ms() + 50_000
    assert before + 30_000 <= states[2].lease_ms <= now_ms() + 30_000
    assert states[1] == RunSummary("", 0, 0, "")
    assert await store.run_states([]) == []
    # an unknown action a reconciler has looked at: due again when it said
    assert await store.settle(first, "c-1", "unknown", b"", "", "DOWNSTREAM_TIMEOUT", "", 60_000) == "ok"
    assert isinstance(await store.reconcile_claim(first, "r-1", 5_000), ReconcileWork)
    assert await store.reconcile_defer(first, "r-1", 40_000) == "ok"
    (summary,) = await store.run_states([first])
    assert summary.state == "unknown" and before + 40_000 <= summary.due_ms <= now_ms() + 40_000
    assert await store.run_tool(second) == "delete_todo"
    assert await store.run_tool(missing) == ""


# -- audit evidence -----------------------------------------------------------------------------------------------


async def test_audit_evidence_is_what_redis_holds_of_each_action(store: RedisStore) -> None:
    chained, issued_only, indexed_only = await running(store), aid(), aid()
    await store.audit_append(
        chained, (0, ""), [(b'{"t":"issued"}', "m1"), (b'{"t":"claimed"}', "m2")], Anchor("k1", "am"), "keep", 0
    )
    await store.issue(issued_only, card(), 60_000)
    await store.open_add(indexed_only, 1)
    await store.client.set("cs:quota:{t}", "x")  # not an action's key: never taken for one
    await store.client.set("cs:{x}:other", "x")
    await store.client.hset("bq:{job-1}:run", "st", "running")  # another application's key, shaped like ours

    assert await store.audit_actions() == [chained]
    assert await store.audited_ids() == sorted([chained, issued_only, indexed_only])
    # any one of an action's keys makes it known: a run record, an anchor or a chain alone, an index entry
    alone = {kind: aid() for kind in ("run", "audit", "events")}
    await store.client.hset(f"cs:{{{alone['run']}}}:run", "st", "unknown")
    await store.client.hset(f"cs:{{{alone['audit']}}}:audit", "seq", "1")
    await store.client.xadd(f"cs:{{{alone['events']}}}:events", {"e": b"{}"})
    also_indexed = [aid(), aid(), aid()]
    for action in also_indexed:
        await store.open_add(action, 5)
    every = [chained, issued_only, indexed_only, *alone.values(), *also_indexed]
    assert await store.audited_ids() == sorted(every)
    assert sorted(await store.audit_actions()) == sorted([chained, alone["events"]])
    events = await store.events(chained)
    assert [e for _, e in events] == [b'{"t":"issued"}', b'{"t":"claimed"}']
    assert all(entry_id.count("-") == 1 for entry_id, _ in events)  # stream entry ids, as text

    got = await store.audit_evidence([chained, issued_only, indexed_only])
    assert [e.action_id for e in got] == [chained, issued_only, indexed_only]
    assert got[0].events == events
    assert got[0].anchor == {"seq": "2", "head": "m2", "kid": "k1", "mac": "am"}
    assert got[0].card == {} and got[0].run["st"] == b"running" and got[0].run["tool"] == b"create_todo"
    assert got[0].indexed is False
    assert (got[1].events, got[1].anchor, got[1].run) == ([], {}, {}) and got[1].card["tool"] == b"create_todo"
    assert (got[2].events, got[2].anchor, got[2].card, got[2].run, got[2].indexed) == ([], {}, {}, {}, True)
    assert await store.audit_evidence([]) == []
    # an entry written by hand without the event field: read as empty (audit verify reports it), never a crash
    entry_id = await store.client.xadd(keys.events_key(chained), {"x": b"1"})
    (evidence,) = await store.audit_evidence([chained])
    assert evidence.events[-1] == (entry_id.decode(), b"")


# -- the id key's pin ---------------------------------------------------------------------------------------------


async def test_the_first_sidecar_pins_its_id_key_and_later_ones_read_it_back(store: RedisStore) -> None:
    assert await store.pin_id_key("k0:aaaa") == "k0:aaaa"
    assert await store.pin_id_key("k1:bbbb") == "k0:aaaa"
    assert await store.pin_id_key("k0:aaaa") == "k0:aaaa"


# -- what the path calls on its refusals ---------------------------------------------------------------------------


async def test_members_given_back_to_a_quota_are_no_longer_counted(store: RedisStore) -> None:
    assert await store.quota("t1", [], ["a:1", "a:2"], 2, 60_000) == QuotaCount(True, 2)
    assert (await store.quota("t1", [], ["a:3"], 2, 60_000)).counted is False
    await store.quota_forget("t1", ["a:2", "a:9"])
    assert await store.quota("t1", [], ["a:3"], 2, 60_000) == QuotaCount(True, 2)
    await store.quota_forget("t2", ["a:1"])  # another tenant's: t1 keeps its count
    assert (await store.quota("t1", [], ["a:4"], 2, 60_000)).counted is False


async def test_a_claim_no_replica_acknowledged_is_refused_and_the_card_stays_ready(tmp_path: Path) -> None:
    proc = processes.start_redis(tmp_path)
    url = proc.info["url"]
    waiting = RedisStore.from_url(url, socket_timeout=2, connect_timeout=2, retries=0, wait_replicas=1)
    waiting.wait_timeout_ms = 20
    plain = RedisStore.from_url(url, socket_timeout=2, connect_timeout=2, retries=0)
    try:
        action = aid()
        assert isinstance(await waiting.issue(action, card(), 60_000), Issued)
        with pytest.raises(Unavailable) as info:
            await waiting.claim(action, B, ",", "c-1", 30_000)
        err = info.value
        assert (err.code, err.reason) == (grpc.StatusCode.UNAVAILABLE, "REPLICAS_NOT_ACKNOWLEDGED")
        assert err.message == "0 of 1 replicas acknowledged the claim; not acting on it"
        assert err.retry_after == 1.0
        assert isinstance(await plain.claim(action, B, ",", "c-2", 30_000), Won)  # put back: claimable again
        with pytest.raises(Unavailable) as info:  # any transition the sidecar acts on says which one it was
            await waiting.settle(action, "c-2", "settled", b"out", "omac", "", "SUCCEEDED", 60_000)
        assert info.value.message == "0 of 1 replicas acknowledged the settle; not acting on it"
    finally:
        await waiting.close()
        await plain.close()
        proc.stop()
