"""Every transition of every script, against a real redis-server (docs/design.md §7).

Two tables drive it: ``states.TRANSITIONS`` (each edge of the action's state machine is taken through the store
and the record's state read back), and ``replies.REPLIES`` (each reply shape of each script is produced once and
decoded into its typed result: ``lost`` and ``gone`` included). A shape without a scenario fails the coverage test.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from countersign.store import (
    Anchor,
    Appended,
    Busy,
    CardRecord,
    Chained,
    ClaimApproval,
    ContBusy,
    ContRecord,
    ContReleased,
    ContSettled,
    ContWon,
    GrantCreated,
    GrantRecord,
    GrantRevoked,
    GrantsFull,
    GrantTaken,
    Issued,
    LeaseLost,
    NotClaimed,
    NotReady,
    QuotaCount,
    ReconcileWork,
    Refused,
    Rejected,
    Resolved,
    RunRecord,
    Won,
    keys,
    states,
)
from countersign.store.redis_store import RedisStore
from countersign.store.replies import REPLIES
from countersign.testing import processes

B = "owner-binding"
LEASE = 30_000


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Any:
    proc = processes.start_redis(tmp_path_factory.mktemp("scripts"))
    yield proc.info["url"]
    proc.stop()


@pytest.fixture
async def store(redis_url: str) -> AsyncIterator[RedisStore]:
    s = RedisStore.from_url(redis_url, socket_timeout=2, connect_timeout=2, retries=0)
    yield s
    await s.close()


def aid() -> str:
    return os.urandom(16).hex()


def card(expires_in_ms: int = 60_000, tool: str = "create_todo", binding: str = B) -> CardRecord:
    body = json.dumps({"expires_at_ms": int(time.time() * 1000) + expires_in_ms, "tool": tool}).encode()
    return CardRecord("k1", tool, body, "card-mac", binding)


DIG = "sha256:the-digest-of-what-the-user-saw"


def signed_card(risk: str = "medium") -> CardRecord:
    """A card whose Confirm needs an approval of DIG (its hash fields, as issue.lua writes them)."""
    body = json.dumps(
        {
            "expires_at_ms": int(time.time() * 1000) + 60_000,
            "tool": "delete_todo",
            "approval": "signed",
            "approval_digest": DIG,
            "risk": risk,
        }
    ).encode()
    return CardRecord("k1", "delete_todo", body, "card-mac", B, approval="signed", digest=DIG, risk=risk)


def approved(digest: str = DIG, risks: str = ",low,medium,", failed: str = "", signed: str = ",,") -> ClaimApproval:
    return ClaimApproval(digest, risks, failed, signed)


async def issued(store: RedisStore, expires_in_ms: int = 60_000) -> str:
    action = aid()
    assert isinstance(await store.issue(action, card(expires_in_ms), 60_000), Issued)
    return action


async def running(store: RedisStore, lease_ms: int = LEASE, expires_in_ms: int = 60_000) -> tuple[str, str]:
    action = await issued(store, expires_in_ms)
    claim = "c-" + os.urandom(4).hex()
    assert isinstance(await store.claim(action, B, ",", claim, lease_ms), Won)
    return action, claim


async def settled(store: RedisStore, receipt: str = "SUCCEEDED") -> tuple[str, str]:
    action, claim = await running(store)
    assert await store.settle(action, claim, "settled", b"outcome", "omac", "", receipt, 60_000) == "ok"
    return action, claim


async def unknown(store: RedisStore) -> tuple[str, str]:
    action, claim = await running(store)
    assert await store.settle(action, claim, "unknown", b"", "", "DOWNSTREAM_TIMEOUT", "", 60_000) == "ok"
    return action, claim


async def state_of(store: RedisStore, action: str) -> str:
    return (await store.record(action)).get("st", b"").decode()


# -- the state machine, edge by edge ----------------------------------------------------------------------------


async def ready_to_running(store: RedisStore) -> str:
    action, _ = await running(store)
    return await state_of(store, action)


async def ready_to_rejected(store: RedisStore) -> str:
    action = await issued(store)
    assert isinstance(await store.reject(action, B, b"rejected", "omac", 60_000), Rejected)
    record = await store.record(action)
    return "rejected" if (record["st"], record["reason"]) == (b"settled", b"REJECTED") else record["st"].decode()


async def ready_to_expired(store: RedisStore) -> str:
    action = await issued(store, expires_in_ms=-1)  # the sealed expiry has passed, whatever the TTL says
    assert await store.claim(action, B, ",", "c", LEASE) == Refused("expired")
    return "expired" if await store.peek(action) is None else "still there"


async def running_to_settled(store: RedisStore) -> str:
    action, _ = await settled(store)
    return await state_of(store, action)


async def running_to_unknown(store: RedisStore) -> str:
    action, _ = await running(store, lease_ms=1)
    await asyncio.sleep(0.01)
    found = await store.peek(action)  # a lapsed lease: unknown, never ready
    assert isinstance(found, RunRecord) and found.reason == "LEASE_LAPSED"
    return await state_of(store, action)


async def running_to_ready(store: RedisStore) -> str:
    action, claim = await running(store)
    assert await store.release(action, claim) == "ready"
    return "ready" if isinstance(await store.peek(action), CardRecord) else "not ready"


async def unknown_to_settled(store: RedisStore) -> str:
    action, claim = await unknown(store)
    assert await store.settle(action, claim, "settled", b"outcome", "omac", "", "", 60_000) == "ok"
    return await state_of(store, action)


async def unknown_to_review(store: RedisStore) -> str:
    action, _ = await unknown(store)
    work = await store.reconcile_claim(action, "r-1", 5_000)
    assert isinstance(work, ReconcileWork)
    assert await store.settle(action, "r-1", "review", b"review", "omac", "NO_LOOKUP", "", 60_000) == "ok"
    return await state_of(store, action)


async def unknown_to_unknown(store: RedisStore) -> str:
    action, _ = await unknown(store)
    assert isinstance(await store.reconcile_claim(action, "r-1", 5_000), ReconcileWork)
    assert await store.reconcile_defer(action, "r-1", 1_000) == "ok"
    return await state_of(store, action)


async def unknown_to_ready(store: RedisStore) -> str:
    action, claim = await running(store, lease_ms=1)
    await asyncio.sleep(0.01)
    assert isinstance(await store.peek(action), RunRecord)  # unknown now
    assert await store.release(action, claim) == "ready"
    return "ready" if isinstance(await store.peek(action), CardRecord) else "not ready"


async def review_to_settled(store: RedisStore) -> str:
    action, _ = await unknown(store)
    assert isinstance(await store.reconcile_claim(action, "r-1", 5_000), ReconcileWork)
    await store.settle(action, "r-1", "review", b"review", "omac", "NO_LOOKUP", "", 60_000)
    assert await store.resolve(action, b"resolved", "omac", "", "SUCCEEDED", 60_000) == Resolved(True)
    return await state_of(store, action)


async def none_to_running(store: RedisStore) -> str:
    action = aid()
    assert isinstance(await store.grant_run(action, card(), "c-g", LEASE, "g-1"), Won)
    return await state_of(store, action)


EDGES: dict[tuple[str, str], Callable[[RedisStore], Awaitable[str]]] = {
    ("none", "running"): none_to_running,
    ("ready", "running"): ready_to_running,
    ("ready", "rejected"): ready_to_rejected,
    ("ready", "expired"): ready_to_expired,
    ("running", "settled"): running_to_settled,
    ("running", "unknown"): running_to_unknown,
    ("running", "ready"): running_to_ready,
    ("unknown", "settled"): unknown_to_settled,
    ("unknown", "review"): unknown_to_review,
    ("unknown", "unknown"): unknown_to_unknown,
    ("unknown", "ready"): unknown_to_ready,
    ("review", "settled"): review_to_settled,
}


def test_every_edge_of_the_state_machine_has_a_scenario() -> None:
    table = {(a, b) for a, targets in states.TRANSITIONS.items() for b in targets}
    assert set(EDGES) == table


@pytest.mark.parametrize(("before", "after"), sorted(EDGES))
async def test_each_transition_of_the_table_leaves_the_state_it_names(
    store: RedisStore, before: str, after: str
) -> None:
    assert await EDGES[(before, after)](store) == after


# -- every reply shape of every script ----------------------------------------------------------------------------


async def cont_opened(store: RedisStore, action: str, binding: str = B) -> ContRecord | Refused:
    return await store.cont_open(action, binding, "k1", b'{"question":"q"}', "turn-1", "cmac", 60_000)


async def cont_ready(store: RedisStore) -> str:
    action = await issued(store)
    assert (await cont_opened(store, action)) == ContRecord("pending", "k1", b'{"question":"q"}', "turn-1", "cmac")
    claim = "c-" + os.urandom(4).hex()
    assert isinstance(await store.claim(action, B, ",", claim, LEASE), Won)
    assert await store.settle(action, claim, "settled", b"outcome", "omac", "", "SUCCEEDED", 60_000) == "ok"
    return action


async def cont_running(store: RedisStore) -> str:
    action = await cont_ready(store)
    assert isinstance(await store.cont_claim(action, B, LEASE, "g-1"), ContWon)
    return action


SHAPES: dict[tuple[str, str], Callable[[RedisStore], Awaitable[bool]]] = {}


def shape(
    script: str, kind: str
) -> Callable[[Callable[[RedisStore], Awaitable[bool]]], Callable[[RedisStore], Awaitable[bool]]]:
    def register(scenario: Callable[[RedisStore], Awaitable[bool]]) -> Callable[[RedisStore], Awaitable[bool]]:
        SHAPES[(script, kind)] = scenario
        return scenario

    return register


@shape("issue", "issued")
async def _(s: RedisStore) -> bool:
    return isinstance(await s.issue(aid(), card(), 60_000), Issued)


@shape("issue", "card")
async def _(s: RedisStore) -> bool:
    action = await issued(s)
    found = await s.issue(action, card(), 60_000)  # the card that is there, not a second one
    return isinstance(found, CardRecord) and (found.kid, found.tool, found.mac, found.binding) == (
        "k1",
        "create_todo",
        "card-mac",
        B,
    )


@shape("issue", "run")
async def _(s: RedisStore) -> bool:
    action, _ = await running(s)
    found = await s.issue(action, card(), 60_000)
    return isinstance(found, RunRecord) and found.state == "running" and found.binding == B


@shape("claim", "won")
async def _(s: RedisStore) -> bool:
    action = await issued(s)
    won = await s.claim(action, B, ",", "c", LEASE)
    return isinstance(won, Won) and (won.card.kid, won.card.tool, won.card.mac, won.card.binding) == (
        "k1",
        "create_todo",
        "card-mac",
        B,
    )


@shape("claim", "run")
async def _(s: RedisStore) -> bool:
    action, _ = await running(s)
    found = await s.claim(action, B, ",", "another", LEASE)
    return isinstance(found, RunRecord) and found.state == "running" and found.tool == "create_todo"


@shape("claim", "expired")
async def _(s: RedisStore) -> bool:
    return await s.claim(aid(), B, ",", "c", LEASE) == Refused("expired")


@shape("claim", "forbidden")
async def _(s: RedisStore) -> bool:
    action = await issued(s)
    return await s.claim(action, "someone-else", ",", "c", LEASE) == Refused("forbidden") and isinstance(
        await s.peek(action), CardRecord
    )


@shape("claim", "role")
async def _(s: RedisStore) -> bool:
    action = await issued(s)
    return await s.claim(action, B, ",create_todo,", "c", LEASE) == Refused("role", "create_todo") and isinstance(
        await s.peek(action), CardRecord
    )


@shape("claim", "approval_required")
async def _(s: RedisStore) -> bool:
    action = await s_issue(s, signed_card())
    required = await s.claim(action, B, ",", "c", LEASE) == Refused("approval_required", check="card")
    plain = await issued(s)  # a card issued as none, under a registry that requires a signed approval now
    registry = await s.claim(plain, B, ",", "c", LEASE, approved("", signed=",create_todo,")) == Refused(
        "approval_required", check="registry"
    )
    untouched = [isinstance(await s.peek(a), CardRecord) for a in (action, plain)]
    return required and registry and all(untouched)


@shape("claim", "approval_invalid")
async def _(s: RedisStore) -> bool:
    action = await s_issue(s, signed_card(risk="high"))
    answers = [
        await s.claim(action, B, ",", "c", LEASE, approved(failed="signature")),  # refused before Redis
        await s.claim(action, B, ",", "c", LEASE, approved(digest="sha256:other-arguments")),
        await s.claim(action, B, ",", "c", LEASE, approved(risks=",low,medium,")),  # acr without the step-up
    ]
    expected = [Refused("approval_invalid", check=c) for c in ("signature", "digest", "step_up")]
    return answers == expected and isinstance(await s.peek(action), CardRecord)


@shape("release", "ready")
async def _(s: RedisStore) -> bool:
    action, claim = await running(s)
    return await s.release(action, claim) == "ready"


@shape("release", "expired")
async def _(s: RedisStore) -> bool:
    action, claim = await running(s, expires_in_ms=50)
    await asyncio.sleep(0.1)
    return await s.release(action, claim) == "expired" and await s.peek(action) is None


@shape("release", "lost")
async def _(s: RedisStore) -> bool:
    action, _ = await running(s)
    return await s.release(action, "not-the-holder") == "lost" and isinstance(await s.peek(action), RunRecord)


@shape("settle", "ok")
async def _(s: RedisStore) -> bool:
    action, claim = await running(s)
    return await s.settle(action, claim, "settled", b"o", "m", "", "", 60_000) == "ok"


@shape("settle", "lost")
async def _(s: RedisStore) -> bool:
    action, _ = await running(s)
    return (
        await s.settle(action, "not-the-holder", "settled", b"o", "m", "", "", 60_000) == "lost"
        and await state_of(s, action) == "running"
    )


@shape("settle", "gone")
async def _(s: RedisStore) -> bool:
    return await s.settle(aid(), "c", "settled", b"o", "m", "", "", 60_000) == "gone"


def chained(after: tuple[int, str], *macs: str, expiry: str = "expire") -> Chained:
    """Events (their bodies stand in: the store does not read them) chained to ``after``."""
    return Chained(
        after, [(f'{{"m":"{m}"}}'.encode(), m) for m in macs], Anchor("k1", "am-" + macs[-1]), expiry, 60_000
    )


async def chain_of(s: RedisStore, action: str) -> tuple[list[str], dict[bytes, bytes]]:
    """The MACs of an action's events in order, and its anchor."""
    rows = await s.client.xrange(keys.events_key(action))
    return [json.loads(f[b"e"])["m"] for _, f in rows], await s.client.hgetall(keys.audit_key(action))


