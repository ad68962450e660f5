"""Claims, keys and records against an unlucky operator and an attacker with Redis write access (docs/design.md §7, §8,
§12): action ids survive key rotation, unresolved records are never forgotten, every field of a record is checked
against what was sealed, a request that was never sent gives the card back, and UNKNOWN says what it means.

Real parts only: two sidecar processes on one redis-server, the example todo service, tampering done with a real
redis client."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
import pytest
import redis
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from countersign.testing import processes
from countersign.testing.calls import ctx, error_info
from countersign.testing.faults import Cutter
from countersign.testing.processes import ROOT
from countersign.testing.stack import Stack, Todo, quiet, registry_with
from countersign.v1 import common_pb2, continuation_pb2, continuation_pb2_grpc, gateway_pb2

S = common_pb2
BOB = {"actor_id": "bob", "subject_id": "bob", "session_id": "s-bob"}


def turn() -> str:
    return uuid.uuid4().hex


def rpc_error(call: Any) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        call()
    return info.value


def retry_info(err: grpc.RpcError) -> error_details_pb2.RetryInfo | None:
    status = rpc_status.from_call(err)  # type: ignore[arg-type]
    for detail in status.details if status else []:
        info = error_details_pb2.RetryInfo()
        if detail.Unpack(info):
            return info
    return None


def confirm(stub: Any, token: str, **context: Any) -> common_pb2.Action:
    return stub.Confirm(gateway_pb2.ConfirmRequest(context=ctx(**context), token=token), timeout=15).action


def get(stub: Any, action_id: str, **context: Any) -> common_pb2.Action:
    return stub.GetAction(gateway_pb2.GetActionRequest(context=ctx(**context), action_id=action_id)).action


def invoke(stub: Any, title: str, request_id: str, **context: Any) -> gateway_pb2.InvokeResponse:
    return stub.Invoke(
        gateway_pb2.InvokeRequest(
            context=ctx(request_id=request_id, **context),
            tool_name="create_todo",
            arguments_json=json.dumps({"title": title}),
        )
    )


def client(stack: Stack) -> redis.Redis:
    return redis.Redis(unix_socket_path=stack.redis.info["socket"])


def run_key(action_id: str) -> str:
    return f"cs:{{{action_id}}}:run"


def card_key(action_id: str) -> str:
    return f"cs:{{{action_id}}}:card"


def says_unknown_plainly(message: str) -> bool:
    """The UNKNOWN message says the request may have landed, was not retried, and is reconciled by key."""
    text = message.lower()
    return all(re.search(p, text) for p in (r"may have reached", r"not retried", r"reconcil", r"idempotency key"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- item 6: key rotation does not change action ids ------------------------------------------------------


def test_two_sidecars_mid_rotation_give_one_action_one_execution_and_one_inverse(stack: Stack) -> None:
    """Keys files listing the same keys, differing only in `active`: the same call in the same turn is one
    action; confirming through each executes once; compensating through each runs one inverse."""
    rotated = processes.write_keys(stack.work, {**processes.TEST_KEYS, "active": "k0"})
    other = processes.start_sidecar(
        stack.work, stack.registry, redis_url=stack.redis.info["url"], keys=rotated, flags=["--log-level", "warning"]
    )
    try:
        a, b = stack.stub(), stack.stub(other.info["grpc"])
        request_id, title = turn(), f"轮换密钥-{uuid.uuid4().hex[:6]}"
        first, second = invoke(a, title, request_id), invoke(b, title, request_id)
        assert first.WhichOneof("outcome") == second.WhichOneof("outcome") == "confirmation"
        assert second.confirmation.action_id == first.confirmation.action_id, "one call, one action"
        assert second.confirmation.token == first.confirmation.token, "the same card, whichever sidecar answers"
        action_id = first.confirmation.action_id
        # b issues a card of its own too (sealed with k0), for a call a never saw
        solo = invoke(b, title + "-b", request_id).confirmation
        assert solo.token.split(".")[1] == "k0"

        done = confirm(a, first.confirmation.token)
        again = confirm(b, second.confirmation.token)
        assert done.state == S.ACTION_STATE_SUCCEEDED and not done.replayed
        assert again.replayed and again.receipt == done.receipt
        assert len(stack.todo.writes(action_id)) == 1, "the downstream saw one request"
        assert confirm(a, solo.token).state == S.ACTION_STATE_SUCCEEDED, "a k0 card confirms through a k1 sidecar"
        # the model retries the call after the write, through the other sidecar: the settled outcome, not a card
        replay = invoke(b, title, request_id)
        assert replay.WhichOneof("outcome") == "replay" and replay.replay.receipt == done.receipt

        undo_a = a.Compensate(gateway_pb2.CompensateRequest(context=ctx(), action_id=action_id))
        undo_b = b.Compensate(gateway_pb2.CompensateRequest(context=ctx(), action_id=action_id))
        assert undo_a.confirmation.token == undo_b.confirmation.token, "one inverse card, whichever sidecar answers"
        assert confirm(b, undo_a.confirmation.token).state == S.ACTION_STATE_SUCCEEDED
        assert confirm(a, undo_b.confirmation.token).replayed
        assert get(a, action_id).state == get(b, action_id).state == S.ACTION_STATE_COMPENSATED
        deletes = [e for e in stack.todo.requests(path=f"/todos/{done.receipt.resource_id}") if e["method"] == "DELETE"]
        assert len(deletes) == 1, "one inverse reached the downstream"
    finally:
        other.stop()


def test_a_sidecar_whose_keys_file_would_derive_other_ids_refuses_to_start(stack: Stack) -> None:
    """The keys file without id_key derives ids from its smallest key id (k0 here). Dropping k0 would change
    every id: that sidecar must not start on this Redis. Pinning k0 as id_key lets k0 go."""
    request_id, title = turn(), "身份密钥"
    card = invoke(stack.stub(), title, request_id).confirmation
    dropped = processes.write_keys(stack.work, {"active": "k1", "keys": {"k1": processes.TEST_KEYS["keys"]["k1"]}})
    try:
        started = processes.start_sidecar(stack.work, stack.registry, redis_url=stack.redis.info["url"], keys=dropped)
    except RuntimeError as exc:
        refused = str(exc)
    else:  # never leave a process behind, even when this test fails
        started.stop()
        raise AssertionError("a sidecar that derives other action ids started on this Redis")
    assert "derives action ids from 'k1'" in refused and "from 'k0'" in refused, refused
    pinned = processes.write_keys(
        stack.work,
        {
            "active": "k1",
            "id_key": processes.TEST_KEYS["keys"]["k0"],
            "keys": {"k1": processes.TEST_KEYS["keys"]["k1"]},
        },
    )
    sidecar = processes.start_sidecar(stack.work, stack.registry, redis_url=stack.redis.info["url"], keys=pinned)
    try:
        again = invoke(stack.stub(sidecar.info["grpc"]), title, request_id)
        assert again.confirmation.action_id == card.action_id and again.confirmation.token == card.token
    finally:
        sidecar.stop()


def test_a_sidecar_that_no_longer_lists_the_key_of_an_unknown_action_leaves_it_to_one_that_does(
    fresh_stack: Stack,
) -> None:
    """Unresolved records never expire, so the key that sealed one must stay listed until it is resolved. A
    sidecar whose keys file dropped it too early neither crashes nor sends it to manual review."""
    stack = quiet(fresh_stack)
    sealer = stack.start_sidecar(flags=["--downstream-deadline", "300ms", "--reconcile-interval", "1h"])
    dropped = processes.write_keys(stack.work, {"active": "k0", "keys": {"k0": processes.TEST_KEYS["keys"]["k0"]}})
    other: processes.Proc | None = None
    try:
        other = processes.start_sidecar(
            stack.work,
            stack.registry,
            redis_url=stack.redis.info["url"],
            keys=dropped,
            flags=["--reconcile-interval", "200ms", "--log-level", "warning"],
        )
        stub = stack.stub(sealer.info["grpc"])
        card = invoke(stub, "密钥已移除", turn()).confirmation  # sealed with k1
        stack.todo.fault(path="/todos", method="POST", mode="hang_after_commit", seconds=1.0, times=1)
        assert confirm(stub, card.token).state == S.ACTION_STATE_UNKNOWN
        time.sleep(1.5)  # several passes of the other sidecar's reconciler
        assert client(stack).hget(run_key(card.action_id), "st") == b"unknown", "not swept to manual review"
        with urllib.request.urlopen(f"http://{other.info['metrics']}/metrics", timeout=5) as resp:
            assert re.search(
                r'^countersign_reconciliations_total\{result="key_not_listed",tool="create_todo"\} '
                r"[1-9]",
                resp.read().decode(),
                re.M,
            ), "left alone, and counted"
        err = rpc_error(lambda: get(stack.stub(other.info["grpc"]), card.action_id))
        assert err.code() == grpc.StatusCode.DATA_LOSS and "'k1'" in (err.details() or ""), "fails closed, names k1"
        done = stub.Reconcile(gateway_pb2.ReconcileRequest(context=ctx(), action_id=card.action_id)).action
        assert done.state == S.ACTION_STATE_SUCCEEDED, "the sidecar that lists k1 resolves it at once"
    finally:
        if other is not None:
            other.stop()
        sealer.stop()


# -- item 8: unresolved records never expire -----------------------------------------------------------------


def cli(stack: Stack, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "countersign.sidecar.cli",
            *args,
            "--redis-url",
            stack.redis.info["url"],
            "--keys-file",
            str(stack.keys),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )


def test_an_unknown_action_outlives_the_replay_ttl(fresh_stack: Stack) -> None:
    stack = quiet(fresh_stack)
    sidecar = stack.start_sidecar(
        flags=["--replay-ttl", "1s", "--downstream-deadline", "300ms", "--reconcile-interval", "1h"]
    )
    try:
        stub = stack.stub(sidecar.info["grpc"])
        request_id, title = turn(), "未知不可遗忘"
        card = invoke(stub, title, request_id).confirmation
        stack.todo.fault(path="/todos", method="POST", mode="hang_after_commit", seconds=1.0, times=1)
        assert confirm(stub, card.token).state == S.ACTION_STATE_UNKNOWN
        time.sleep(2.0)  # twice the replay TTL
        assert client(stack).pttl(run_key(card.action_id)) == -1, "an unresolved record has no expiry"
        got = get(stub, card.action_id)
        assert got.state == S.ACTION_STATE_UNKNOWN and says_unknown_plainly(got.error.message)
        listed = cli(stack, "actions", "list", "--state", "unknown", "--json")
        assert card.action_id in {r["action_id"] for r in json.loads(listed.stdout)}, listed.stderr
        again = invoke(stub, title, request_id)
        assert again.WhichOneof("outcome") == "replay", "the same call in the same turn gets no fresh card"
        assert again.replay.action_id == card.action_id and again.replay.state == S.ACTION_STATE_UNKNOWN
        assert len(stack.todo.writes(card.action_id)) == 1
        # once it settles, the replay TTL applies
        done = stub.Reconcile(gateway_pb2.ReconcileRequest(context=ctx(), action_id=card.action_id)).action
        assert done.state == S.ACTION_STATE_SUCCEEDED
        assert 0 < client(stack).pttl(run_key(card.action_id)) <= 1000
    finally:
        sidecar.stop()


def test_a_needs_manual_review_action_outlives_the_replay_ttl_and_a_resolved_one_expires(fresh_stack: Stack) -> None:
    stack = quiet(fresh_stack)
    cutter = Cutter()
    sidecar = stack.start_sidecar(
        registry=registry_with(stack, execute_url=cutter.url, fence=False, lookup=False),
        flags=["--replay-ttl", "1s", "--reconcile-interval", "1h"],
    )
    try:
        stub = stack.stub(sidecar.info["grpc"])
        request_id, title = turn(), "复核不可遗忘"
        card = invoke(stub, title, request_id).confirmation
        confirm(stub, card.token)
        review = stub.Reconcile(gateway_pb2.ReconcileRequest(context=ctx(), action_id=card.action_id)).action
        assert review.state == S.ACTION_STATE_NEEDS_MANUAL_REVIEW
        time.sleep(2.0)
        assert client(stack).pttl(run_key(card.action_id)) == -1
        assert get(stub, card.action_id).state == S.ACTION_STATE_NEEDS_MANUAL_REVIEW
        listed = cli(stack, "actions", "list", "--state", "needs-manual-review", "--json")
        assert card.action_id in {r["action_id"] for r in json.loads(listed.stdout)}
        again = invoke(stub, title, request_id)
        assert again.WhichOneof("outcome") == "replay"
        assert again.replay.state == S.ACTION_STATE_NEEDS_MANUAL_REVIEW
    finally:
        sidecar.stop()
        cutter.close()
    # (--reconcile-window 1ms: this test is about the record's TTL, not resolving while a request may still land)
    resolved = cli(
        stack,
        "actions",
        "resolve",
        card.action_id,
        "--outcome",
        "failed",
        "--reason",
        "checked: absent",
        "--operator",
        "sre-alice",
        "--replay-ttl",
        "1h",
        "--reconcile-window",
        "1ms",
    )
    assert resolved.returncode == 0, resolved.stderr
    assert 0 < client(stack).pttl(run_key(card.action_id)) <= 3_600_000, "a settled outcome gets the replay TTL"


def test_a_running_action_outlives_the_replay_ttl_and_its_settle_lands(fresh_stack: Stack) -> None:
    stack = quiet(fresh_stack)
    sidecar = stack.start_sidecar(
        flags=["--replay-ttl", "1s", "--downstream-deadline", "5s", "--lease", "10s", "--reconcile-interval", "1h"]
    )
    try:
        stub = stack.stub(sidecar.info["grpc"])
        card = invoke(stub, "慢慢执行", turn()).confirmation
        stack.todo.fault(path="/todos", method="POST", mode="hang_before_commit", seconds=2.5, times=1)
        with ThreadPoolExecutor(1) as pool:
            pending = pool.submit(confirm, stub, card.token)
            time.sleep(1.8)
            assert client(stack).pttl(run_key(card.action_id)) == -1
            assert get(stub, card.action_id).state == S.ACTION_STATE_RUNNING
            done = pending.result(timeout=10)
        assert done.state == S.ACTION_STATE_SUCCEEDED
        assert get(stub, card.action_id).receipt == done.receipt, "the settle found its record"
    finally:
        sidecar.stop()


# -- item 10: every field an attacker could copy between records is checked against the sealed body ----------


def _settled(stack: Stack, title: str, **context: Any) -> tuple[str, common_pb2.Action]:
    card = invoke(stack.stub(), f"{title}-{uuid.uuid4().hex[:6]}", turn(), **context).confirmation
    action = confirm(stack.stub(), card.token, **context)
    assert action.state == S.ACTION_STATE_SUCCEEDED
    return card.action_id, action


def test_copying_ones_own_binding_over_anothers_record_reveals_and_undoes_nothing(stack: Stack) -> None:
    alice, alice_action = _settled(stack, "爱丽丝的")
    bob, _ = _settled(stack, "鲍勃的", **BOB)
    r = client(stack)
    r.hset(run_key(alice), "b", r.hget(run_key(bob), "b") or b"")
    stub = stack.stub()
    err = rpc_error(lambda: get(stub, alice, **BOB))
    assert (err.code(), error_info(err).reason) == (grpc.StatusCode.DATA_LOSS, "RECORD_TAMPERED")
    assert alice_action.receipt.resource_id not in (err.details() or "")
    err = rpc_error(lambda: stub.Compensate(gateway_pb2.CompensateRequest(context=ctx(**BOB), action_id=alice)))
    assert (err.code(), error_info(err).reason) == (grpc.StatusCode.DATA_LOSS, "RECORD_TAMPERED")
    assert not [
        e for e in stack.todo.requests(path=f"/todos/{alice_action.receipt.resource_id}") if e["method"] == "DELETE"
    ], "nothing was undone"
    conts = continuation_pb2_grpc.ContinuationServiceStub(grpc.insecure_channel(stack.address))
    err = rpc_error(
        lambda: conts.OpenContinuation(
            continuation_pb2.OpenContinuationRequest(
                context=ctx(**BOB), action_id=alice, snapshot=continuation_pb2.ContinuationSnapshot(question="q")
            )
        )
    )
    assert (err.code(), error_info(err).reason) == (grpc.StatusCode.DATA_LOSS, "RECORD_TAMPERED")
    for caller in ({}, BOB):  # the owner is told too: the record cannot be trusted
        err = rpc_error(lambda caller=caller: get(stub, alice, **caller))
        assert error_info(err).reason == "RECORD_TAMPERED"
    for call in (lambda: stub.Reconcile(gateway_pb2.ReconcileRequest(context=ctx(**BOB), action_id=alice)),):
        err = rpc_error(call)
        assert error_info(err).reason == "RECORD_TAMPERED"


@pytest.mark.parametrize("field", ["kid", "tool", "card", "st", "everything", "out"])
def test_a_field_copied_between_run_records_is_detected_never_obeyed(stack: Stack, field: str) -> None:
    victim, _ = _settled(stack, "受害者")
    donor, _ = _settled(stack, "供体")
    r = client(stack)
    source = r.hgetall(run_key(donor))
    if field == "kid":
        r.hset(run_key(victim), "kid", "k0")
    elif field == "tool":
        r.hset(run_key(victim), "tool", "delete_todo")
    elif field == "card":
        r.hset(run_key(victim), mapping={"card": source[b"card"], "cmac": source[b"cmac"]})
    elif field == "st":
        r.hset(run_key(victim), "st", "unknown")
    elif field == "out":
        r.hset(run_key(victim), mapping={"out": source[b"out"], "omac": source[b"omac"]})
    else:
        r.delete(run_key(victim))
        r.hset(run_key(victim), mapping=source)
    err = rpc_error(lambda: get(stack.stub(), victim))
    assert (err.code(), error_info(err).reason) == (grpc.StatusCode.DATA_LOSS, "RECORD_TAMPERED")


@pytest.mark.parametrize("forge", ["continuation_state", "receipt_status"])
def test_a_continuation_made_ready_by_hand_on_a_failed_action_is_never_claimed(stack: Stack, forge: str) -> None:
    """I8: a continuation opens only on its own action's SUCCEEDED receipt, whatever the stored flags say."""
    card = invoke(stack.stub(), f"会失败-{uuid.uuid4().hex[:6]}", turn()).confirmation
    conts = continuation_pb2_grpc.ContinuationServiceStub(grpc.insecure_channel(stack.address))
    opened = conts.OpenContinuation(
        continuation_pb2.OpenContinuationRequest(
            context=ctx(), action_id=card.action_id, snapshot=continuation_pb2.ContinuationSnapshot(question="q")
        )
    )
    stack.todo.fault(path="/todos", method="POST", mode="status", status=409, times=1)
    assert confirm(stack.stub(), card.token).state == S.ACTION_STATE_FAILED
    r = client(stack)
    if forge == "continuation_state":
        r.hset(f"cs:{{{card.action_id}}}:cont", "st", "ready")
    else:  # the settle's flag, then a continuation opened afresh reads it
        r.hset(run_key(card.action_id), "rs", "SUCCEEDED")
        r.delete(f"cs:{{{card.action_id}}}:cont")
        opened = conts.OpenContinuation(
            continuation_pb2.OpenContinuationRequest(
                context=ctx(), action_id=card.action_id, snapshot=continuation_pb2.ContinuationSnapshot(question="q")
            )
        )
    err = rpc_error(
        lambda: conts.ClaimContinuation(
            continuation_pb2.ClaimContinuationRequest(context=ctx(), token=opened.continuation.token)
        )
    )
    assert (err.code(), error_info(err).reason) == (grpc.StatusCode.DATA_LOSS, "RECORD_TAMPERED")


