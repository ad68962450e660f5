"""The audit chains and what leaves the process about an action (issue 11, items 14 and 15).

Real redis-server, the real sidecar process and the real `countersign` CLI. The attacks are what someone
with write access to Redis can do with redis-cli: delete or truncate a chain, forge its anchor.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import socket
import subprocess
import sys
import time
import uuid
from typing import Any

import grpc
import pytest
import redis
import rfc8785
import yaml

from countersign.testing.calls import ctx
from countersign.testing.processes import ROOT, TEST_KEYS
from countersign.testing.stack import Stack
from countersign.v1 import common_pb2, continuation_pb2, continuation_pb2_grpc, gateway_pb2, guard_pb2, guard_pb2_grpc


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


def _redis(stack: Stack) -> redis.Redis:
    return redis.Redis(unix_socket_path=stack.redis.info["socket"])


def _key_hmac(label: str, data: bytes, kid: str = TEST_KEYS["active"]) -> str:
    """What a holder of the keys file computes to test a guess (docs/runbook.md, "Keyed hashes")."""
    key = bytes.fromhex(TEST_KEYS["keys"][kid])
    mac = hmac.digest(key, f"digest:{label}:".encode() + data, "sha256")[:16]
    return f"{kid}." + base64.urlsafe_b64encode(mac).rstrip(b"=").decode()


def _bare_hashes(values: list[bytes]) -> set[str]:
    """Every unkeyed hash a dictionary attack would try, in the usual encodings."""
    out = set()
    for value in values:
        for name in ("sha256", "sha1", "md5", "sha512", "sha3_256", "blake2b", "blake2s"):
            digest = hashlib.new(name, value).digest()
            out |= {
                digest.hex(),
                digest.hex().upper(),
                base64.b64encode(digest).decode(),
                base64.urlsafe_b64encode(digest).rstrip(b"=").decode(),
            }
    return out


def _variants(arguments: dict[str, Any], sent: str) -> list[bytes]:
    texts = {
        sent,
        json.dumps(arguments),
        json.dumps(arguments, ensure_ascii=False),
        json.dumps(arguments, sort_keys=True, separators=(",", ":")),
        json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False),
        json.dumps(arguments, sort_keys=True),
        *(str(v) for v in arguments.values()),
    }
    return [rfc8785.dumps(arguments), *(t.encode() for t in texts)]


# -- item 15: keyed hashes, never a bare SHA-256, wherever a hash leaves the process ---------------------------


def test_logs_and_export_carry_keyed_hashes_that_only_a_key_holder_can_test(stack: Stack) -> None:
    sidecar = stack.start_sidecar(flags=["--log-level", "info"])
    sent = json.dumps({"taskTitle": "buy milk"})
    reply = "好的，待办「buy milk」已经帮你创建好了。"
    try:
        channel = grpc.insecure_channel(sidecar.info["grpc"])
        stub = stack.stub(sidecar.info["grpc"])
        context = ctx(request_id=uuid.uuid4().hex)
        card = stub.Invoke(
            gateway_pb2.InvokeRequest(context=context, tool_name="create_todo", arguments_json=sent)
        ).confirmation
        conts = continuation_pb2_grpc.ContinuationServiceStub(channel)
        cont = conts.OpenContinuation(
            continuation_pb2.OpenContinuationRequest(
                context=context,
                action_id=card.action_id,
                snapshot=continuation_pb2.ContinuationSnapshot(question="add buy milk"),
            )
        ).continuation
        action = stub.Confirm(gateway_pb2.ConfirmRequest(context=ctx(), token=card.token)).action
        assert action.state == common_pb2.ACTION_STATE_SUCCEEDED
        claimed = conts.ClaimContinuation(
            continuation_pb2.ClaimContinuationRequest(context=context, token=cont.token)
        ).continuation
        conts.SettleContinuation(
            continuation_pb2.SettleContinuationRequest(
                context=context, token=cont.token, reply_text=reply, claim_id=claimed.claim_id
            )
        )
        guard_pb2_grpc.ReplyGuardServiceStub(channel).CheckReply(
            guard_pb2.CheckReplyRequest(context=context, reply_text=reply, action_ids=[card.action_id])
        )
        channel.close()
        _wait_events(stack, card.action_id, {"issued", "claimed", "settled", "continuation_settled", "guard"})
    finally:
        sidecar.stop()
    out = _redis(stack).hget(f"cs:{{{card.action_id}}}:run", "out")
    assert out
    arguments = {"title": "buy milk"}
    exported = cli(stack, "audit", "export")
    assert exported.returncode == 0, exported.stderr
    events = [json.loads(line) for line in exported.stdout.splitlines()]
    mine = {e["t"]: e for e in events if e["a"] == card.action_id}
    decisions = [
        json.loads(line) for line in sidecar.log().splitlines() if line.startswith("{") and '"decision"' in line
    ]
    issued_log = next(d for d in decisions if d.get("action_id") == card.action_id and d["decision"] == "card")

    forbidden = _bare_hashes([*_variants(arguments, sent), out, reply.encode()])
    for where, text in (("the decision log", sidecar.log()), ("the audit export", exported.stdout)):
        found = sorted(h for h in forbidden if h in text)
        assert not found, f"{where} holds an unkeyed hash of the arguments, outcome or reply: {found[:3]}"
        assert "sha256" not in text.lower(), f"{where} still names a bare sha256 field"

    expected = _key_hmac("args", rfc8785.dumps(arguments))
    assert issued_log["args_hmac"] == expected
    assert mine["issued"]["f"]["args_hmac"] == expected
    assert mine["settled"]["f"]["outcome_hmac"] == _key_hmac("outcome", out)
    assert mine["continuation_settled"]["f"]["reply_hmac"] == _key_hmac("reply", reply.encode())
    assert mine["guard"]["f"]["reply_hmac"] == _key_hmac("reply", reply.encode())
    # the same arguments under another key give another value: a log line is no oracle without the key
    assert _key_hmac("args", rfc8785.dumps(arguments), "k0") != expected


def _wait_events(stack: Stack, action_id: str, kinds: set[str], timeout: float = 5.0) -> list[dict[str, Any]]:
    r = _redis(stack)
    deadline = time.monotonic() + timeout
    while True:
        events = [json.loads(f[b"e"]) for _, f in r.xrange(f"cs:{{{action_id}}}:events")]
        if kinds <= {e["t"] for e in events} or time.monotonic() > deadline:
            assert kinds <= {e["t"] for e in events}, [e["t"] for e in events]
            return events
        time.sleep(0.05)


# -- item 14: a deleted or truncated chain is found; verify cross-checks every record against its chain ----------

GRACE = "300ms"  # how long verify waits before it looks again at what it found (events in flight)


def _verify(stack: Stack) -> subprocess.CompletedProcess[str]:
    return cli(stack, "audit", "verify", "--event-grace", GRACE)


def _show(stack: Stack, action_id: str) -> dict[str, Any]:
    shown = cli(stack, "actions", "show", action_id, "--json", "--event-grace", GRACE)
    assert shown.returncode == 0, shown.stderr
    doc: dict[str, Any] = json.loads(shown.stdout)
    return doc


def _keys(action_id: str) -> dict[str, str]:
    return {name: f"cs:{{{action_id}}}:{name}" for name in ("card", "run", "cont", "audit", "events")}


def _forget(stack: Stack, action_id: str) -> None:
    """Remove every trace of an action, so the next test's verify sees a consistent store again."""
    r = _redis(stack)
    r.delete(*_keys(action_id).values())
    r.zrem("cs:{open}", action_id)


