"""Manual review and the tamper-evident audit, through the real CLI (issue 4, part)."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import redis

from countersign.testing.calls import ctx
from countersign.testing.faults import Cutter
from countersign.testing.processes import ROOT
from countersign.testing.stack import Stack, quiet, registry_with
from countersign.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc


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


def _events(stack: Stack, action_id: str, count: int) -> list[tuple[bytes, dict[bytes, bytes]]]:
    r = redis.Redis(unix_socket_path=stack.redis.info["socket"])
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        rows = r.xrange(f"cs:{{{action_id}}}:events")
        if len(rows) >= count:
            return rows
        time.sleep(0.05)
    raise AssertionError(f"expected {count} events, got {len(r.xrange(f'cs:{{{action_id}}}:events'))}")


def _rewrite(stack: Stack, action_id: str, rows: list[dict[bytes, bytes]]) -> None:
    r = redis.Redis(unix_socket_path=stack.redis.info["socket"])
    key = f"cs:{{{action_id}}}:events"
    r.delete(key)
    for fields in rows:
        r.xadd(key, fields)


def test_needs_manual_review_is_listed_shown_and_resolved_by_a_named_operator(fresh_stack: Stack) -> None:
    stack = quiet(fresh_stack)
    cutter = Cutter()
    sidecar = stack.start_sidecar(
        registry=registry_with(stack, execute_url=cutter.url, fence=False, lookup=False),
        flags=["--reconcile-interval", "1h"],
    )
    try:
        stub = stack.stub(sidecar.info["grpc"])
        card = stack.card(stub, request_id=uuid.uuid4().hex, title="人工复核")
        stub.Confirm(gateway_pb2.ConfirmRequest(context=ctx(), token=card.token))
        stub.Reconcile(gateway_pb2.ReconcileRequest(context=ctx(), action_id=card.action_id))
    finally:
        sidecar.stop()
        cutter.close()
    listed = cli(stack, "actions", "list", "--state", "needs-manual-review", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = {r["action_id"]: r for r in json.loads(listed.stdout)}
    assert rows[card.action_id]["reason"] == "NO_LOOKUP" and rows[card.action_id]["tool"] == "create_todo"
    human = cli(stack, "actions", "list", "--state", "needs-manual-review")
    assert card.action_id in human.stdout and "NEEDS_MANUAL_REVIEW" in human.stdout
    early = cli(
        stack,
        "actions",
        "resolve",
        card.action_id,
        "--outcome",
        "failed",
        "--reason",
        "checked the todo service: no such todo",
        "--operator",
        "sre-alice",
    )
    assert early.returncode == 1 and "declares no lookup" not in early.stderr and "--registry" in early.stderr
    # past the reconcile window (here: a window of 1 ms), a person's word is all there is
    resolved = cli(
        stack,
        "actions",
        "resolve",
        card.action_id,
        "--outcome",
        "failed",
        "--reason",
        "checked the todo service: no such todo",
        "--operator",
        "sre-alice",
        "--reconcile-window",
        "1ms",
    )
    assert resolved.returncode == 0, resolved.stderr
    reader = stack.start_sidecar()
    try:
        action = (
            stack.stub(reader.info["grpc"])
            .GetAction(gateway_pb2.GetActionRequest(context=ctx(), action_id=card.action_id))
            .action
        )
    finally:
        reader.stop()
    assert action.state == common_pb2.ACTION_STATE_FAILED and action.error.reason == "RESOLVED_BY_OPERATOR"
    shown = json.loads(cli(stack, "actions", "show", card.action_id, "--json").stdout)
    kinds = [e["t"] for e in shown["history"]]
    assert kinds[:2] == ["issued", "claimed"] and kinds[-1] == "resolved"
    assert shown["history"][-1]["f"]["operator"] == "sre-alice" and shown["audit"] == "verified"
    again = cli(
        stack, "actions", "resolve", card.action_id, "--outcome", "succeeded", "--reason", "x", "--operator", "sre-bob"
    )
    assert again.returncode == 1 and "only unknown or needs-manual-review" in again.stderr


def test_a_clean_run_verifies_and_an_edit_a_deletion_or_a_reordering_is_named(stack: Stack) -> None:
    card = stack.card(request_id=uuid.uuid4().hex, title="审计")
    stack.stub().Confirm(gateway_pb2.ConfirmRequest(context=ctx(), token=card.token))
    rows = _events(stack, card.action_id, 3)
    clean = cli(stack, "audit", "verify", "--event-grace", "200ms")
    assert clean.returncode == 0 and "every chain intact" in clean.stdout, clean.stdout + clean.stderr
    assert "买" not in json.dumps([f[b"e"].decode() for _, f in rows]) and "审计" not in str(rows), "no raw args"
    original = [fields for _, fields in rows]

    edited = [dict(f) for f in original]
    event = json.loads(edited[1][b"e"])
    event["f"]["tool"] = "delete_account"
    edited[1][b"e"] = json.dumps(event).encode()
    _rewrite(stack, card.action_id, edited)
    out = cli(stack, "audit", "verify", "--event-grace", "200ms")
    assert out.returncode == 1 and card.action_id in out.stdout and "seq 2" in out.stdout and "edited" in out.stdout

    _rewrite(stack, card.action_id, [original[0], original[2]])
    out = cli(stack, "audit", "verify", "--event-grace", "200ms")
    assert out.returncode == 1 and "missing" in out.stdout and "seq 3" in out.stdout

    _rewrite(stack, card.action_id, [original[0], original[2], original[1]])
    out = cli(stack, "audit", "verify", "--event-grace", "200ms")
    assert out.returncode == 1 and ("missing" in out.stdout or "out of order" in out.stdout)

    _rewrite(stack, card.action_id, original[:2])
    out = cli(stack, "audit", "verify", "--event-grace", "200ms")
    assert out.returncode == 1 and "at the end" in out.stdout

    _rewrite(stack, card.action_id, original)
    assert cli(stack, "audit", "verify", "--event-grace", "200ms").returncode == 0
    exported = cli(stack, "audit", "export")
    lines = [json.loads(line) for line in exported.stdout.splitlines()]
    assert [e["t"] for e in lines if e["a"] == card.action_id][:3] == ["issued", "claimed", "settled"]


def test_output_piped_into_a_reader_that_stops_early_ends_quietly(stack: Stack) -> None:
    """`countersign audit export | head -1` (and `actions show | head`): when the reader goes away the CLI stops
    without a BrokenPipeError traceback. The pipe is shrunk to one page so the writer really meets the closed end."""
    for i in range(8):
        card = stack.card(request_id=uuid.uuid4().hex, title=f"管道 {i}")
        stack.stub().Confirm(gateway_pb2.ConfirmRequest(context=ctx(), token=card.token))
    read, write = os.pipe()
    fcntl.fcntl(write, fcntl.F_SETPIPE_SZ, 4096)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "countersign.sidecar.cli",
            "audit",
            "export",
            "--redis-url",
            stack.redis.info["url"],
            "--keys-file",
            str(stack.keys),
        ],
        stdout=write,
        stderr=subprocess.PIPE,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    os.close(write)
    with os.fdopen(read, "rb") as reader:
        first = reader.readline()
    _, stderr = proc.communicate(timeout=60)
    assert first.startswith(b"{"), first
    assert b"Traceback" not in stderr and b"BrokenPipe" not in stderr, stderr.decode()


# -- resolving by hand inside the reconcile window (issue 11, item 17) -------------------------------------------


def _resolve(
    stack: Stack, action_id: str, outcome: str, *extra: str, registry: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return cli(
        stack,
        "actions",
        "resolve",
        action_id,
        "--outcome",
        outcome,
        "--reason",
        "checked by hand",
        "--operator",
        "sre-carol",
        "--registry",
        str(registry or stack.registry),
        "--downstream-deadline",
        "1s",
        *extra,
    )


def _state(stack: Stack, action_id: str) -> common_pb2.Action:
    reader = stack.start_sidecar(flags=["--reconcile-interval", "1h", "--downstream-deadline", "1s"])
    try:
        return (
            stack.stub(reader.info["grpc"])
            .GetAction(gateway_pb2.GetActionRequest(context=ctx(), action_id=action_id))
            .action
        )
    finally:
        reader.stop()


def _unknown_while_frozen(
    stack: Stack, stub: gateway_pb2_grpc.ToolGatewayServiceStub, title: str
) -> gateway_pb2.ConfirmationCard:
    """A card confirmed while the todo service is stopped (SIGSTOP): the request sits in its socket, UNKNOWN."""
    card = stack.card(stub, request_id=uuid.uuid4().hex, title=title)
    stack.todo.proc.pause()
    action = stub.Confirm(gateway_pb2.ConfirmRequest(context=ctx(), token=card.token), timeout=10).action
    assert action.state == common_pb2.ACTION_STATE_UNKNOWN
    return card


def test_resolve_failed_is_refused_while_the_request_may_still_land_and_the_truth_is_recorded(
    fresh_stack: Stack,
) -> None:
    stack = quiet(fresh_stack)
    sidecar = stack.start_sidecar(flags=["--reconcile-interval", "1h", "--downstream-deadline", "1s"])
    try:
        stub = stack.stub(sidecar.info["grpc"])
        card = _unknown_while_frozen(stack, stub, "冻结时的待办")
        try:
            refused = _resolve(stack, card.action_id, "failed")
        finally:
            stack.todo.proc.resume()
        assert refused.returncode == 1, refused.stdout + refused.stderr
        assert "may still" in refused.stderr and "--force" in refused.stderr and "fence" in refused.stderr
        shown = json.loads(cli(stack, "actions", "show", card.action_id, "--json").stdout)
        assert shown["record_state"] == "unknown", "nothing was recorded"
        deadline = time.monotonic() + 10  # the service, running again, handles what waited in its socket
        while not stack.todo.writes(card.action_id) and time.monotonic() < deadline:
            time.sleep(0.05)
        action = stub.Reconcile(gateway_pb2.ReconcileRequest(context=ctx(), action_id=card.action_id)).action
        landed = stack.todo.get(f"/todos/by-key/{card.action_id}")
        if landed.get("id"):  # the request landed: it is SUCCEEDED, never FAILED
            assert action.state == common_pb2.ACTION_STATE_SUCCEEDED and action.receipt.resource_id == landed["id"]
        else:  # the fence got there first: the request is refused for good
            assert action.state == common_pb2.ACTION_STATE_FAILED and action.error.reason == "NOT_APPLIED"
    finally:
        stack.todo.proc.resume()
        sidecar.stop()


def test_resolve_with_force_inside_the_window_is_recorded_as_forced_with_the_reason(fresh_stack: Stack) -> None:
    stack = quiet(fresh_stack)
    sidecar = stack.start_sidecar(flags=["--reconcile-interval", "1h", "--downstream-deadline", "1s"])
    try:
        card = _unknown_while_frozen(stack, stack.stub(sidecar.info["grpc"]), "强制")
        try:
            forced = _resolve(stack, card.action_id, "failed", "--force")
        finally:
            stack.todo.proc.resume()
        assert forced.returncode == 0, forced.stderr
        assert "forced" in forced.stdout
        shown = json.loads(cli(stack, "actions", "show", card.action_id, "--json").stdout)
        last = shown["history"][-1]
        assert last["t"] == "resolved" and last["f"]["forced"] is True and last["f"]["operator"] == "sre-carol"
        assert "did not answer" in last["f"]["unproven"]
    finally:
        sidecar.stop()


def test_a_fence_inside_the_window_proves_not_applied_so_failed_needs_no_force_and_succeeded_is_refused(
    fresh_stack: Stack,
) -> None:
    stack = quiet(fresh_stack)
    cutter = Cutter()
    registry = registry_with(stack, execute_url=cutter.url)
    sidecar = stack.start_sidecar(
        registry=registry, flags=["--reconcile-interval", "1h", "--downstream-deadline", "1s"]
    )
    try:
        stub = stack.stub(sidecar.info["grpc"])
        card = stack.card(stub, request_id=uuid.uuid4().hex, title="被切断")
        assert (
            stub.Confirm(gateway_pb2.ConfirmRequest(context=ctx(), token=card.token)).action.state
            == common_pb2.ACTION_STATE_UNKNOWN
        )
        wrong = _resolve(stack, card.action_id, "succeeded", registry=registry)
        assert wrong.returncode == 1 and "never applied" in wrong.stderr
        right = _resolve(stack, card.action_id, "failed", registry=registry)
        assert right.returncode == 0, right.stderr
        assert stack.todo.post("/todos", {"title": "被切断"}, key=card.action_id)["reason"] == "KEY_FENCED"
        action = _state(stack, card.action_id)
        assert action.state == common_pb2.ACTION_STATE_FAILED and action.error.reason == "RESOLVED_BY_OPERATOR"
        assert json.loads(action.receipt.evidence_json)["evidence"] == "fenced"
    finally:
        sidecar.stop()
        cutter.close()


def test_resolve_failed_of_what_the_downstream_applied_is_refused_even_with_force(fresh_stack: Stack) -> None:
    stack = quiet(fresh_stack)
    sidecar = stack.start_sidecar(flags=["--reconcile-interval", "1h", "--downstream-deadline", "1s"])
    try:
        stub = stack.stub(sidecar.info["grpc"])
        card = stack.card(stub, request_id=uuid.uuid4().hex, title="已提交")
        stack.todo.fault(path="/todos", method="POST", mode="hang_after_commit", seconds=2.0, times=1)
        assert (
            stub.Confirm(gateway_pb2.ConfirmRequest(context=ctx(), token=card.token)).action.state
            == common_pb2.ACTION_STATE_UNKNOWN
        )
        for extra in ((), ("--force",)):
            refused = _resolve(stack, card.action_id, "failed", *extra)
            assert refused.returncode == 1 and "applied" in refused.stderr, refused.stderr
        ok = _resolve(stack, card.action_id, "succeeded")
        assert ok.returncode == 0, ok.stderr
        action = _state(stack, card.action_id)
        todo = stack.todo.get(f"/todos/by-key/{card.action_id}")
        assert action.state == common_pb2.ACTION_STATE_SUCCEEDED and action.receipt.resource_id == todo["id"]
    finally:
        stack.todo.clear_faults()
        sidecar.stop()