def test_a_card_made_to_live_past_its_sealed_expiry_is_expired_and_never_executes(stack: Stack) -> None:
    sidecar = stack.start_sidecar(flags=["--confirm-ttl", "1s"])
    try:
        stub = stack.stub(sidecar.info["grpc"])
        request_id, title = turn(), "永不过期"
        card = invoke(stub, title, request_id).confirmation
        assert client(stack).persist(card_key(card.action_id))
        time.sleep(3.0)
        err = rpc_error(lambda: confirm(stub, card.token))
        assert (err.code(), error_info(err).reason) == (grpc.StatusCode.NOT_FOUND, "CONFIRMATION_EXPIRED")
        assert stack.todo.writes(card.action_id) == [], "the downstream saw nothing"
        # the model calls again in the same turn: a fresh card, not the one kept alive by hand
        fresh = invoke(stub, title, request_id).confirmation
        assert fresh.action_id == card.action_id
        assert fresh.expires_at.ToMilliseconds() > int(time.time() * 1000)
    finally:
        sidecar.stop()


@pytest.mark.parametrize("field", ["kid", "tool"])
def test_a_cards_key_id_or_tool_changed_by_hand_is_tampered_and_never_executes(stack: Stack, field: str) -> None:
    card = invoke(stack.stub(), f"卡片字段-{field}-{uuid.uuid4().hex[:6]}", turn()).confirmation
    client(stack).hset(card_key(card.action_id), field, {"kid": "k9", "tool": "delete_todo"}[field])
    err = rpc_error(lambda: confirm(stack.stub(), card.token))
    assert (err.code(), error_info(err).reason) == (grpc.StatusCode.DATA_LOSS, "CONFIRMATION_TAMPERED"), err
    again = rpc_error(lambda: confirm(stack.stub(), card.token))  # the record carries the changed field on
    assert again.code() == grpc.StatusCode.DATA_LOSS
    assert error_info(again).reason in ("CONFIRMATION_TAMPERED", "RECORD_TAMPERED")
    assert stack.todo.writes(card.action_id) == []


