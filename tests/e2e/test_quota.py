"""Per-tenant quota of stored state (issue 11, item 16): one tenant cannot fill Redis for everyone.

A real sidecar, real Redis, the real todo service. The cap counts what a tenant keeps in Redis: actions (a card,
then its run record and continuation) and turns (the list of a turn's read facts and proposed actions).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid

import grpc
import pytest
import redis

from countersign.keyring import Keyring
from countersign.store.keys import quota_key
from countersign.testing.calls import ctx, error_info
from countersign.testing.stack import Stack
from countersign.v1 import gateway_pb2, gateway_pb2_grpc


def turn() -> str:
    return uuid.uuid4().hex


def quiet_keys(r: redis.Redis) -> list[bytes]:
    """Every key, once the audit events written in the background (20 ms batches) have landed."""
    keys = sorted(r.keys("*"))
    while True:
        time.sleep(0.1)
        again = sorted(r.keys("*"))
        if again == keys:
            return keys
        keys = again


def test_a_tenant_beyond_its_cap_gets_quota_exceeded_nothing_is_stored_and_another_tenant_is_unaffected(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COUNTERSIGN_TENANT_QUOTA", "3")
    sidecar = stack.start_sidecar()
    r = redis.Redis(unix_socket_path=stack.redis.info["socket"])
    greedy = {"tenant_id": "greedy-" + turn()}
    try:
        stub = stack.stub(sidecar.info["grpc"])

        def invoke(tool: str, args: dict[str, str], **context: str) -> gateway_pb2.InvokeResponse:
            return stub.Invoke(
                gateway_pb2.InvokeRequest(context=ctx(**context), tool_name=tool, arguments_json=json.dumps(args)),
                timeout=10,
            )

        rid = turn()
        first = stack.card(stub, request_id=rid, title="一", **greedy)  # an action and a turn: 2
        assert invoke("list_todos", {}, request_id=rid, **greedy).result.tool_name == "list_todos"  # same turn
        stack.card(stub, request_id=rid, title="二", **greedy)  # another action: 3
        again = stack.card(stub, request_id=rid, title="一", **greedy)
        assert again.action_id == first.action_id, "the same call in the same turn still gets its card"
        before = quiet_keys(r)
        for refused in (
            lambda: invoke("create_todo", {"title": "三"}, request_id=rid, **greedy),
            lambda: invoke("list_todos", {}, request_id=turn(), **greedy),
        ):
            with pytest.raises(grpc.RpcError) as info:
                refused()
            assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert error_info(info.value).reason == "QUOTA_EXCEEDED"
            assert "--tenant-quota" in (info.value.details() or "")
        assert quiet_keys(r) == before, "a refused call stores nothing"
        other = stack.card(stub, request_id=turn(), title="三", tenant_id="modest-" + turn())
        assert other.action_id, "another tenant is unaffected"
    finally:
        sidecar.stop()


def test_a_refused_prepare_keeps_nothing_and_counts_nothing(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COUNTERSIGN_TENANT_QUOTA", "2")
    sidecar = stack.start_sidecar()
    tenant = {"tenant_id": "refused-" + turn()}
    try:
        stub = stack.stub(sidecar.info["grpc"])
        rid = turn()
        for n in range(3):  # the todo service refuses a due date in the past at prepare: no card
            with pytest.raises(grpc.RpcError) as info:
                stub.Invoke(
                    gateway_pb2.InvokeRequest(
                        context=ctx(request_id=rid, **tenant),
                        tool_name="create_todo",
                        arguments_json=json.dumps({"title": f"过去 {n}", "dueAt": "2020-01-01T00:00:00+08:00"}),
                    )
                )
            assert error_info(info.value).reason == "TODO_DUE_AT_SUSPICIOUS"
        assert stack.card(stub, request_id=rid, title="现在", **tenant).action_id, (
            "three refused prepares did not use up the cap of 2 (one action, one turn)"
        )
    finally:
        sidecar.stop()


def test_a_continuation_snapshot_is_bounded_so_the_cap_bounds_bytes_too(stack: Stack) -> None:
    from countersign.v1 import continuation_pb2, continuation_pb2_grpc

    card = stack.card(request_id=turn(), title="快照上限")
    conts = continuation_pb2_grpc.ContinuationServiceStub(grpc.insecure_channel(stack.address))
    huge = continuation_pb2.ContinuationSnapshot(question="问" * 40_000, locale="zh-CN")
    with pytest.raises(grpc.RpcError) as info:
        conts.OpenContinuation(
            continuation_pb2.OpenContinuationRequest(context=ctx(), action_id=card.action_id, snapshot=huge)
        )
    assert (info.value.code(), error_info(info.value).reason) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "SNAPSHOT_TOO_LARGE",
    )
    r = redis.Redis(unix_socket_path=stack.redis.info["socket"])
    assert not r.exists(f"cs:{{{card.action_id}}}:cont"), "nothing was stored"


def _held(stack: Stack, tenant: str) -> int:
    """The records the tenant's quota counts now (its sorted set, keyed by a keyed hash of the tenant id)."""
    keyring = Keyring.from_file(str(stack.keys))
    r = redis.Redis(unix_socket_path=stack.redis.info["socket"])
    return int(r.zcard(quota_key(keyring.derived_id("quota", tenant))))