def _succeeded(stack: Stack, title: str) -> gateway_pb2.ConfirmationCard:
    card = stack.card(request_id=uuid.uuid4().hex, title=title)
    action = stack.stub().Confirm(gateway_pb2.ConfirmRequest(context=ctx(), token=card.token)).action
    assert action.state == common_pb2.ACTION_STATE_SUCCEEDED
    _wait_events(stack, card.action_id, {"issued", "claimed", "settled"})
    return card


def _broken(result: subprocess.CompletedProcess[str], action_id: str, *needles: str) -> str:
    assert result.returncode == 1, result.stdout + result.stderr
    lines = [line for line in result.stdout.splitlines() if action_id in line]
    assert lines, result.stdout
    for needle in needles:
        assert any(needle in line for line in lines), (needle, result.stdout)
    return "\n".join(lines)


def test_a_clean_store_verifies_and_shows_verified(stack: Stack) -> None:
    card = _succeeded(stack, "干净的")
    out = _verify(stack)
    assert out.returncode == 0 and "every chain intact" in out.stdout, out.stdout + out.stderr
    assert _show(stack, card.action_id)["audit"] == "verified"


def test_deleting_an_actions_events_is_found(stack: Stack) -> None:
    card = _succeeded(stack, "删事件")
    _redis(stack).delete(_keys(card.action_id)["events"])
    try:
        _broken(_verify(stack), card.action_id, "the anchor says 3 event(s) but there are none")
        assert _show(stack, card.action_id)["audit"] != "verified"
    finally:
        _forget(stack, card.action_id)