def test_copying_ones_binding_onto_anothers_card_reveals_nothing_and_runs_nothing(stack: Stack) -> None:
    victim = invoke(stack.stub(), "别人的卡片", turn()).confirmation
    bobs = invoke(stack.stub(), "鲍勃的卡片", turn(), **BOB).confirmation
    r = client(stack)
    r.hset(card_key(victim.action_id), "b", r.hget(card_key(bobs.action_id), "b") or b"")
    err = rpc_error(lambda: get(stack.stub(), victim.action_id, **BOB))
    assert (err.code(), error_info(err).reason) == (grpc.StatusCode.DATA_LOSS, "CONFIRMATION_TAMPERED")
    assert stack.todo.writes(victim.action_id) == []


def test_a_sealed_card_copied_under_another_action_id_never_executes(stack: Stack) -> None:
    target = invoke(stack.stub(), "目标", turn()).confirmation
    donor = invoke(stack.stub(), "供体卡片", turn()).confirmation
    r = client(stack)
    r.delete(card_key(target.action_id))
    r.hset(card_key(target.action_id), mapping=r.hgetall(card_key(donor.action_id)))
    r.pexpire(card_key(target.action_id), 60_000)
    err = rpc_error(lambda: confirm(stack.stub(), target.token))
    assert (err.code(), error_info(err).reason) == (grpc.StatusCode.DATA_LOSS, "CONFIRMATION_TAMPERED")
    assert stack.todo.writes(target.action_id) == [] and stack.todo.writes(donor.action_id) == []