@shape("settle", "conflict")
async def _(s: RedisStore) -> bool:
    action, claim = await running(s)
    await s.audit_append(action, (0, ""), [(b'{"m":"i"}', "i")], Anchor("k1", "am-i"), "expire", 60_000)
    moved = await s.settle(action, claim, "settled", b"o", "m", "", "", 60_000, chained((0, ""), "c", "s"))
    return (
        moved == Appended(False, 1, "i")
        and await state_of(s, action) == "running"  # nothing changed: chain again and settle again
        and (await chain_of(s, action))[0] == ["i"]
    )


async def test_a_settle_appends_its_events_and_advances_the_anchor_in_its_own_step(store: RedisStore) -> None:
    action, claim = await running(store)
    assert (
        await store.settle(
            action, claim, "unknown", b"o", "m", "X", "", 60_000, chained((0, ""), "c", "s", expiry="keep")
        )
        == "ok"
    )
    macs, anchor = await chain_of(store, action)
    assert macs == ["c", "s"] and (anchor[b"seq"], anchor[b"head"], anchor[b"mac"]) == (b"2", b"s", b"am-s")
    assert await store.client.pttl(keys.events_key(action)) == -1, "an unresolved action's chain never expires"
    # a retry of the same settle (its first answer lost) records nothing twice, whatever chain it carries
    again = chained((2, "s"), "c2", "s2")
    assert await store.settle(action, claim, "settled", b"o2", "m", "", "", 60_000, again) == "ok"
    assert await store.settle(action, claim, "settled", b"o2", "m", "", "", 60_000, again) == "ok"
    assert (await chain_of(store, action))[0] == ["c", "s", "c2", "s2"]
    assert await store.client.pttl(keys.events_key(action)) > 0, "a settled action's chain expires"
    # a settle that does not hold the claim appends nothing
    assert await store.settle(action, "other", "settled", b"o3", "m", "", "", 60_000, chained((4, "s2"), "x")) == "lost"
    assert (await chain_of(store, action))[0] == ["c", "s", "c2", "s2"]


