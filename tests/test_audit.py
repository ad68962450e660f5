"""The audit chains and what leaves the process about an action (issue 11, items 14 and 15).

Real redis-server, the real sidecar process and the real `countersign` CLI. The attacks are what someone
with write access to Redis can do with redis-cli: delete or truncate a chain, forge its anchor.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import subprocess
import sys
import uuid
from typing import Any

import redis
import rfc8785
from conftest import ROOT, Stack, ctx
from examples.harness import TEST_KEYS

from countersign.v1 import common_pb2, continuation_pb2, continuation_pb2_grpc, gateway_pb2, guard_pb2, \
    guard_pb2_grpc

import grpc


def cli(stack: Stack, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "countersign.sidecar.cli", *args, "--redis-url",
                           stack.redis.info["url"], "--keys-file", str(stack.keys)],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)


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
            out |= {digest.hex(), digest.hex().upper(), base64.b64encode(digest).decode(),
                    base64.urlsafe_b64encode(digest).rstrip(b"=").decode()}
    return out


def _variants(arguments: dict[str, Any], sent: str) -> list[bytes]:
    texts = {sent, json.dumps(arguments), json.dumps(arguments, ensure_ascii=False),
             json.dumps(arguments, sort_keys=True, separators=(",", ":")),
             json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False),
             json.dumps(arguments, sort_keys=True), *(str(v) for v in arguments.values())}
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
        card = stub.Invoke(gateway_pb2.InvokeRequest(context=context, tool_name="create_todo",
                                                     arguments_json=sent)).confirmation
        conts = continuation_pb2_grpc.ContinuationServiceStub(channel)
        cont = conts.OpenContinuation(continuation_pb2.OpenContinuationRequest(
            context=context, action_id=card.action_id,
            snapshot=continuation_pb2.ContinuationSnapshot(question="add buy milk"))).continuation
        action = stub.Confirm(gateway_pb2.ConfirmRequest(context=ctx(), token=card.token)).action
        assert action.state == common_pb2.ACTION_STATE_SUCCEEDED
        conts.ClaimContinuation(continuation_pb2.ClaimContinuationRequest(context=context, token=cont.token))
        conts.SettleContinuation(continuation_pb2.SettleContinuationRequest(context=context, token=cont.token,
                                                                          reply_text=reply))
        guard_pb2_grpc.ReplyGuardServiceStub(channel).CheckReply(guard_pb2.CheckReplyRequest(
            context=context, reply_text=reply, action_ids=[card.action_id]))
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
    decisions = [json.loads(line) for line in sidecar.log().splitlines()
                 if line.startswith("{") and '"decision"' in line]
    issued_log = next(d for d in decisions if d.get("action_id") == card.action_id and d["decision"] == "card")

    forbidden = _bare_hashes(_variants(arguments, sent) + [out, reply.encode()])
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
    import time

    r = _redis(stack)
    deadline = time.monotonic() + timeout
    while True:
        events = [json.loads(f[b"e"]) for _, f in r.xrange(f"cs:{{{action_id}}}:events")]
        if kinds <= {e["t"] for e in events} or time.monotonic() > deadline:
            assert kinds <= {e["t"] for e in events}, [e["t"] for e in events]
            return events
        time.sleep(0.05)