def test_a_claim_id_overwritten_mid_call_is_never_obeyed(fresh_stack: Stack) -> None:
    """The executor's settle is refused; the downstream's truth still reaches the record, by reconciliation."""
    stack = quiet(fresh_stack)
    sidecar = stack.start_sidecar(
        flags=["--lease", "1500ms", "--downstream-deadline", "1s", "--reconcile-interval", "1h"]
    )
    try:
        stub = stack.stub(sidecar.info["grpc"])
        card = invoke(stub, "认领被改", turn()).confirmation
        stack.todo.fault(path="/todos", method="POST", mode="hang_before_commit", seconds=0.5, times=1)
        with ThreadPoolExecutor(1) as pool:
            pending = pool.submit(confirm, stub, card.token)
            time.sleep(0.25)
            client(stack).hset(run_key(card.action_id), "claim", "attacker")
            done = pending.result(timeout=10)
        assert done.state == S.ACTION_STATE_SUCCEEDED
        time.sleep(1.6)  # the lease lapses: UNKNOWN, never READY
        assert get(stub, card.action_id).state == S.ACTION_STATE_UNKNOWN
        settled = stub.Reconcile(gateway_pb2.ReconcileRequest(context=ctx(), action_id=card.action_id)).action
        assert settled.state == S.ACTION_STATE_SUCCEEDED
        assert settled.receipt.resource_id == done.receipt.resource_id
        assert len(stack.todo.writes(card.action_id)) == 1
    finally:
        sidecar.stop()


