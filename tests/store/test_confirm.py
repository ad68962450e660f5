"""Confirm against an attacker with write access to Redis, and an operator who rotates keys or changes the registry
while cards are live (docs/design.md §5, §7, §12; issue 11, "Test strength").

The sidecar's parts are built in this process (``app.build``, no gRPC server) over a real redis-server, and the
tools point at a real downstream on loopback that records every request that reached it (``Raw``). What is
asserted is what a caller and the downstream see: the status and reason of a refusal, and whether anything was
sent. Two sets of parts over one Redis are two sidecars (a rotation, a rolling registry change).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
import pytest
import redis.asyncio as aioredis

from countersign import registry as registry_mod
from countersign.audit import verify
from countersign.errors import CountersignError
from countersign.guard import ReplyGuard
from countersign.keyring import Keyring
from countersign.path.settle import CLAIMED_ALONE_AFTER
from countersign.sidecar import app
from countersign.sidecar.settings import Settings
from countersign.store.keys import card_key, events_key, run_key
from countersign.store.redis_store import RedisStore
from countersign.testing import processes
from countersign.testing.calls import ctx
from countersign.testing.downstreams import Raw, Seen, answer, registry_doc
from countersign.v1 import common_pb2

K1, K0 = bytes.fromhex("11" * 32), bytes.fromhex("22" * 32)
BOB = {"actor_id": "bob", "subject_id": "bob", "session_id": "s-bob"}
GUARD = ReplyGuard.load(None)


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    proc = processes.start_redis(tmp_path_factory.mktemp("confirm"))
    yield proc.info["url"]
    proc.stop()


def created(seen: Seen) -> list[bytes | float]:
    """The downstream creates what it is sent and answers with an id and a version (the receipt's fields)."""
    body = json.loads(seen.body or b"{}")
    return answer(201, {"id": f"thing-{len(body)}", "version": 1, **body}, pause=0.0)


def sent(raw: Raw) -> list[str]:
    """The idempotency key (the action id) of every request that reached the downstream, in order."""
    return [s.headers.get("idempotency-key", "").strip('"') for s in raw.seen]


def things(raw: Raw) -> dict[str, Any]:
    """The downstream's registry (testing.downstreams.registry_doc), create_thing's argument ``amount`` a number."""
    doc = registry_doc(raw.url)
    tool = next(t for t in doc["tools"] if t["name"] == "create_thing")
    tool["schema"]["properties"]["amount"] = {"type": "number"}
    return doc


def changed(doc: dict[str, Any], **cap: str) -> dict[str, Any]:
    """The same registry under a new policy version, with create_thing's capability changed as asked."""
    doc = copy.deepcopy(doc)
    doc["policy_version"] = "adapters.2"
    entry = next(c for c in doc["capabilities"] if c["tool"] == "create_thing")
    tool = next(t for t in doc["tools"] if t["name"] == "create_thing")
    entry.update(cap)
    if "id" in cap:
        tool["capability"] = cap["id"]
    tool.update({k: v for k, v in cap.items() if k in ("risk", "confirmation")})  # a tool says what its capability says
    return doc


@contextlib.asynccontextmanager
async def sidecar(redis_url: str, doc: dict[str, Any], keyring: Keyring) -> AsyncIterator[app.Components]:
    """One sidecar's parts over the shared redis-server: the registry ``doc``, the keys ``keyring``."""
    store = RedisStore.from_url(redis_url, socket_timeout=2, connect_timeout=2, retries=0)
    settings = Settings(registry="(in memory)", telemetry="off", lease=5.0, downstream_deadline=1.0)
    parts = app.build(settings, keyring, registry_mod.build(doc, "test"), store, GUARD)
    try:
        yield parts
    finally:
        pending = [*parts.executor.background, *parts.settler.background]
        for task in pending:
            with contextlib.suppress(BaseException):
                await task
        await parts.quota.drain(2)
        await parts.audit.drain(2)
        for adapter in parts.adapters.values():
            await adapter.close()
        await store.close()


def keys(active: str, **listed: bytes) -> Keyring:
    return Keyring(active=active, keys=dict(listed))


BOTH = keys("k1", k1=K1, k0=K0)


async def card(parts: app.Components, title: str, **context: Any) -> Any:
    """A fresh card for create_thing (a new turn each time)."""
    args = json.dumps({"title": title, "amount": 2})
    out = await parts.pipeline.invoke(ctx(request_id=f"r-{time.monotonic_ns()}", **context), "create_thing", args)
    assert out.HasField("confirmation"), out
    return out.confirmation


async def refused(call: Any) -> CountersignError:
    with pytest.raises(CountersignError) as info:
        await call
    return info.value


async def hash_of(client: aioredis.Redis, key: str) -> dict[bytes, bytes]:
    return await client.hgetall(key)  # type: ignore[no-any-return]


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    c = aioredis.Redis.from_url(redis_url)
    yield c
    await c.aclose()


# -- a card edited in Redis never executes ---------------------------------------------------------------------


async def test_a_genuinely_sealed_card_copied_under_another_action_id_never_executes(
    redis_url: str, raw: Raw, client: aioredis.Redis
) -> None:
    raw.script = created
    async with sidecar(redis_url, things(raw), BOTH) as parts:
        target, donor = await card(parts, "目标"), await card(parts, "供体")
        sealed = await hash_of(client, card_key(donor.action_id))
        await client.delete(card_key(target.action_id))
        await client.hset(card_key(target.action_id), mapping=sealed)  # type: ignore[arg-type]
        await client.pexpire(card_key(target.action_id), 60_000)
        err = await refused(parts.pipeline.confirm(ctx(), target.token, 0))
        assert (err.code, err.reason) == (grpc.StatusCode.DATA_LOSS, "CONFIRMATION_TAMPERED")
        assert raw.seen == [], "the donor's arguments were not sent under the target's idempotency key"
        again = await refused(parts.pipeline.confirm(ctx(), target.token, 0))
        assert again.code == grpc.StatusCode.DATA_LOSS and raw.seen == []
        # the donor's own card is untouched and runs once, for its owner
        done = await parts.pipeline.confirm(ctx(), donor.token, 0)
        assert done.state == common_pb2.ACTION_STATE_SUCCEEDED
        assert sent(raw) == [donor.action_id]


@pytest.mark.parametrize(
    ("field", "value"),
    [("tool", b"create_plain"), ("kid", b"k0")],
    ids=["tool", "kid"],
)
async def test_a_cards_tool_or_key_id_edited_alone_is_tampered_and_never_executes(
    redis_url: str, raw: Raw, client: aioredis.Redis, field: str, value: bytes
) -> None:
    """The record's tool (what claim.lua checks the role against) or key id edited to another listed one."""
    raw.script = created
    async with sidecar(redis_url, things(raw), BOTH) as parts:
        shown = await card(parts, f"只改{field}")
        await client.hset(card_key(shown.action_id), field, value)
        err = await refused(parts.pipeline.confirm(ctx(), shown.token, 0))
        assert (err.code, err.reason) == (grpc.StatusCode.DATA_LOSS, "CONFIRMATION_TAMPERED"), err
        assert raw.seen == []
        err = await refused(parts.pipeline.get_action(ctx(), shown.action_id))  # the run record carries it on
        assert (err.code, err.reason) == (grpc.StatusCode.DATA_LOSS, "RECORD_TAMPERED")
        err = await refused(parts.pipeline.confirm(ctx(), shown.token, 0))
        assert err.code == grpc.StatusCode.DATA_LOSS and raw.seen == []


async def test_a_key_id_edited_to_another_id_of_the_same_secret_is_still_tampered(
    redis_url: str, raw: Raw, client: aioredis.Redis
) -> None:
    """A keys file that lists one secret under two ids (a key renamed mid-rotation): the MAC verifies under
    either id, so only the key id sealed in the card's body tells that the record's was edited."""
    raw.script = created
    renamed = keys("k1", k1=K1, k2=K1)
    async with sidecar(redis_url, things(raw), renamed) as parts:
        shown = await card(parts, "同一密钥两个名字")
        await client.hset(card_key(shown.action_id), "kid", b"k2")
        err = await refused(parts.pipeline.confirm(ctx(), shown.token, 0))
        assert (err.code, err.reason) == (grpc.StatusCode.DATA_LOSS, "CONFIRMATION_TAMPERED")
        assert raw.seen == []


@pytest.mark.parametrize("kid", ["k9", "k" * 40], ids=["short", "longer-than-32"])
async def test_a_cards_key_id_edited_to_an_unlisted_one_names_that_key_and_never_executes(
    redis_url: str, raw: Raw, client: aioredis.Redis, kid: str
) -> None:
    raw.script = created
    said = (
        f"the stored confirmation names key {kid[:32]!r}, which this sidecar's keys file does not list (changed by "
        "hand, or a key removed while cards it sealed were live); nothing was executed"
    )
    async with sidecar(redis_url, things(raw), BOTH) as parts:
        shown = await card(parts, "不存在的密钥")
        await client.hset(card_key(shown.action_id), "kid", kid)
        err = await refused(parts.pipeline.get_action(ctx(), shown.action_id))
        assert (err.code, err.reason, err.message) == (grpc.StatusCode.DATA_LOSS, "CONFIRMATION_TAMPERED", said)
        err = await refused(parts.pipeline.confirm(ctx(), shown.token, 0))
        assert (err.code, err.reason, err.message) == (grpc.StatusCode.DATA_LOSS, "CONFIRMATION_TAMPERED", said)
        assert raw.seen == []


async def test_a_card_is_stored_in_the_format_the_next_release_reads(
    redis_url: str, raw: Raw, client: aioredis.Redis
) -> None:
    """A card outlives a rolling upgrade in Redis: its sealed body keeps these names, and its format version."""
    raw.script = created
    async with sidecar(redis_url, things(raw), BOTH) as parts:
        shown = await card(parts, "格式")
        body = json.loads(await client.hget(card_key(shown.action_id), "body"))
    assert sorted(body) == sorted(
        [
            "v",
            "action_id",
            "kid",
            "b",
            "tool",
            "capability",
            "risk",
            "confirmation",
            "policy_version",
            "args",
            "resource_version",
            "preview",
            "issued_at_ms",
            "expires_at_ms",
            "approval",
            "approval_digest",
            "tenant_binding",
        ]
    )
    assert (body["v"], body["action_id"], body["kid"], body["tool"]) == (1, shown.action_id, "k1", "create_thing")
    assert body["args"] == {"title": "格式", "amount": 2} and body["resource_version"] == ""
    assert isinstance(body["preview"], dict) and body["expires_at_ms"] > body["issued_at_ms"]


async def test_the_resource_version_a_downstream_prepared_is_sent_as_if_match(redis_url: str, raw: Raw) -> None:
    def prepared_then_set(seen: Seen) -> list[bytes | float]:
        if seen.target.endswith("/prepare"):
            return answer(200, {"arguments": {"id": "t1", "status": "done"}, "resource_version": "7"}, pause=0.0)
        return answer(200, {"id": "t1"}, pause=0.0)

    raw.script = prepared_then_set
    async with sidecar(redis_url, things(raw), BOTH) as parts:
        out = await parts.pipeline.invoke(ctx(request_id="ver"), "set_thing", '{"id": "t1", "status": "done"}')
        done = await parts.pipeline.confirm(ctx(request_id="ver"), out.confirmation.token, 0)
        assert done.state == common_pb2.ACTION_STATE_SUCCEEDED
    (execute,) = [s for s in raw.seen if not s.target.endswith("/prepare")]
    assert (execute.method, execute.target, execute.headers.get("if-match")) == ("POST", "/things/t1/status", '"7"')


async def test_ones_own_binding_copied_onto_anothers_card_confirms_nothing(
    redis_url: str, raw: Raw, client: aioredis.Redis
) -> None:
    """Bob holds Alice's token (a leaked log line) and writes his own binding into her card: claim.lua lets him
    claim it, and the card's sealed binding refuses it; nothing reaches the downstream."""
    raw.script = created
    async with sidecar(redis_url, things(raw), BOTH) as parts:
        alices = await card(parts, "爱丽丝的卡片")
        bobs = await card(parts, "鲍勃的卡片", **BOB)
        bob_binding = await client.hget(card_key(bobs.action_id), "b")
        assert bob_binding
        await client.hset(card_key(alices.action_id), "b", bob_binding)
        err = await refused(parts.pipeline.confirm(ctx(**BOB), alices.token, 0))
        assert (err.code, err.reason) == (grpc.StatusCode.DATA_LOSS, "CONFIRMATION_TAMPERED")
        assert raw.seen == []
        # and Bob learns nothing of Alice's action by GetAction either
        err = await refused(parts.pipeline.get_action(ctx(**BOB), alices.action_id))
        assert err.code in (grpc.StatusCode.DATA_LOSS, grpc.StatusCode.PERMISSION_DENIED)
        assert raw.seen == []


# -- keys rotate between issuing and confirming ------------------------------------------------------------------


async def test_a_card_issued_before_a_rotation_confirms_after_it_and_executes_once(redis_url: str, raw: Raw) -> None:
    raw.script = created
    doc = things(raw)
    async with sidecar(redis_url, doc, BOTH) as before:
        shown = await card(before, "轮换之前")
    rotated = keys("k0", k1=K1, k0=K0)  # k0 active now; k1, which sealed the card, still listed
    async with sidecar(redis_url, doc, rotated) as after:
        done = await after.pipeline.confirm(ctx(), shown.token, 0)
        assert done.state == common_pb2.ACTION_STATE_SUCCEEDED, done
        again = await after.pipeline.confirm(ctx(), shown.token, 0)
        assert again.state == common_pb2.ACTION_STATE_SUCCEEDED and again.receipt == done.receipt
        assert (await after.pipeline.get_action(ctx(), shown.action_id)).state == common_pb2.ACTION_STATE_SUCCEEDED
    assert sent(raw) == [shown.action_id] and raw.seen[0].method == "POST"


async def test_a_card_whose_key_was_removed_is_refused_naming_the_key_and_runs_once_when_it_is_back(
    redis_url: str, raw: Raw
) -> None:
    raw.script = created
    doc = things(raw)
    async with sidecar(redis_url, doc, BOTH) as before:
        shown = await card(before, "密钥被删")
    removed = keys("k0", k0=K0)  # k1 removed while its card is live (the id key, k0, is kept)
    async with sidecar(redis_url, doc, removed) as after:
        err = await refused(after.pipeline.confirm(ctx(), shown.token, 0))
        assert err.code == grpc.StatusCode.INVALID_ARGUMENT and err.reason == "CONFIRMATION_TOKEN_INVALID"
        assert "'k1'" in err.message and "does not list" in err.message, err.message
        err = await refused(after.pipeline.get_action(ctx(), shown.action_id))
        assert (err.code, err.reason) == (grpc.StatusCode.DATA_LOSS, "CONFIRMATION_TAMPERED")
        assert "'k1'" in err.message
    assert raw.seen == []
    async with sidecar(redis_url, doc, BOTH) as restored:  # the key listed again: the card was never spent
        done = await restored.pipeline.confirm(ctx(), shown.token, 0)
        assert done.state == common_pb2.ACTION_STATE_SUCCEEDED
    assert sent(raw) == [shown.action_id]


# -- the registry changes between issuing and confirming ---------------------------------------------------------


@pytest.mark.parametrize(
    "change",
    [{"id": "thing.make"}, {"confirmation": "always"}, {"risk": "high"}],
    ids=["capability", "confirmation", "risk"],
)
async def test_a_card_whose_capability_changed_in_one_respect_is_refused_at_claim(
    redis_url: str, raw: Raw, change: dict[str, str]
) -> None:
    """Each of the capability's id, confirmation level and risk, changed alone under a new policy version: the
    card the user saw no longer describes what would run, so it does not run (POLICY_CHANGED)."""
    raw.script = created
    doc = things(raw)
    async with sidecar(redis_url, doc, BOTH) as before:
        shown = await card(before, f"改了{next(iter(change))}")
    async with sidecar(redis_url, changed(doc, **change), BOTH) as after:
        err = await refused(after.pipeline.confirm(ctx(), shown.token, 0))
        assert (err.code, err.reason) == (grpc.StatusCode.FAILED_PRECONDITION, "POLICY_CHANGED")
        action = await after.pipeline.get_action(ctx(), shown.action_id)
        assert action.state == common_pb2.ACTION_STATE_FAILED and action.error.reason == "POLICY_CHANGED"
    assert raw.seen == []


async def test_a_new_policy_version_that_changes_nothing_of_the_card_lets_it_run(redis_url: str, raw: Raw) -> None:
    raw.script = created
    doc = things(raw)
    async with sidecar(redis_url, doc, BOTH) as before:
        shown = await card(before, "版本变了而已")
    async with sidecar(redis_url, changed(doc), BOTH) as after:
        done = await after.pipeline.confirm(ctx(), shown.token, 0)
        assert done.state == common_pb2.ACTION_STATE_SUCCEEDED
    assert sent(raw) == [shown.action_id]


# -- arguments: a decimal reaches the downstream as it was sent ---------------------------------------------------


async def test_a_decimal_argument_reaches_the_card_and_the_downstream_unchanged(redis_url: str, raw: Raw) -> None:
    raw.script = created
    async with sidecar(redis_url, things(raw), BOTH) as parts:
        out = await parts.pipeline.invoke(ctx(request_id="decimal"), "create_thing", '{"title": "x", "amount": 1.5}')
        shown = out.confirmation
        assert json.loads(shown.prepared_arguments_json) == {"title": "x", "amount": 1.5}
        assert '"amount":1.5' in shown.prepared_arguments_json
        done = await parts.pipeline.confirm(ctx(request_id="decimal"), shown.token, 0)
        assert done.state == common_pb2.ACTION_STATE_SUCCEEDED
    assert [json.loads(s.body) for s in raw.seen] == [{"title": "x", "amount": 1.5}]


# -- who may name an action by id ---------------------------------------------------------------------------------

ADMIN = {**BOB, "role": "admin", "admin_context_id": "t1:ticket-42"}  # an admin context of the action's tenant


async def test_an_action_named_by_id_is_told_apart_malformed_unknown_and_anothers(redis_url: str, raw: Raw) -> None:
    raw.script = created
    async with sidecar(redis_url, things(raw), BOTH) as parts:
        alices = await card(parts, "只有爱丽丝")
        err = await refused(parts.pipeline.get_action(ctx(), alices.action_id.upper()))
        assert (err.code, err.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "REQUEST_INVALID")
        assert err.message == "action_id must be 32 lower-case hex characters"
        err = await refused(parts.pipeline.get_action(ctx(), "0" * 32))
        assert (err.code, err.reason) == (grpc.StatusCode.NOT_FOUND, "ACTION_NOT_FOUND")
        assert err.message == "no such action: never issued, or its records expired"
        err = await refused(parts.pipeline.get_action(ctx(**BOB), alices.action_id))
        assert (err.code, err.reason) == (grpc.StatusCode.PERMISSION_DENIED, "CONFIRMATION_BINDING_MISMATCH")
        assert err.message == "the action belongs to another owner or session"
        assert (await parts.pipeline.get_action(ctx(), alices.action_id)).state == common_pb2.ACTION_STATE_READY
    assert raw.seen == []


BINDING, INCOMPLETE = "CONFIRMATION_BINDING_MISMATCH", "CONTEXT_MISMATCH"


@pytest.mark.parametrize(
    ("who", "reconcile", "get"),
    [
        ({**ADMIN, "admin_mode": common_pb2.ADMIN_MODE_MAINTAIN}, None, None),
        ({**ADMIN, "admin_mode": common_pb2.ADMIN_MODE_READONLY}, BINDING, None),
        (BOB, BINDING, BINDING),
        ({**BOB, "admin_mode": common_pb2.ADMIN_MODE_MAINTAIN}, INCOMPLETE, INCOMPLETE),  # no admin context id
    ],
    ids=["admin-maintain", "admin-readonly", "another-owner", "maintain-without-admin-context"],
)
async def test_only_an_admin_may_name_anothers_action_reconcile_in_maintain_mode_alone(
    redis_url: str, raw: Raw, who: dict[str, Any], reconcile: str | None, get: str | None
) -> None:
    raw.script = created
    async with sidecar(redis_url, things(raw), BOTH) as parts:
        alices = await card(parts, "爱丽丝的行动")
        for call, refusal in (
            (parts.reconciler.reconcile_rpc(ctx(**who), alices.action_id), reconcile),
            (parts.pipeline.get_action(ctx(**who), alices.action_id), get),
        ):
            if refusal is None:
                action = await call
                assert (action.state, action.tool_name) == (common_pb2.ACTION_STATE_READY, "create_thing")
            else:
                err = await refused(call)
                assert (err.code, err.reason) == (grpc.StatusCode.PERMISSION_DENIED, refusal)
    assert raw.seen == []


# -- a run record edited in Redis is never trusted, and what the caller reads of it is bounded -------------------


async def test_a_run_record_edited_or_sealed_by_a_removed_key_is_refused_saying_which(
    redis_url: str, raw: Raw, client: aioredis.Redis
) -> None:
    raw.script = created
    doc = things(raw)
    async with sidecar(redis_url, doc, BOTH) as parts:
        done = [await card(parts, f"已执行{i}") for i in range(4)]
        for shown in done:
            assert (await parts.pipeline.confirm(ctx(), shown.token, 0)).state == common_pb2.ACTION_STATE_SUCCEEDED
        removed, tool, forged_kid, body = (d.action_id for d in done)

        await client.hset(run_key(tool), "tool", b"create_plain")
        err = await refused(parts.pipeline.get_action(ctx(), tool))
        assert (err.code, err.reason) == (grpc.StatusCode.DATA_LOSS, "RECORD_TAMPERED")
        assert err.message == "the stored record of this action was changed; it is not trusted"

        long_kid = "k" * 40  # the record's and its card's key id both edited: still bounded in what is said
        sealed = json.loads(await client.hget(run_key(forged_kid), "card"))
        await client.hset(
            run_key(forged_kid), mapping={"kid": long_kid, "card": json.dumps({**sealed, "kid": long_kid})}
        )
        err = await refused(parts.pipeline.get_action(ctx(), forged_kid))
        assert (err.code, err.reason) == (grpc.StatusCode.DATA_LOSS, "RECORD_TAMPERED")
        assert err.message == (
            f"the record was sealed with key {'k' * 32!r}, which this sidecar's keys file does not list (changed "
            "by hand, or a key removed while records it sealed are live)"
        )

        sealed = json.loads(await client.hget(run_key(body), "card"))
        await client.hset(run_key(body), "card", json.dumps({**sealed, "expires_at_ms": sealed["expires_at_ms"] + 1}))
        err = await refused(parts.pipeline.get_action(ctx(), body))
        assert (err.code, err.reason) == (grpc.StatusCode.DATA_LOSS, "CONFIRMATION_TAMPERED")
        assert err.message == "the stored confirmation was changed; nothing was executed"
    async with sidecar(redis_url, doc, keys("k0", k0=K0)) as after:  # k1, which sealed it, removed
        err = await refused(after.pipeline.get_action(ctx(), removed))
        assert (err.code, err.reason) == (grpc.StatusCode.DATA_LOSS, "RECORD_TAMPERED")
        assert "'k1'" in err.message
    assert len(raw.seen) == 4


async def test_the_card_a_caller_gets_names_what_it_would_run_and_its_token_the_key_that_sealed_it(
    redis_url: str, raw: Raw
) -> None:
    """What a user countersigns: capability, tool, risk and the downstream's preview; shown again after a rotation
    (the same call in the same turn), the same card with a token under the key that sealed it."""

    def prepared(seen: Seen) -> list[bytes | float]:
        body = {"arguments": {"id": "t1", "status": "done"}, "preview": {"title": "把 t1 标为完成"}}
        return answer(200, body, pause=0.0)

    raw.script = prepared
    doc = things(raw)
    entry = next(c for c in doc["capabilities"] if c["tool"] == "set_thing")
    tool = next(t for t in doc["tools"] if t["name"] == "set_thing")
    entry["risk"] = tool["risk"] = "medium"
    call = (ctx(request_id="same-turn"), "set_thing", '{"id": "t1", "status": "done"}')
    async with sidecar(redis_url, doc, BOTH) as before:
        first = (await before.pipeline.invoke(*call)).confirmation
    async with sidecar(redis_url, doc, keys("k0", k1=K1, k0=K0)) as after:
        again = (await after.pipeline.invoke(*call)).confirmation
    for shown in (first, again):
        assert (shown.capability_id, shown.tool_name, shown.risk) == (
            "thing.set",
            "set_thing",
            common_pb2.RISK_LEVEL_MEDIUM,
        )
        assert shown.preview.title == "把 t1 标为完成"
    assert again.token == first.token and first.token.startswith("cs1.k1.")
    assert again.action_id == first.action_id


async def test_an_admin_reads_an_executed_action_of_its_own_tenant_only_and_only_if_its_record_verifies(
    redis_url: str, raw: Raw, client: aioredis.Redis
) -> None:
    raw.script = created
    reader = {**ADMIN, "admin_mode": common_pb2.ADMIN_MODE_READONLY}
    other_tenant = {**reader, "tenant_id": "t2", "admin_context_id": "t2:ticket-7"}
    async with sidecar(redis_url, things(raw), BOTH) as parts:
        ran, edited = await card(parts, "已运行"), await card(parts, "被改过")
        for shown in (ran, edited):
            assert (await parts.pipeline.confirm(ctx(), shown.token, 0)).state == common_pb2.ACTION_STATE_SUCCEEDED
        assert (
            await parts.pipeline.get_action(ctx(**reader), ran.action_id)
        ).state == common_pb2.ACTION_STATE_SUCCEEDED
        err = await refused(parts.pipeline.get_action(ctx(**other_tenant), ran.action_id))
        assert (err.code, err.reason) == (grpc.StatusCode.PERMISSION_DENIED, "CONFIRMATION_BINDING_MISMATCH")
        assert err.message == "the action belongs to another owner or session"
        await client.hset(run_key(edited.action_id), "tool", b"create_plain")
        err = await refused(parts.pipeline.get_action(ctx(**reader), edited.action_id))
        assert (err.code, err.reason) == (grpc.StatusCode.DATA_LOSS, "RECORD_TAMPERED")
    assert len(raw.seen) == 2


# -- the audit events of a Confirm travel in its own scripts (issue 17) -------------------------------------------


@contextlib.asynccontextmanager
async def commands_sent(client: aioredis.Redis) -> AsyncIterator[list[str]]:
    """The commands clients send to Redis while the block runs, as MONITOR sees them (the commands a script runs
    inside Redis left out: they are no round trip)."""
    seen: list[str] = []
    end = f"end-{time.monotonic_ns()}"
    async with client.monitor() as monitor:

        async def listen() -> None:
            async for command in monitor.listen():
                if end in command["command"]:
                    return
                name = command["command"].split(" ")[0].strip('"').upper()
                if command["client_type"] != "lua" and name not in ("HELLO", "CLIENT"):  # a connection's set-up
                    seen.append(name if name != "EVALSHA" else command["command"].split(" ")[1].strip('"'))

        listening = asyncio.ensure_future(listen())
        await asyncio.sleep(0.05)
        yield seen
        await client.echo(end)
        await asyncio.wait_for(listening, 10)


async def test_a_confirm_is_two_scripts_and_its_claimed_and_settled_events_are_chained_when_it_returns(
    redis_url: str, raw: Raw, client: aioredis.Redis
) -> None:
    """claim.lua and settle.lua, nothing else (the events travel in settle.lua, not in a third script a moment
    later), and the chain holds issued, claimed, settled and verifies as soon as Confirm returns."""
    raw.script = created
    async with sidecar(redis_url, things(raw), BOTH) as parts:
        warm = await card(parts, "预热")  # every script loaded once (a first EVALSHA answers NOSCRIPT)
        await parts.pipeline.confirm(ctx(), warm.token, 0)
        shown = await card(parts, "两趟")
        await parts.audit.drain(2)
        await parts.quota.drain(2)  # the Invoke's quota count, written in the background
        script = {found.sha: name for name, found in parts.store._scripts.items()}
        async with commands_sent(client) as sent_:
            done = await parts.pipeline.confirm(ctx(), shown.token, 0)
            assert done.state == common_pb2.ACTION_STATE_SUCCEEDED
            rows = await client.xrange(events_key(shown.action_id))
            await asyncio.sleep(0.1)  # whatever the sidecar still writes in the background, it has sent by now
            await parts.audit.drain(2)
        assert [json.loads(f[b"e"])["t"] for _, f in rows] == ["issued", "claimed", "settled"]
        evidence = (await parts.store.audit_evidence([shown.action_id]))[0]
        assert verify.check(BOTH, evidence) is None
        assert [script.get(c, c) for c in sent_] == ["claim", "settle", "XRANGE"]  # the XRANGE: this test's


async def test_a_slow_downstreams_claim_is_in_the_chain_while_it_runs_and_its_outcome_follows(
    redis_url: str, raw: Raw, client: aioredis.Redis
) -> None:
    """A settle slower than CLAIMED_ALONE_AFTER finds the claimed event written alone (so the chain shows the
    running action's claim, and a sidecar killed meanwhile leaves it there); settled follows, in order."""
    raw.script = lambda seen: [CLAIMED_ALONE_AFTER + 0.5, *created(seen)]
    async with sidecar(redis_url, things(raw), BOTH) as parts:
        shown = await card(parts, "慢")
        confirming = asyncio.ensure_future(parts.pipeline.confirm(ctx(), shown.token, 0))
        await asyncio.sleep(CLAIMED_ALONE_AFTER + 0.25)
        assert not confirming.done()
        rows = await client.xrange(events_key(shown.action_id))
        assert [json.loads(f[b"e"])["t"] for _, f in rows] == ["issued", "claimed"]
        assert (await confirming).state == common_pb2.ACTION_STATE_SUCCEEDED
        await parts.audit.drain(2)
        rows = await client.xrange(events_key(shown.action_id))
        assert [json.loads(f[b"e"])["t"] for _, f in rows] == ["issued", "claimed", "settled"]
        assert verify.check(BOTH, (await parts.store.audit_evidence([shown.action_id]))[0]) is None


async def test_a_reject_is_its_peek_and_its_script_and_its_event_is_chained_when_it_returns(
    redis_url: str, raw: Raw, client: aioredis.Redis
) -> None:
    async with sidecar(redis_url, things(raw), BOTH) as parts:
        shown = await card(parts, "拒绝")
        await parts.audit.drain(2)
        await parts.quota.drain(2)
        await parts.pipeline.reject(ctx(), shown.token)  # every script loaded once
        shown = await card(parts, "再拒绝")
        await parts.audit.drain(2)
        await parts.quota.drain(2)
        script = {found.sha: name for name, found in parts.store._scripts.items()}
        async with commands_sent(client) as sent_:
            done = await parts.pipeline.reject(ctx(), shown.token)
            assert done.state == common_pb2.ACTION_STATE_REJECTED
            rows = await client.xrange(events_key(shown.action_id))
            await asyncio.sleep(0.1)
            await parts.audit.drain(2)
        assert [json.loads(f[b"e"])["t"] for _, f in rows] == ["issued", "rejected"]
        assert verify.check(BOTH, (await parts.store.audit_evidence([shown.action_id]))[0]) is None
        assert [script.get(c, c) for c in sent_] == ["peek", "reject", "XRANGE"]  # the XRANGE: this test's


async def test_an_action_issued_again_by_another_sidecar_chains_its_issued_event_after_the_chain_it_finds(
    redis_url: str, raw: Raw, client: aioredis.Redis
) -> None:
    """The second sidecar knows nothing of the chain: issue.lua answers where it ends, changing nothing, and the
    card is issued again with its event chained there."""
    raw.script = created
    context = ctx(request_id=f"r-again-{time.monotonic_ns()}")
    args = json.dumps({"title": "又一次", "amount": 2})
    async with sidecar(redis_url, things(raw), BOTH) as parts:
        first = (await parts.pipeline.invoke(context, "create_thing", args)).confirmation
    await client.delete(card_key(first.action_id))  # as its TTL would; the chain stays
    async with sidecar(redis_url, things(raw), BOTH) as parts:
        again = (await parts.pipeline.invoke(context, "create_thing", args)).confirmation
        assert again.action_id == first.action_id
        rows = await client.xrange(events_key(again.action_id))
        assert [json.loads(f[b"e"])["t"] for _, f in rows] == ["issued", "issued"]
        done = await parts.pipeline.confirm(context, again.token, 0)
        assert done.state == common_pb2.ACTION_STATE_SUCCEEDED
        rows = await client.xrange(events_key(again.action_id))
        assert [json.loads(f[b"e"])["t"] for _, f in rows] == ["issued", "issued", "claimed", "settled"]
        assert verify.check(BOTH, (await parts.store.audit_evidence([again.action_id]))[0]) is None