async def test_an_issue_appends_its_event_in_its_step_and_changes_nothing_when_the_chain_moved(
    store: RedisStore,
) -> None:
    action = aid()
    assert await store.issue(action, card(), 60_000, chained((0, ""), "i")) == Issued()
    assert await chain_of(store, action) == (["i"], {b"seq": b"1", b"head": b"i", b"kid": b"k1", b"mac": b"am-i"})
    won = await store.claim(action, B, ",", "c", LEASE)
    assert isinstance(won, Won) and won.chain_at == (1, "i"), "claim.lua says where the chain ends"


@shape("reject", "rejected")
async def _(s: RedisStore) -> bool:
    return isinstance(await s.reject(await issued(s), B, b"r", "m", 60_000), Rejected)


@shape("reject", "run")
async def _(s: RedisStore) -> bool:
    action, _ = await running(s)
    return isinstance(await s.reject(action, B, b"r", "m", 60_000), RunRecord)


@shape("reject", "expired")
async def _(s: RedisStore) -> bool:
    return await s.reject(aid(), B, b"r", "m", 60_000) == Refused("expired")


@shape("reject", "forbidden")
async def _(s: RedisStore) -> bool:
    return await s.reject(await issued(s), "someone-else", b"r", "m", 60_000) == Refused("forbidden")