def _fill(stub: gateway_pb2_grpc.ToolGatewayServiceStub, tenant: str, calls: int) -> tuple[int, int]:
    """Cards in fresh turns (an action and a turn each) until refused: (cards issued, calls refused)."""
    issued = refused = 0
    for n in range(calls):
        try:
            stub.Invoke(
                gateway_pb2.InvokeRequest(
                    context=ctx(tenant_id=tenant, request_id=turn()),
                    tool_name="create_todo",
                    arguments_json=json.dumps({"title": f"填满 {n}"}),
                ),
                timeout=10,
            )
            issued += 1
        except grpc.RpcError as exc:
            assert error_info(exc).reason == "QUOTA_EXCEEDED", exc
            refused += 1
    return issued, refused


def test_far_from_the_cap_members_are_counted_in_batches_and_the_cap_still_holds_exactly(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cap 40: the first cards are admitted on the batched path (below half the cap), the rest are asked of Redis;
    exactly 20 cards
    (40 records) are stored, and a sidecar stopped right after admitting still counts what it admitted."""
    monkeypatch.setenv("COUNTERSIGN_TENANT_QUOTA", "40")
    tenant = "batched-" + turn()
    sidecar = stack.start_sidecar()
    try:
        issued, refused = _fill(stack.stub(sidecar.info["grpc"]), tenant, 24)
    finally:
        sidecar.stop()
    assert (issued, refused) == (20, 4)
    assert _held(stack, tenant) == 40
    quick = stack.start_sidecar()
    other = "sigterm-" + turn()
    try:  # a few cards, then SIGTERM at once: what was admitted but not yet sent is sent on the way out
        assert _fill(stack.stub(quick.info["grpc"]), other, 3) == (3, 0)
    finally:
        quick.stop()
    assert _held(stack, other) == 6


def test_two_sidecars_sharing_a_tenant_keep_it_near_its_cap(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COUNTERSIGN_TENANT_QUOTA", "60")
    tenant = "shared-" + turn()
    sidecars = [stack.start_sidecar(), stack.start_sidecar()]
    try:
        stubs = [stack.stub(s.info["grpc"]) for s in sidecars]
        results = []
        for _ in range(20):  # alternate: each sidecar's count of the other's is up to 50 ms old
            for stub in stubs:
                results.append(_fill(stub, tenant, 1))
        issued = sum(i for i, _ in results)
        time.sleep(0.3)  # both sidecars sent their batches
        held = _held(stack, tenant)
    finally:
        for s in sidecars:
            s.stop()
    assert held == 2 * issued, "every stored action and turn is counted"
    # each sidecar hears of the other's batched admissions within about 100 ms; they batch only below 30
    assert 60 <= held <= 66, f"{held} records: the cap is 60"


def test_thirty_invokes_of_one_tenant_at_once_never_take_it_over_its_cap(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COUNTERSIGN_TENANT_QUOTA", "20")
    tenant = "racing-" + turn()
    sidecar = stack.start_sidecar()
    try:
        assert _fill(stack.stub(sidecar.info["grpc"]), tenant, 1) == (1, 0)  # the count is heard: batched path

        async def race() -> list[str]:
            async with grpc.aio.insecure_channel(sidecar.info["grpc"]) as channel:
                stub = gateway_pb2_grpc.ToolGatewayServiceStub(channel)

                async def one(n: int) -> str:
                    try:
                        await stub.Invoke(
                            gateway_pb2.InvokeRequest(
                                context=ctx(tenant_id=tenant, request_id=turn()),
                                tool_name="create_todo",
                                arguments_json=json.dumps({"title": f"同时 {n}"}),
                            ),
                            timeout=20,
                        )
                        return "card"
                    except grpc.aio.AioRpcError as exc:
                        return error_info(exc).reason

                return await asyncio.gather(*(one(n) for n in range(30)))

        outcomes = asyncio.run(race())
        time.sleep(0.2)
    finally:
        sidecar.stop()
    assert outcomes.count("card") == 9 and outcomes.count("QUOTA_EXCEEDED") == 21, outcomes
    assert _held(stack, tenant) == 20


def test_a_key_rotation_keeps_counting_the_tenant_it_already_counted(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The quota's set is named by a keyed hash of the tenant under the id key (h11-records), which rotation never
    touches: a sidecar restarted with another active key finds the tenant's count, not a fresh one."""
    from countersign.testing import processes

    monkeypatch.setenv("COUNTERSIGN_TENANT_QUOTA", "4")
    tenant = "rotating-" + turn()
    sidecar = stack.start_sidecar()
    try:
        assert _fill(stack.stub(sidecar.info["grpc"]), tenant, 2) == (2, 0)  # two cards, two turns: 4 records
    finally:
        sidecar.stop()  # SIGTERM sends what was admitted
    rotated = processes.write_keys(stack.work, {**processes.TEST_KEYS, "active": "k0"})
    assert processes.TEST_KEYS["active"] != "k0"
    sidecar = processes.start_sidecar(
        stack.work, stack.registry, redis_url=stack.redis.info["url"], keys=rotated, flags=["--log-level", "warning"]
    )
    try:
        assert _fill(stack.stub(sidecar.info["grpc"]), tenant, 1) == (0, 1), "the rotated sidecar counts on"
    finally:
        sidecar.stop()
    assert _held(stack, tenant) == 4
