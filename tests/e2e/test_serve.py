"""Running it: settings, keys, the embedded Redis, SIGTERM."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from countersign.sidecar import settings as settings_mod
from countersign.testing import processes
from countersign.testing.calls import ctx
from countersign.testing.processes import ROOT
from countersign.testing.stack import Stack
from countersign.v1 import common_pb2, gateway_pb2

SERVE = [sys.executable, "-m", "countersign.sidecar.cli", "serve"]


def test_help_lists_every_setting_with_its_variable() -> None:
    out = subprocess.run([*SERVE, "--help"], capture_output=True, text=True, cwd=ROOT, timeout=60).stdout
    import dataclasses

    for f in dataclasses.fields(settings_mod.Settings):
        assert f"--{f.name.replace('_', '-')}" in out
        assert settings_mod.env_name(f.name) in out


def test_settings_come_from_flags_then_environment_then_defaults() -> None:
    import argparse

    parser = argparse.ArgumentParser()
    settings_mod.add_arguments(parser)
    args = parser.parse_args(["--registry", "r.yaml", "--lease", "45s"])
    s = settings_mod.from_args(
        args, {"COUNTERSIGN_LEASE": "9s", "COUNTERSIGN_CONFIRM_TTL": "2m", "COUNTERSIGN_KEYS_FILE": "/k.json"}
    )
    assert (s.lease, s.confirm_ttl, s.keys_file, s.replay_ttl) == (45.0, 120.0, "/k.json", 86400.0)
    with pytest.raises(settings_mod.SettingsError, match="--lease must be longer"):
        settings_mod.from_args(parser.parse_args(["--registry", "r", "--lease", "1s"]), {})
    with pytest.raises(settings_mod.SettingsError, match="not a duration"):
        settings_mod.from_args(parser.parse_args(["--registry", "r", "--lease", "soon"]), {})


def test_a_replica_wait_must_end_before_the_redis_timeout_it_runs_under() -> None:
    # the script's WAIT runs on the store's connection: a WAIT as long as the socket timeout would turn every
    # unacknowledged claim into STORE_UNAVAILABLE (and every slow ack into a failed write) instead of
    # REPLICAS_NOT_ACKNOWLEDGED with the card put back; refused at start, naming both flags
    import argparse

    parser = argparse.ArgumentParser()
    settings_mod.add_arguments(parser)
    base = ["--registry", "r", "--redis-wait-replicas", "1"]
    for flags in (["--redis-wait-timeout", "1s"], ["--redis-wait-timeout", "500ms", "--redis-timeout", "500ms"]):
        with pytest.raises(settings_mod.SettingsError, match=r"--redis-wait-timeout .* shorter than --redis-timeout"):
            settings_mod.from_args(parser.parse_args([*base, *flags]), {})
    ok = settings_mod.from_args(parser.parse_args([*base, "--redis-wait-timeout", "1s", "--redis-timeout", "3s"]), {})
    assert (ok.redis_wait_timeout, ok.redis_timeout) == (1.0, 3.0)
    # without a replica wait the wait timeout is never used: not checked
    settings_mod.from_args(parser.parse_args(["--registry", "r", "--redis-wait-timeout", "1s"]), {})


def test_an_audit_chain_may_not_expire_before_the_records_it_accounts_for() -> None:
    # audit verify reports a record without its chain: a chain kept shorter than the records would make every
    # settled action a finding once its chain expired
    import argparse

    parser = argparse.ArgumentParser()
    settings_mod.add_arguments(parser)
    for flags in (
        ["--audit-ttl", "1h"],
        ["--audit-ttl", "2h", "--replay-ttl", "3h"],
        ["--audit-ttl", "1m", "--replay-ttl", "30s", "--confirm-ttl", "2m"],
    ):
        with pytest.raises(settings_mod.SettingsError, match="--audit-ttl must be at least"):
            settings_mod.from_args(parser.parse_args(["--registry", "r", *flags]), {})
    ok = settings_mod.from_args(parser.parse_args(["--registry", "r", "--audit-ttl", "24h"]), {})
    assert ok.audit_ttl == ok.replay_ttl == 86400.0


def _serve_fails(args: list[str], env: dict[str, str] | None = None) -> str:
    import os

    done = subprocess.run(
        [*SERVE, "--listen", "127.0.0.1:0", "--metrics-listen", "", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        env={**os.environ, **(env or {})},
    )
    assert done.returncode == 2, done
    assert '"listening"' not in done.stdout
    assert "Traceback" not in done.stderr
    return done.stderr


def test_a_short_key_is_refused_at_start(tmp_path: Path) -> None:
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({"active": "k1", "keys": {"k1": "ab" * 32, "k2": "ab" * 31}}))
    err = _serve_fails(["--registry", str(processes.EXAMPLE_REGISTRY)], {"COUNTERSIGN_KEYS_FILE": str(keys)})
    assert "key 'k2' must be hex of at least 32 bytes" in err


def test_missing_registry_and_unreadable_keys_are_clear(tmp_path: Path) -> None:
    assert "--registry (COUNTERSIGN_REGISTRY) is required" in _serve_fails([])
    err = _serve_fails(["--registry", str(processes.EXAMPLE_REGISTRY), "--keys-file", str(tmp_path / "none.json")])
    assert "cannot read" in err


def test_embedded_redis_is_started_and_stopped_with_the_sidecar(tmp_path: Path) -> None:
    todo = processes.start_todo_service(tmp_path)
    registry = processes.write_registry(tmp_path, todo.info["url"])
    sidecar = processes.start_sidecar(tmp_path, registry, keys=processes.write_keys(tmp_path))
    try:
        assert sidecar.info["redis"] == "embedded"
        children = subprocess.run(
            ["pgrep", "-P", str(sidecar.pid), "redis-server"], capture_output=True, text=True
        ).stdout.split()
        assert len(children) == 1
        stub = Stack.stub(None, sidecar.info["grpc"])  # type: ignore[arg-type]
        card = stub.Invoke(
            gateway_pb2.InvokeRequest(
                context=ctx(request_id=uuid.uuid4().hex), tool_name="create_todo", arguments_json='{"title": "嵌入"}'
            )
        )
        action = stub.Confirm(gateway_pb2.ConfirmRequest(context=ctx(), token=card.confirmation.token)).action
        assert action.state == common_pb2.ACTION_STATE_SUCCEEDED
    finally:
        assert sidecar.stop() == 0
        todo.stop()
    alive = subprocess.run(["ps", "-p", children[0]], capture_output=True).returncode == 0
    assert not alive, "the embedded redis-server is stopped with the sidecar"


def test_sigterm_turns_health_not_serving_lets_in_flight_calls_finish_then_exits(stack: Stack) -> None:
    sidecar = stack.start_sidecar(flags=["--grace", "5s"])
    channel = grpc.insecure_channel(sidecar.info["grpc"])
    stub = Stack.stub(stack, sidecar.info["grpc"])
    card = stack.card(stub, request_id=uuid.uuid4().hex, title="优雅退出")
    watch = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest(service=""), timeout=20)
    assert next(watch).status == health_pb2.HealthCheckResponse.SERVING
    stack.todo.fault(path="/todos", method="POST", mode="hang_before_commit", seconds=1.0, times=1)
    result: dict[str, object] = {}

    def confirm() -> None:
        result["action"] = stub.Confirm(gateway_pb2.ConfirmRequest(context=ctx(), token=card.token), timeout=15).action

    thread = threading.Thread(target=confirm)
    thread.start()
    import time

    deadline = time.monotonic() + 5
    while not stack.todo.writes(card.action_id) and time.monotonic() < deadline:
        time.sleep(0.02)
    sidecar.popen.send_signal(signal.SIGTERM)
    statuses = []
    try:
        for update in watch:
            statuses.append(update.status)
            if update.status != health_pb2.HealthCheckResponse.SERVING:
                break
    except grpc.RpcError:
        pass
    thread.join(15)
    assert health_pb2.HealthCheckResponse.NOT_SERVING in statuses
    action = result["action"]
    assert isinstance(action, common_pb2.Action) and action.state == common_pb2.ACTION_STATE_SUCCEEDED
    assert sidecar.popen.wait(15) == 0
    stack.todo.clear_faults()