@shape("issue", "conflict")
async def _(s: RedisStore) -> bool:
    action = aid()
    await s.audit_append(action, (0, ""), [(b'{"m":"r"}', "r")], Anchor("k1", "am-r"), "expire", 60_000)
    moved = await s.issue(action, card(), 60_000, chained((0, ""), "i"))
    return (
        moved == Appended(False, 1, "r")
        and await s.peek(action) is None  # nothing changed: chain it again and issue again
        and await s.issue(action, card(), 60_000, chained((1, "r"), "i")) == Issued()
        and (await chain_of(s, action))[0] == ["r", "i"]
    )


@shape("reject", "conflict")
async def _(s: RedisStore) -> bool:
    action = aid()
    await s.issue(action, card(), 60_000, chained((0, ""), "i"))
    moved = await s.reject(action, B, b"r", "m", 60_000, chained((0, ""), "r"))
    return (
        moved == Appended(False, 1, "i")
        and isinstance(await s.peek(action), CardRecord)  # nothing changed: chain it again and reject again
        and (await chain_of(s, action))[0] == ["i"]
        and isinstance(await s.reject(action, B, b"r", "m", 60_000, chained((1, "i"), "r")), Rejected)
        and (await chain_of(s, action))[0] == ["i", "r"]
    )


@shape("peek", "run")
async def _(s: RedisStore) -> bool:
    action, _ = await settled(s)
    found = await s.peek(action)
    return isinstance(found, RunRecord) and (found.state, found.out, found.omac) == ("settled", b"outcome", "omac")


@shape("peek", "card")
async def _(s: RedisStore) -> bool:
    found = await s.peek(await issued(s))
    return isinstance(found, CardRecord) and (found.tool, found.binding) == ("create_todo", B)


@shape("peek", "none")
async def _(s: RedisStore) -> bool:
    return await s.peek(aid()) is None


@shape("cont_open", "cont")
async def _(s: RedisStore) -> bool:
    return isinstance(await cont_opened(s, await issued(s)), ContRecord)


@shape("cont_open", "none")
async def _(s: RedisStore) -> bool:
    return await cont_opened(s, aid()) == Refused("none")


@shape("cont_open", "forbidden")
async def _(s: RedisStore) -> bool:
    return await cont_opened(s, await issued(s), "someone-else") == Refused("forbidden")


@shape("cont_claim", "won")
async def _(s: RedisStore) -> bool:
    action = await cont_ready(s)
    sealed = (await s.record(action))["card"]
    won = await s.cont_claim(action, B, LEASE, "g-1")
    # the continuation as opened, and the action's record as settled (its receipt, checked against its card)
    return won == ContWon(
        ContRecord("running", "k1", b'{"question":"q"}', "turn-1", "cmac"),
        RunRecord("settled", "k1", b"outcome", "omac", "", B, "create_todo", sealed, "card-mac"),
    )


@shape("cont_claim", "settled")
async def _(s: RedisStore) -> bool:
    action = await cont_running(s)
    await s.cont_settle(action, B, b"reply", "rmac", b"{}", "g-1")
    found = await s.cont_claim(action, B, LEASE, "g-2")
    return found == ContRecord("settled", "k1", b'{"question":"q"}', "turn-1", "cmac", b"reply", "rmac", b"{}")


