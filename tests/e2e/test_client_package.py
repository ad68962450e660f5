"""The Python client package (clients/python), issue 16 'Clients'.

The package is installed ALONE into a fresh venv (pip install clients/python: no server package, no Redis,
aiohttp or OpenTelemetry SDK) and runs the walkthrough's write against the real sidecar of the ``stack`` fixture.
The in-process tests import it from clients/python/src next to the server's own stubs (they share the
descriptors) and pin its typed errors, its RetryInfo backoff and its write sequence against real sidecars.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from countersign_client import (
    Backoff,
    Client,
    CountersignError,
    InvalidArgument,
    PermissionDenied,
    ResourceExhausted,
    call_context,
)
from countersign_client.v1 import common_pb2, continuation_pb2

from countersign.testing.calls import ctx
from countersign.testing.processes import ROOT
from countersign.testing.stack import Stack

WALKTHROUGH = ROOT / "examples" / "clients" / "python" / "walkthrough.py"


@pytest.fixture(scope="module")
def client_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with only `pip install clients/python` in it."""
    venv = tmp_path_factory.mktemp("client-venv") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    source = venv.parent / "countersign-client"  # a copy: pip builds in the source tree and leaves build/ there
    shutil.copytree(ROOT / "clients" / "python", source, ignore=shutil.ignore_patterns("build", "*.egg-info"))
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(source)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=venv.parent,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return venv


def _installed(venv: Path) -> set[str]:
    listed = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "list", "--format", "json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return {p["name"].lower() for p in json.loads(listed.stdout)}


def test_the_client_package_installs_alone_with_only_grpc_and_protobuf(client_venv: Path) -> None:
    installed = _installed(client_venv)
    assert {"countersign-client", "grpcio", "protobuf", "googleapis-common-protos"} <= installed
    assert not installed & {"countersign", "redis", "aiohttp", "opentelemetry-sdk", "prometheus-client", "hiredis"}, (
        installed
    )


def test_the_client_package_alone_runs_the_walkthrough_write_against_a_real_sidecar(
    client_venv: Path, stack: Stack, tmp_path: Path
) -> None:
    title = f"python 客户端 {uuid.uuid4().hex[:6]}"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run(
        [str(client_venv / "bin" / "python"), str(WALKTHROUGH), stack.address, title],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=tmp_path,
    )
    out = done.stdout
    assert done.returncode == 0, f"exit {done.returncode}\n{out}\n{done.stderr}"
    for step in (
        "[1] write create_todo",
        "Confirm → ACTION_STATE_SUCCEEDED",
        "CONTINUATION_STATE_SETTLED",
        "[2] the same turn again → executed",
        "replayed True",
        "[3] unknown argument → INVALID_ARGUMENT ARGS_INVALID, field 'owner'",
        "forged token → INVALID_ARGUMENT CONFIRMATION_TOKEN_INVALID (domain countersign)",
    ):
        assert step in out, f"{step!r} missing from\n{out}"
    assert out.rstrip().endswith("python walkthrough: all 3 steps behaved")
    trace_id = out.split("trace ", 1)[1].split()[0]
    writes = [
        e
        for e in stack.todo.requests(path="/todos")
        if e["method"] == "POST" and isinstance(e["body"], dict) and e["body"].get("title") == title
    ]
    assert len(writes) == 1, "one write downstream, though the turn was written twice"
    assert writes[0]["idempotency_key"]
    assert writes[0]["headers"]["traceparent"].split("-")[1] == trace_id, "the caller's trace reached the downstream"


# ---- in-process: the same package, next to the server's stubs ----------------------------------------------


def _turn(**overrides: str) -> common_pb2.CallContext:
    return ctx(request_id=uuid.uuid4().hex, **overrides)


@pytest.fixture
def client(stack: Stack) -> Iterator[Client]:
    with Client(stack.address, timeout=15) as c:
        yield c


def test_errors_are_typed_from_error_info_with_their_field_violations(stack: Stack, client: Client) -> None:
    with pytest.raises(InvalidArgument) as bad:
        client.invoke(_turn(), "create_todo", {"title": "x", "owner": "mallory"})
    assert (bad.value.reason, bad.value.domain) == ("ARGS_INVALID", "countersign")
    assert [v.field for v in bad.value.violations] == ["owner"]
    card = client.invoke(_turn(), "create_todo", {"title": "绑定"}).confirmation
    with pytest.raises(PermissionDenied) as denied:
        client.confirm(ctx(actor_id="mallory", subject_id="mallory"), card.token)
    assert denied.value.reason == "CONFIRMATION_BINDING_MISMATCH" and not denied.value.retryable
    assert client.attempts["Confirm"] == 1, "a refusal is not retried"
    assert stack.todo.writes(card.action_id) == []


def test_write_runs_the_sequence_and_a_no_rejects_the_card(stack: Stack, client: Client) -> None:
    title = f"序列 {uuid.uuid4().hex[:6]}"
    seen: list[str] = []
    done = client.write(
        _turn(),
        "create_todo",
        {"title": title},
        approve=lambda card: seen.append(card.token) or True,
        compose=lambda c: f"已经帮你创建：{c.receipt.summary}",
    )
    assert done.outcome == "executed" and done.succeeded and done.action is not None and seen
    assert done.continuation is not None and done.continuation.state == continuation_pb2.CONTINUATION_STATE_SETTLED
    assert title in done.reply_text
    assert done.attempts == {
        "Invoke": 1,
        "Confirm": 1,
        "OpenContinuation": 1,
        "ClaimContinuation": 1,
        "SettleContinuation": 1,
    }
    assert len(stack.todo.writes(done.action.action_id)) == 1
    no = client.write(_turn(), "create_todo", {"title": "不要"}, approve=lambda card: False)
    assert no.outcome == "rejected" and no.action is not None
    assert no.action.state == common_pb2.ACTION_STATE_REJECTED and stack.todo.writes(no.action.action_id) == []
    refused = client.write(_turn(), "delete_note", {}, approve=lambda card: True)
    assert refused.outcome == "refusal" and refused.action is None