def test_deleting_events_and_anchor_is_found_from_the_run_record(stack: Stack) -> None:
    card = _succeeded(stack, "删链")
    keys = _keys(card.action_id)
    _redis(stack).delete(keys["events"], keys["audit"])
    try:
        _broken(_verify(stack), card.action_id, "SUCCEEDED", "no audit chain")
        shown = _show(stack, card.action_id)
        assert shown["state"] == "SUCCEEDED" and shown["audit"] != "verified"
    finally:
        _forget(stack, card.action_id)


def test_dropping_the_last_event_and_rewriting_the_anchor_from_the_one_before_is_found(stack: Stack) -> None:
    card = _succeeded(stack, "截尾")
    keys = _keys(card.action_id)
    r = _redis(stack)
    rows = r.xrange(keys["events"])
    assert [json.loads(f[b"e"])["t"] for _, f in rows] == ["issued", "claimed", "settled"]
    r.xdel(keys["events"], rows[-1][0])
    r.hset(keys["audit"], mapping={"seq": 2, "head": json.loads(rows[-2][1][b"e"])["mac"]})
    try:
        _broken(_verify(stack), card.action_id, "anchor")
        shown = _show(stack, card.action_id)
        assert shown["state"] == "SUCCEEDED" and shown["audit"] != "verified", shown["audit"]
        assert [e["t"] for e in shown["history"]] == ["issued", "claimed"]
    finally:
        _forget(stack, card.action_id)


def test_an_older_anchor_put_back_is_found_by_the_outcome_the_run_record_holds(stack: Stack) -> None:
    # The anchor verifies (it is genuine, only old) and so does the chain it anchors: only the cross-check
    # with the run record (SUCCEEDED, so a settled event must record that very outcome) finds the cut.
    card = stack.card(request_id=uuid.uuid4().hex, title="旧锚")
    _wait_events(stack, card.action_id, {"issued"})
    keys = _keys(card.action_id)
    r = _redis(stack)
    old_anchor = r.hgetall(keys["audit"])
    stack.stub().Confirm(gateway_pb2.ConfirmRequest(context=ctx(), token=card.token))
    _wait_events(stack, card.action_id, {"issued", "claimed", "settled"})
    rows = r.xrange(keys["events"])
    r.xdel(keys["events"], *[entry_id for entry_id, _ in rows[1:]])
    r.delete(keys["audit"])
    r.hset(keys["audit"], mapping=old_anchor)
    try:
        _broken(_verify(stack), card.action_id, "SUCCEEDED", "no event records that outcome")
        assert _show(stack, card.action_id)["audit"] != "verified"
    finally:
        _forget(stack, card.action_id)


def test_a_ready_card_without_its_issued_event_is_found(stack: Stack) -> None:
    card = stack.card(request_id=uuid.uuid4().hex, title="无签发事件")
    _wait_events(stack, card.action_id, {"issued"})
    keys = _keys(card.action_id)
    _redis(stack).delete(keys["events"], keys["audit"])
    try:
        _broken(_verify(stack), card.action_id, "READY", "no audit chain")
    finally:
        _forget(stack, card.action_id)