@shape("cont_claim", "running")
async def _(s: RedisStore) -> bool:
    return isinstance(await s.cont_claim(await cont_running(s), B, LEASE, "g-2"), ContBusy)


@shape("cont_claim", "not_ready")
async def _(s: RedisStore) -> bool:
    action = await issued(s)
    await cont_opened(s, action)
    return await s.cont_claim(action, B, LEASE, "g-1") == NotReady("none", "")


@shape("cont_claim", "none")
async def _(s: RedisStore) -> bool:
    return await s.cont_claim(aid(), B, LEASE, "g-1") == Refused("none")


@shape("cont_claim", "forbidden")
async def _(s: RedisStore) -> bool:
    return await s.cont_claim(await cont_ready(s), "someone-else", LEASE, "g-1") == Refused("forbidden")


@shape("cont_settle", "ok")
async def _(s: RedisStore) -> bool:
    return await s.cont_settle(await cont_running(s), B, b"reply", "rmac", b"{}", "g-1") == ContSettled(
        b"reply", "rmac", b"{}", replayed=False
    )


@shape("cont_settle", "settled")
async def _(s: RedisStore) -> bool:
    action = await cont_running(s)
    await s.cont_settle(action, B, b"reply", "rmac", b"{}", "g-1")
    return await s.cont_settle(action, B, b"another", "x", b"{}", "g-1") == ContSettled(
        b"reply", "rmac", b"{}", replayed=True
    )


@shape("cont_settle", "lost")
async def _(s: RedisStore) -> bool:
    return await s.cont_settle(await cont_running(s), B, b"reply", "rmac", b"{}", "g-2") == LeaseLost("running")


@shape("cont_settle", "not_running")
async def _(s: RedisStore) -> bool:
    return await s.cont_settle(await cont_ready(s), B, b"reply", "rmac", b"{}", "g-1") == NotClaimed("ready")


@shape("cont_settle", "none")
async def _(s: RedisStore) -> bool:
    return await s.cont_settle(aid(), B, b"reply", "rmac", b"{}", "g-1") == Refused("none")


@shape("cont_settle", "forbidden")
async def _(s: RedisStore) -> bool:
    return await s.cont_settle(await cont_running(s), "x", b"reply", "rmac", b"{}", "g-1") == Refused("forbidden")


@shape("cont_release", "ok")
async def _(s: RedisStore) -> bool:
    return isinstance(await s.cont_release(await cont_running(s), B, "g-1"), ContReleased)


@shape("cont_release", "state")
async def _(s: RedisStore) -> bool:
    return await s.cont_release(await cont_ready(s), B, "g-1") == NotClaimed("ready")


@shape("cont_release", "lost")
async def _(s: RedisStore) -> bool:
    return isinstance(await s.cont_release(await cont_running(s), B, "g-2"), LeaseLost)


@shape("cont_release", "none")
async def _(s: RedisStore) -> bool:
    return await s.cont_release(aid(), B, "g-1") == Refused("none")


@shape("cont_release", "forbidden")
async def _(s: RedisStore) -> bool:
    return await s.cont_release(await cont_running(s), "x", "g-1") == Refused("forbidden")


@shape("reconcile_claim", "won")
async def _(s: RedisStore) -> bool:
    action, _ = await unknown(s)
    work = await s.reconcile_claim(action, "r-1", 5_000)
    return isinstance(work, ReconcileWork) and work.attempts == 1 and work.card.tool == "create_todo"


@shape("reconcile_claim", "run")
async def _(s: RedisStore) -> bool:
    action, _ = await settled(s)
    found = await s.reconcile_claim(action, "r-1", 5_000)
    return isinstance(found, RunRecord) and found.state == "settled"


@shape("reconcile_claim", "busy")
async def _(s: RedisStore) -> bool:
    action, _ = await running(s)
    return await s.reconcile_claim(action, "r-1", 5_000) == Busy("running")


@shape("reconcile_claim", "none")
async def _(s: RedisStore) -> bool:
    return await s.reconcile_claim(aid(), "r-1", 5_000) is None


@shape("reconcile_defer", "ok")
async def _(s: RedisStore) -> bool:
    action, _ = await unknown(s)
    await s.reconcile_claim(action, "r-1", 5_000)
    return await s.reconcile_defer(action, "r-1", 1_000) == "ok"


@shape("reconcile_defer", "lost")
async def _(s: RedisStore) -> bool:
    action, _ = await unknown(s)
    await s.reconcile_claim(action, "r-1", 5_000)
    return await s.reconcile_defer(action, "r-2", 1_000) == "lost"


@shape("audit", "ok")
async def _(s: RedisStore) -> bool:
    appended = await s.audit_append(aid(), (0, ""), [(b'{"t":"issued"}', "mac-1")], Anchor("k1", "a"), "expire", 60_000)
    return appended == Appended(True, 1, "mac-1")


@shape("audit", "conflict")
async def _(s: RedisStore) -> bool:
    action = aid()
    await s.audit_append(action, (0, ""), [(b'{"t":"issued"}', "mac-1")], Anchor("k1", "a"), "expire", 60_000)
    late = await s.audit_append(action, (0, ""), [(b'{"t":"x"}', "mac-x")], Anchor("k1", "b"), "expire", 60_000)
    return late == Appended(False, 1, "mac-1")


@shape("resolve", "ok")
async def _(s: RedisStore) -> bool:
    action, _ = await unknown(s)
    return await s.resolve(action, b"resolved", "m", "RESOLVED_BY_OPERATOR", "", 60_000) == Resolved(True)