# -- item 11: a request that was never sent gives the card back -------------------------------------------------


def test_a_request_never_sent_leaves_the_card_ready_and_the_same_token_executes_once_later(stack: Stack) -> None:
    port = free_port()
    registry = registry_with(stack, execute_url=f"http://127.0.0.1:{port}")
    sidecar = stack.start_sidecar(registry=registry)
    later: processes.Proc | None = None
    try:
        stub = stack.stub(sidecar.info["grpc"])
        card = invoke(stub, "下游未启动", turn()).confirmation
        err = rpc_error(lambda: confirm(stub, card.token))
        assert (err.code(), error_info(err).reason) == (grpc.StatusCode.UNAVAILABLE, "DOWNSTREAM_NOT_SENT")
        # like every downstream refusal, it names the tool and where its downstream is (issue 16 point 9)
        assert dict(error_info(err).metadata) == {"tool": "create_todo", "downstream": f"http://127.0.0.1:{port}/todos"}
        assert "create_todo" in (err.details() or "") and f"127.0.0.1:{port}" in (err.details() or "")
        retry = retry_info(err)
        assert retry is not None and retry.retry_delay.ToMilliseconds() > 0
        assert get(stub, card.action_id).state == S.ACTION_STATE_READY, "the card is back"
        assert client(stack).pttl(card_key(card.action_id)) > 0, "with its expiry"
        later = processes._start(
            [
                sys.executable,
                "-m",
                "examples.todo_service",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--db",
                str(stack.work / f"later-{uuid.uuid4().hex}.db"),
            ],
            stack.work,
            "todo",
        )
        later.info["url"] = f"http://127.0.0.1:{port}"
        downstream = Todo(later)
        done = confirm(stub, card.token)
        assert done.state == S.ACTION_STATE_SUCCEEDED and not done.replayed
        assert confirm(stub, card.token).replayed
        assert len(downstream.writes(card.action_id)) == 1, "executed once"
    finally:
        sidecar.stop()
        if later is not None:
            later.stop()