def test_an_event_still_on_its_way_is_looked_at_again_not_reported(stack: Stack) -> None:
    """Audit writes are asynchronous: a record may exist a moment before its event. verify looks again after
    --event-grace at what it found, and reports only what is still wrong then."""
    card = _succeeded(stack, "迟到的事件")
    keys = _keys(card.action_id)
    r = _redis(stack)
    saved = {name: r.dump(keys[name]) for name in ("events", "audit")}
    r.delete(keys["events"], keys["audit"])
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "countersign.sidecar.cli",
            "audit",
            "verify",
            "--event-grace",
            "3s",
            "--redis-url",
            stack.redis.info["url"],
            "--keys-file",
            str(stack.keys),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        assert proc.stderr is not None
        waiting = proc.stderr.readline()  # verify made its first pass and found the chain missing
        assert "1 action(s) look wrong; looking at them again in 3s" in waiting, waiting
        for name, blob in saved.items():
            assert blob is not None
            r.restore(keys[name], 0, blob)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, out + err
    assert "every chain intact" in out and "1 action(s) looked at again" in out, out


def test_an_unresolved_chain_never_expires_and_a_deleted_unresolved_record_is_found(fresh_stack: Stack) -> None:
    stack = fresh_stack
    stack.sidecar.stop()  # no background reconciler may resolve the action first
    sidecar = stack.start_sidecar(flags=["--downstream-deadline", "500ms", "--reconcile-interval", "1h"])
    try:
        stub = stack.stub(sidecar.info["grpc"])
        card = stack.card(stub, request_id=uuid.uuid4().hex, title="未决")
        stack.todo.fault(path="/todos", method="POST", mode="hang_after_commit", seconds=1.0, times=1)
        action = stub.Confirm(gateway_pb2.ConfirmRequest(context=ctx(), token=card.token)).action
        assert action.state == common_pb2.ACTION_STATE_UNKNOWN
        _wait_events(stack, card.action_id, {"settled"})
    finally:
        sidecar.stop()
    keys = _keys(card.action_id)
    r = _redis(stack)
    assert r.pttl(keys["audit"]) == -1 and r.pttl(keys["events"]) == -1, "an unresolved action's chain expired"
    assert _verify(stack).returncode == 0
    r.delete(keys["run"])
    _broken(_verify(stack), card.action_id, "UNKNOWN", "run record")
    r.delete(keys["events"], keys["audit"])
    assert r.zscore("cs:{open}", card.action_id) is not None
    _broken(_verify(stack), card.action_id, "listed as unresolved")


def test_every_kind_of_action_verifies_clean_including_across_a_key_rotation(fresh_stack: Stack) -> None:
    """No false finding: rejected, compensated (the inverse is an action with its own chain), read-only and
    plain settled actions all verify, also after the active key changed and events were chained under it."""
    stack = fresh_stack
    rejected = stack.card(request_id=uuid.uuid4().hex, title="拒绝")
    stack.stub().Reject(gateway_pb2.RejectRequest(context=ctx(), token=rejected.token))
    kept = _succeeded(stack, "保留")
    undone = _succeeded(stack, "撤销")
    stack.stub().Invoke(gateway_pb2.InvokeRequest(context=ctx(), tool_name="list_todos", arguments_json="{}"))
    _wait_events(stack, rejected.action_id, {"issued", "rejected"})
    out = _verify(stack)
    assert out.returncode == 0 and "looked at again" not in out.stdout, out.stdout + out.stderr
    # a settled action's chain expires with --audit-ttl (30 days by default); only an unresolved one is kept
    assert 0 < _redis(stack).pttl(_keys(kept.action_id)["audit"]) <= 30 * 86_400_000

    # rotate: k0 becomes active; the compensation chains new events under k0 onto a chain begun under k1
    stack.sidecar.stop()
    rotated = stack.work / "keys-rotated.json"
    rotated.write_text(json.dumps({"active": "k0", "keys": TEST_KEYS["keys"]}))
    stack.keys = rotated
    sidecar = stack.start_sidecar()
    try:
        stub = stack.stub(sidecar.info["grpc"])
        card = stub.Compensate(gateway_pb2.CompensateRequest(context=ctx(), action_id=undone.action_id)).confirmation
        result = stub.Confirm(gateway_pb2.ConfirmRequest(context=ctx(), token=card.token)).action
        assert result.state == common_pb2.ACTION_STATE_SUCCEEDED
        events = _wait_events(stack, undone.action_id, {"compensated"})
    finally:
        sidecar.stop()
    # issued, claimed, settled under k1; the inverse proposed and its outcome under k0
    assert [e["kid"] for e in events] == ["k1", "k1", "k1", "k0", "k0"]
    assert [e["t"] for e in events][-2:] == ["compensation_proposed", "compensated"]
    assert _redis(stack).hget(_keys(undone.action_id)["audit"], "kid") == b"k0"
    out = _verify(stack)
    assert out.returncode == 0 and "looked at again" not in out.stdout, out.stdout + out.stderr
    # rejected, kept, undone and its inverse (issued, claimed, settled); a read is no action
    assert "4 action(s), 13 event(s)" in out.stdout, out.stdout
    assert _show(stack, kept.action_id)["audit"] == "verified"

    # a keys file that lost k1 can no longer vouch for what k1 signed, and says so
    stack.keys.write_text(json.dumps({"active": "k0", "keys": {"k0": TEST_KEYS["keys"]["k0"]}}))
    _broken(_verify(stack), kept.action_id, "key 'k1' is not in the keys file")