@shape("resolve", "state")
async def _(s: RedisStore) -> bool:
    action, _ = await settled(s)
    return await s.resolve(action, b"resolved", "m", "", "", 60_000) == Resolved(False, "settled")


@shape("quota", "ok")
async def _(s: RedisStore) -> bool:
    return await s.quota(aid(), [], ["a:1", "r:1"], 2, 60_000) == QuotaCount(True, 2)


@shape("turn_remember", "ok")
async def _(s: RedisStore) -> bool:
    turn = aid()
    await s.remember(turn, b"e1", 60_000)
    return await s.recall(turn) == [b"e1"]


@shape("quota", "full")
async def _(s: RedisStore) -> bool:
    tenant = aid()
    await s.quota(tenant, [], ["a:1", "r:1"], 2, 60_000)
    full = await s.quota(tenant, [], ["a:2"], 2, 60_000)
    return not full.counted and full.held == 2 and full.first_gone_ms > time.time() * 1000


# -- standing grants: one owner's hash; a use, then the action issued as running -------------------------------

KEEP = 60_000


def sealed(mac: str = "g-mac") -> bytes:
    return json.dumps({"kid": "k1", "mac": mac, "body": "{}"}).encode()


async def granted(
    s: RedisStore, uses: int = 3, expires_in_ms: int = 60_000, owner: str | None = None
) -> tuple[str, str, int]:
    owner, grant, exp = owner or aid(), aid(), int(time.time() * 1000) + expires_in_ms
    assert isinstance(await s.grant_create(owner, grant, sealed(), exp, KEEP, 10), GrantCreated)
    return owner, grant, exp


async def use(s: RedisStore, owner: str, grant: str, exp: int, action: str | None = None, uses: int = 3) -> object:
    return await s.grant_use(owner, grant, action or aid(), "g-mac", uses, exp, KEEP)


@shape("grant_create", "created")
async def _(s: RedisStore) -> bool:
    owner, grant, _ = await granted(s)
    return await s.grants(owner) == [GrantRecord(grant, sealed(), 0, False)]


@shape("grant_create", "exists")
async def _(s: RedisStore) -> bool:
    owner, grant, exp = await granted(s)
    await use(s, owner, grant, exp)
    await s.grant_revoke(owner, grant)
    again = await s.grant_create(owner, grant, sealed("other"), exp + 1000, KEEP, 10)  # never a fresh grant
    return again == GrantRecord(grant, sealed(), 1, True) and await s.grants(owner) == [again]


@shape("grant_create", "full")
async def _(s: RedisStore) -> bool:
    owner, grant, exp = await granted(s)
    full = await s.grant_create(owner, aid(), sealed(), exp, KEEP, 1)
    return full == GrantsFull(1) and [g.grant_id for g in await s.grants(owner)] == [grant]


@shape("grant_use", "took")
async def _(s: RedisStore) -> bool:
    owner, grant, exp = await granted(s)
    return await use(s, owner, grant, exp) == GrantTaken(2) and (await s.grants(owner))[0].taken == 1


@shape("grant_use", "again")
async def _(s: RedisStore) -> bool:
    owner, grant, exp = await granted(s)
    action = aid()
    await use(s, owner, grant, exp, action)
    return (
        await use(s, owner, grant, exp, action) == GrantTaken(2, again=True) and (await s.grants(owner))[0].taken == 1
    )


@shape("grant_use", "spent")
async def _(s: RedisStore) -> bool:
    owner, grant, exp = await granted(s, uses=1)
    await use(s, owner, grant, exp, uses=1)
    return await use(s, owner, grant, exp, uses=1) == "spent"


@shape("grant_use", "revoked")
async def _(s: RedisStore) -> bool:
    owner, grant, exp = await granted(s)
    await s.grant_revoke(owner, grant)
    return await use(s, owner, grant, exp) == "revoked" and (await s.grants(owner))[0].taken == 0


@shape("grant_use", "expired")
async def _(s: RedisStore) -> bool:
    owner, grant, exp = await granted(s, expires_in_ms=-1)  # kept past its expiry, covering nothing
    return await use(s, owner, grant, exp) == "expired"


@shape("grant_use", "none")
async def _(s: RedisStore) -> bool:
    _, grant, exp = await granted(s)
    return await use(s, aid(), grant, exp) == "none"  # another owner's hash holds no such grant


@shape("grant_use", "tampered")
async def _(s: RedisStore) -> bool:
    owner, grant, exp = await granted(s)
    return await s.grant_use(owner, grant, aid(), "another-mac", 3, exp, KEEP) == "tampered"


@shape("grant_revoke", "revoked")
async def _(s: RedisStore) -> bool:
    owner, grant, _ = await granted(s)
    return await s.grant_revoke(owner, grant) == GrantRevoked(GrantRecord(grant, sealed(), 0, True))


@shape("grant_revoke", "already")
async def _(s: RedisStore) -> bool:
    owner, grant, _ = await granted(s)
    await s.grant_revoke(owner, grant)
    return await s.grant_revoke(owner, grant) == GrantRevoked(GrantRecord(grant, sealed(), 0, True), before=True)


@shape("grant_revoke", "none")
async def _(s: RedisStore) -> bool:
    owner, grant, _ = await granted(s)
    return await s.grant_revoke(aid(), grant) is None and await s.grant_revoke(owner, aid()) is None