# -- item 12: UNKNOWN says what it means -----------------------------------------------------------------------


def test_every_unknown_says_it_may_have_landed_was_not_retried_and_is_reconciled_by_key(fresh_stack: Stack) -> None:
    stack = quiet(fresh_stack)
    sidecar = stack.start_sidecar(
        flags=["--downstream-deadline", "300ms", "--lease", "1s", "--reconcile-interval", "1h"]
    )
    try:
        stub = stack.stub(sidecar.info["grpc"])
        # timeout after send
        card = invoke(stub, "未知的说明", turn()).confirmation
        stack.todo.fault(path="/todos", method="POST", mode="hang_after_commit", seconds=1.0, times=1)
        first = confirm(stub, card.token)
        assert first.state == S.ACTION_STATE_UNKNOWN and says_unknown_plainly(first.error.message), first
        assert says_unknown_plainly(confirm(stub, card.token).error.message), "the replay says it too"
        # a 5xx
        card = invoke(stub, "五百", turn()).confirmation
        stack.todo.fault(path="/todos", method="POST", mode="status", status=503, times=1)
        assert says_unknown_plainly(confirm(stub, card.token).error.message)
        # a lease that lapsed under a sidecar that died mid-call
        card = invoke(stub, "租约过期", turn()).confirmation
        stack.todo.fault(path="/todos", method="POST", mode="hang_before_commit", seconds=3.0, times=1)
        # (killed at 0.3 s, mid-call; the deadline plus 500 ms must fit in the lease, or the start is refused)
        victim = stack.start_sidecar(
            flags=["--downstream-deadline", "500ms", "--lease", "1s", "--reconcile-interval", "1h"]
        )
        try:
            with ThreadPoolExecutor(1) as pool:
                pool.submit(confirm, stack.stub(victim.info["grpc"]), card.token)  # dies with its sidecar
                time.sleep(0.3)
                victim.kill9()
        finally:
            victim.stop()
        time.sleep(0.8)
        lapsed = get(stub, card.action_id)
        assert (lapsed.state, lapsed.error.reason) == (S.ACTION_STATE_UNKNOWN, "LEASE_LAPSED")
        assert says_unknown_plainly(lapsed.error.message), lapsed
        # an inverse whose answer was lost: the original is COMPENSATING, and says why in the same words
        card = invoke(stub, "撤销未知", turn()).confirmation
        created = confirm(stub, card.token)
        stack.todo.fault(
            path=f"/todos/{created.receipt.resource_id}",
            method="DELETE",
            mode="hang_after_commit",
            seconds=1.0,
            times=1,
        )
        inverse = stub.Compensate(gateway_pb2.CompensateRequest(context=ctx(), action_id=card.action_id)).confirmation
        assert confirm(stub, inverse.token).state == S.ACTION_STATE_UNKNOWN
        undo = stub.Compensate(gateway_pb2.CompensateRequest(context=ctx(), action_id=card.action_id)).action
        assert undo.state == S.ACTION_STATE_COMPENSATING and says_unknown_plainly(undo.error.message), undo
        assert says_unknown_plainly(get(stub, card.action_id).error.message)
    finally:
        sidecar.stop()