def test_a_card_given_back_verifies_as_ready_and_its_retry_as_settled(fresh_stack: Stack) -> None:
    """A request never sent gives the claim back (issue 11 item 11): the chain goes claimed -> released, the card
    is READY again, and verify owes it nothing more than its issued event. The same token then runs:
    claimed -> released -> claimed -> settled verifies too; and a given-back card that then expires leaves a
    chain ending READY, which is owed no record."""
    stack = fresh_stack
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        nobody = s.getsockname()[1]
    doc = yaml.safe_load(stack.registry.read_text())
    next(t for t in doc["tools"] if t["name"] == "create_todo")["adapter"]["execute"]["url"] = (
        f"http://127.0.0.1:{nobody}/todos"
    )
    down = stack.work / "registry-down.yaml"
    down.write_text(yaml.safe_dump(doc, allow_unicode=True))
    sidecar = stack.start_sidecar(registry=down)
    try:
        stub = stack.stub(sidecar.info["grpc"])
        cards = [stack.card(stub, request_id=uuid.uuid4().hex, title=title) for title in ("没发出去", "又没发出去")]
        for card in cards:
            with pytest.raises(grpc.RpcError) as info:
                stub.Confirm(gateway_pb2.ConfirmRequest(context=ctx(), token=card.token))
            assert info.value.code() == grpc.StatusCode.UNAVAILABLE, info.value
            events = _wait_events(stack, card.action_id, {"issued", "claimed", "released"})
            assert [e["t"] for e in events] == ["issued", "claimed", "released"]
    finally:
        sidecar.stop()
    given_back, expired = cards
    r = _redis(stack)
    assert r.pttl(_keys(given_back.action_id)["events"]) > 0, "a chain back at READY expires again"
    out = _verify(stack)
    assert out.returncode == 0, out.stdout + out.stderr
    shown = _show(stack, given_back.action_id)
    assert (shown["state"], shown["audit"]) == ("READY", "verified"), shown

    action = stack.stub().Confirm(gateway_pb2.ConfirmRequest(context=ctx(), token=given_back.token)).action
    assert action.state == common_pb2.ACTION_STATE_SUCCEEDED
    events = _wait_events(stack, given_back.action_id, {"settled"})
    assert [e["t"] for e in events] == ["issued", "claimed", "released", "claimed", "settled"]
    r.delete(_keys(expired.action_id)["card"])  # as its TTL would
    out = _verify(stack)
    assert out.returncode == 0 and "looked at again" not in out.stdout, out.stdout + out.stderr
    shown = _show(stack, given_back.action_id)
    assert (shown["state"], shown["audit"]) == ("SUCCEEDED", "verified"), shown


# -- the decisions verify rests on, as plain functions -------------------------------------------------------