@shape("grant_run", "won")
async def _(s: RedisStore) -> bool:
    action = aid()
    won = await s.grant_run(action, card(), "c-g", LEASE, "g-1")
    record = await s.record(action)
    return (
        isinstance(won, Won)
        and (won.card.kid, won.card.tool, won.card.mac, won.card.binding) == ("k1", "create_todo", "card-mac", B)
        and (record["st"], record["claim"], record["grant"], record["b"]) == (b"running", b"c-g", b"g-1", B.encode())
        and await s.client.pttl(f"cs:{{{action}}}:run") == -1
    )


@shape("grant_run", "run")
async def _(s: RedisStore) -> bool:
    action, _ = await settled(s)
    found = await s.grant_run(action, card(), "c-g", LEASE, "g-1")
    return isinstance(found, RunRecord) and found.state == "settled" and found.out == b"outcome"


@shape("grant_run", "card")
async def _(s: RedisStore) -> bool:
    action = await issued(s)
    found = await s.grant_run(action, card(), "c-g", LEASE, "g-1")
    return isinstance(found, CardRecord) and found.mac == "card-mac" and isinstance(await s.peek(action), CardRecord)


def test_every_reply_shape_of_every_script_has_a_scenario() -> None:
    assert set(SHAPES) == {(script, kind) for script, kinds in REPLIES.items() for kind in kinds}


@pytest.mark.parametrize(("script", "kind"), sorted(SHAPES))
async def test_each_reply_shape_decodes_to_its_typed_result(store: RedisStore, script: str, kind: str) -> None:
    assert await SHAPES[(script, kind)](store), f"{script} did not answer {kind!r} as typed"


async def s_issue(store: RedisStore, record: CardRecord) -> str:
    action = aid()
    assert isinstance(await store.issue(action, record, 60_000), Issued)
    return action


async def test_a_signed_card_is_claimed_only_with_an_approval_of_its_digest_whose_acr_fits_its_risk(
    store: RedisStore,
) -> None:
    action = await s_issue(store, signed_card(risk="high"))
    assert await store.claim(action, B, ",", "c", LEASE) == Refused("approval_required", check="card")
    won = await store.claim(action, B, ",", "c", LEASE, approved(risks=",low,medium,high,irreversible,"))
    assert isinstance(won, Won) and won.card.tool == "delete_todo"


async def test_a_released_signed_card_still_needs_its_approval(store: RedisStore) -> None:
    """release.lua puts the hash fields claim.lua compares back (from the sealed body): a card given back after a
    request that was never sent needs the approval again."""
    action = await s_issue(store, signed_card())
    assert isinstance(await store.claim(action, B, ",", "c", LEASE, approved()), Won)
    assert await store.release(action, "c") == "ready"
    assert await store.claim(action, B, ",", "d", LEASE) == Refused("approval_required", check="card")
    assert await store.claim(action, B, ",", "d", LEASE, approved(digest="sha256:x")) == Refused(
        "approval_invalid", check="digest"
    )
    assert isinstance(await store.claim(action, B, ",", "d", LEASE, approved()), Won)


async def test_a_claimed_action_is_replayed_to_its_owner_whatever_approval_a_late_confirm_carries(
    store: RedisStore,
) -> None:
    action = await s_issue(store, signed_card())
    assert isinstance(await store.claim(action, B, ",", "c", LEASE, approved()), Won)
    for late in (ClaimApproval(), approved(failed="expired"), approved(digest="sha256:x")):
        assert isinstance(await store.claim(action, B, ",", "e", LEASE, late), RunRecord), late
    assert await store.claim(action, "someone-else", ",", "e", LEASE, approved()) == Refused("forbidden")


async def test_many_concurrent_claims_make_one_holder(store: RedisStore) -> None:
    action = await issued(store)
    results = await asyncio.gather(*(store.claim(action, B, ",", f"c-{i}", LEASE) for i in range(50)))
    assert sum(isinstance(r, Won) for r in results) == 1
    assert all(isinstance(r, (Won, RunRecord)) for r in results)


@pytest.mark.parametrize(("receipt", "after"), [("SUCCEEDED", b"ready"), ("FAILED", b"pending")])
async def test_an_operators_resolve_wakes_the_actions_continuation_only_when_it_succeeded(
    store: RedisStore, receipt: str, after: bytes
) -> None:
    """The continuation waiting on an unresolved action (its own slot's key, KEYS[2]) is ready once an operator
    settles the action SUCCEEDED, and keeps waiting otherwise; another action's continuation is not touched."""
    action, other = await issued(store), await issued(store)
    for a in (action, other):
        assert isinstance(await cont_opened(store, a), ContRecord)
    claim = "c-" + os.urandom(4).hex()
    assert isinstance(await store.claim(action, B, ",", claim, LEASE), Won)
    assert await store.settle(action, claim, "unknown", b"", "", "DOWNSTREAM_TIMEOUT", "", 60_000) == "ok"
    assert await store.resolve(action, b"resolved", "omac", "RESOLVED_BY_OPERATOR", receipt, 60_000) == Resolved(True)
    assert await store.client.hget(keys.cont_key(action), "st") == after
    assert await store.client.hget(keys.cont_key(other), "st") == b"pending"