def test_a_compose_that_fails_gives_the_generation_back_and_the_next_try_settles(stack: Stack, client: Client) -> None:
    """The continuation is a lease owned by a claim id: write() releases and settles with the id its claim got, so a
    model that failed leaves the continuation READY for the next try (not RUNNING until the lease lapses)."""
    turn, title = _turn(), f"重试生成 {uuid.uuid4().hex[:6]}"

    def broken(_: continuation_pb2.Continuation) -> str:
        raise TimeoutError("the model did not answer")

    with pytest.raises(TimeoutError):
        client.write(turn, "create_todo", {"title": title}, approve=lambda card: True, compose=broken)
    done = client.write(
        turn,
        "create_todo",
        {"title": title},
        approve=lambda card: True,
        compose=lambda c: f"已经帮你创建：{c.receipt.summary}",
    )
    assert done.action is not None and done.action.replayed, "the same call in the same turn: the same action"
    assert done.continuation is not None and done.continuation.state == continuation_pb2.CONTINUATION_STATE_SETTLED
    assert title in done.reply_text
    assert len(stack.todo.writes(done.action.action_id)) == 1


def test_an_overloaded_sidecar_is_retried_no_sooner_than_its_retry_info(stack: Stack) -> None:
    """--max-in-flight 1 with one Confirm held by a slow downstream: the next call is shed OVERLOADED with a
    RetryInfo; the client waits at least that long each time and gets through once the slot is free."""
    sidecar = stack.start_sidecar(flags=["--max-in-flight", "1"])
    try:
        with (
            Client(str(sidecar.info["grpc"]), timeout=20) as busy,
            Client(
                str(sidecar.info["grpc"]),
                timeout=20,
                backoff=Backoff(attempts=40, maximum=0.3),
                on_retry=lambda e, p: retries.append((e, p)),
            ) as patient,
        ):
            retries: list[tuple[CountersignError, float]] = []
            card = busy.invoke(_turn(), "create_todo", {"title": "占着"}).confirmation
            stack.todo.fault(path="/todos", method="POST", mode="hang_before_commit", seconds=1.0, times=1)
            holder = threading.Thread(target=busy.confirm, args=(ctx(), card.token))
            try:
                holder.start()
                deadline = 100
                while not stack.todo.requests(card.action_id) and deadline:  # the slot is taken
                    threading.Event().wait(0.02)
                    deadline -= 1
                result = patient.invoke(_turn(), "list_todos", {})
            finally:
                holder.join(10)
                stack.todo.clear_faults()
        assert result.WhichOneof("outcome") == "result"
        assert retries, "the first call was shed"
        for error, pause in retries:
            assert isinstance(error, ResourceExhausted) and error.reason == "OVERLOADED"
            assert error.retry_after is not None and pause >= error.retry_after
        assert patient.attempts["Invoke"] == len(retries) + 1
        with urllib.request.urlopen(f"http://{sidecar.info['metrics']}/metrics", timeout=10) as resp:
            scrape = resp.read().decode()
        count = "countersign_rpc_server_duration_seconds_count{"
        shed = [
            line
            for line in scrape.splitlines()
            if line.startswith(count) and 'code="RESOURCE_EXHAUSTED"' in line and 'method="Invoke"' in line
        ]
        assert shed and float(shed[0].split()[-1]) == len(retries), "every shed call is counted by its code"
        assert "countersign_max_in_flight 1.0" in scrape
    finally:
        sidecar.stop()


def test_backoff_is_exponential_capped_jittered_and_never_below_retry_info() -> None:
    b = Backoff(initial=0.1, multiplier=2, maximum=1.0, jitter=0.2)
    assert [round(b.delay(n, None, rand=lambda: 0.5), 3) for n in (1, 2, 3, 4, 5)] == [0.1, 0.2, 0.4, 0.8, 1.0]
    assert b.delay(1, None, rand=lambda: 0.0) == pytest.approx(0.08)
    assert b.delay(1, 1.5, rand=lambda: 0.0) == 1.5, "RetryInfo is a floor, jitter never goes under it"


def test_the_client_passes_the_caller_traceparent_and_reads_the_address_from_the_environment(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COUNTERSIGN_ADDRESS", stack.address)
    trace_id = uuid.uuid4().hex
    with Client() as c:
        card = c.invoke(_turn(), "create_todo", {"title": "trace"}).confirmation
        c.confirm(ctx(), card.token, traceparent=f"00-{trace_id}-{'2' * 16}-01")
    assert stack.todo.writes(card.action_id)[0]["headers"]["traceparent"].split("-")[1] == trace_id


def test_call_context_fills_the_subject_from_the_actor() -> None:
    made = call_context(tenant_id="t", actor_id="alice", session_id="s", request_id="r")
    assert (made.subject_id, made.role) == ("alice", "user")