async def test_a_reconcilers_claim_hands_it_the_card_as_sealed(store: RedisStore) -> None:
    """What the reconciler verifies (the MAC under the key id) and looks up by (the tool, the body) is the card as
    issued, whatever edits the run record has since."""
    sealed = card()
    action = aid()
    assert isinstance(await store.issue(action, sealed, 60_000), Issued)
    assert isinstance(await store.claim(action, B, ",", "c-1", LEASE), Won)
    assert await store.settle(action, "c-1", "unknown", b"", "", "DOWNSTREAM_TIMEOUT", "", 60_000) == "ok"
    work = await store.reconcile_claim(action, "r-1", 5_000)
    assert isinstance(work, ReconcileWork)
    assert work.card == CardRecord(sealed.kid, sealed.tool, sealed.body, sealed.mac)
    assert work.attempts == 1 and work.unknown_since_ms <= work.now_ms


@pytest.mark.parametrize(("receipt", "state"), [("SUCCEEDED", "ready"), ("FAILED", "pending")])
async def test_a_continuation_opened_after_its_action_ran_is_ready_only_if_it_succeeded(
    store: RedisStore, receipt: str, state: str
) -> None:
    """The card is gone once claimed: the owner is read from the run record, and so is whether it succeeded."""
    action, claim = await running(store)
    assert await store.settle(action, claim, "settled", b"outcome", "omac", "", receipt, 60_000) == "ok"
    assert await cont_opened(store, action, "someone-else") == Refused("forbidden")
    assert await cont_opened(store, action) == ContRecord(state, "k1", b'{"question":"q"}', "turn-1", "cmac")  # type: ignore[arg-type]


async def test_waiting_for_a_running_action_returns_it_settled_or_as_last_seen(store: RedisStore) -> None:
    action, claim = await running(store)
    first = await store.peek(action)
    assert isinstance(first, RunRecord) and first.state == "running"

    async def settle_soon() -> None:
        await asyncio.sleep(0.05)
        await store.settle(action, claim, "settled", b"outcome", "omac", "", "SUCCEEDED", 60_000)

    settling = asyncio.create_task(settle_soon())
    done = await store.wait_settled(action, first, 10.0)
    await settling
    assert (done.state, done.out) == ("settled", b"outcome")
    # one that stays running: the running record, once the time is up
    still, _ = await running(store)
    seen = await store.peek(still)
    assert isinstance(seen, RunRecord)
    assert (await store.wait_settled(still, seen, 0.2)).state == "running"
    # a record that is no longer there: the last one seen
    gone, _ = await running(store)
    seen = await store.peek(gone)
    assert isinstance(seen, RunRecord)
    await store.client.delete(keys.run_key(gone))
    assert await store.wait_settled(gone, seen, 10.0) == seen
    # nothing to wait for
    settled_record = await store.peek(action)
    assert isinstance(settled_record, RunRecord)
    assert await store.wait_settled(action, settled_record, 10.0) == settled_record


def test_the_scripts_are_those_the_store_loads() -> None:
    lua = Path(processes.ROOT / "countersign" / "store" / "lua")
    assert {p.stem for p in lua.glob("*.lua")} == set(REPLIES)


async def test_fifty_concurrent_uses_of_a_grant_of_three_take_three(store: RedisStore) -> None:
    owner, grant, exp = await granted(store)
    results = await asyncio.gather(*(use(store, owner, grant, exp) for _ in range(50)))
    assert sorted(r.left for r in results if isinstance(r, GrantTaken)) == [0, 1, 2]
    assert results.count("spent") == 47
    assert (await store.grants(owner))[0].taken == 3


async def test_one_action_takes_one_use_however_often_it_asks(store: RedisStore) -> None:
    owner, grant, exp = await granted(store)
    action = aid()
    results = await asyncio.gather(*(use(store, owner, grant, exp, action) for _ in range(20)))
    assert sum(isinstance(r, GrantTaken) and not r.again for r in results) == 1
    assert sum(isinstance(r, GrantTaken) and r.again for r in results) == 19
    assert (await store.grants(owner))[0].taken == 1


async def test_a_grant_run_record_is_the_record_a_claim_makes_with_the_grant(store: RedisStore) -> None:
    claimed, _ = await running(store)
    ran = aid()
    assert isinstance(await store.grant_run(ran, card(), "c-g", LEASE, "g-1"), Won)
    by_claim, by_grant = await store.record(claimed), await store.record(ran)
    assert set(by_grant) - set(by_claim) == {"grant"} and set(by_claim) <= set(by_grant)
    # the executor's next steps work on it unchanged: settle by the holder, release when nothing was sent
    assert await store.settle(ran, "c-g", "settled", b"o", "m", "", "SUCCEEDED", 60_000) == "ok"
    other = aid()
    await store.grant_run(other, card(), "c-x", LEASE, "g-1")
    assert await store.release(other, "c-x") == "ready" and isinstance(await store.peek(other), CardRecord)


async def test_grants_past_their_keep_are_swept_and_the_hash_expires_with_the_last(store: RedisStore) -> None:
    owner, old, _ = await granted(store, expires_in_ms=-KEEP - 1)
    _, new, exp = await granted(store, owner=owner)
    assert [g.grant_id for g in await store.grants(owner)] == [new], "the grant kept past its time was swept"
    ttl = await store.client.pttl(f"cs:grants:{{{owner}}}")
    assert exp + KEEP - 2_000 <= time.time() * 1000 + ttl <= exp + KEEP + 1_000
    assert await use(store, owner, old, exp) == "none"
