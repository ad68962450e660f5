"""The README's "Run the sidecar for real" and "Call it" shell blocks, run as written (issue 16, point 9).

The blocks are taken from README.md; only what cannot be shared on one machine is changed: the fixed ports
(50051, 6379, 8081, 9464) become free ones, and `.venv/bin/` is the interpreter's own venv. They run in a scratch
directory holding `examples/` (its registry with the todo port changed like the rest), so keys.json and todos.db
do not land in the checkout. The run block starts its processes in a process group of their own, ended by its id.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from countersign.testing.processes import ROOT

PORTS = ("50051", "6379", "8081", "9464")


def shell_blocks(heading: str) -> list[str]:
    """The ```sh blocks of one `## heading` section of the README."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.*?)```", section, flags=re.S)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _rewrite(block: str, ports: dict[str, str]) -> str:
    for old, new in ports.items():
        block = re.sub(rf"(?<=:){old}\b|(?<=--port ){old}\b", new, block)
    return block.replace(".venv/bin/", f"{Path(sys.executable).parent}/")


@pytest.fixture
def scratch(tmp_path: Path) -> Iterator[tuple[Path, dict[str, str]]]:
    ports = {p: str(_free_port()) for p in PORTS}
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "__init__.py").write_text("")
    (tmp_path / "examples" / "todo_service").symlink_to(ROOT / "examples" / "todo_service")
    registry = (ROOT / "examples" / "registry.yaml").read_text(encoding="utf-8")
    (tmp_path / "examples" / "registry.yaml").write_text(registry.replace(":8081", f":{ports['8081']}"))
    yield tmp_path, ports


def _serving(address: str, deadline: float) -> bool:
    while time.monotonic() < deadline:
        try:
            with grpc.insecure_channel(address) as channel:
                answer = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""), timeout=1)
                if answer.status == health_pb2.HealthCheckResponse.SERVING:
                    return True
        except grpc.RpcError:
            pass
        time.sleep(0.2)
    return False


def test_the_readme_runs_the_sidecar_and_calls_it_as_written(scratch: tuple[Path, dict[str, str]]) -> None:
    if shutil.which("redis-server") is None:
        pytest.fail("redis-server is not installed (apt-get install redis-server; make deps does it)")
    cwd, ports = scratch
    (run,) = shell_blocks("Run the sidecar for real")
    (call,) = shell_blocks("Call it")
    assert "--keys-file keys.json" in run and "examples.todo_service --port 8081" in run
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COUNTERSIGN_", "OTEL_"))}
    env["PYTHONPATH"] = str(cwd)  # the scratch examples/ package, as from the repository root
    log = (cwd / "run.log").open("w")
    started = subprocess.Popen(
        ["bash", "-c", _rewrite(run, ports)],
        cwd=cwd,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    group = started.pid
    try:
        assert started.wait(timeout=30) == 0, (cwd / "run.log").read_text()
        address = f"127.0.0.1:{ports['50051']}"
        assert _serving(address, time.monotonic() + 30), (cwd / "run.log").read_text()
        done = subprocess.run(
            ["bash", "-c", "set -euo pipefail\n" + _rewrite(call, ports)],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        os.killpg(group, signal.SIGTERM)
        log.close()
    out = done.stdout
    assert done.returncode == 0, f"exit {done.returncode}\n{out}\n{done.stderr}\n{(cwd / 'run.log').read_text()}"
    assert "countersign.v1.ToolGatewayService" in out and '"status": "SERVING"' in out
    assert '"confirmation"' in out and '"title": "Create a to-do"' in out, "the card, previewed in English"
    assert '"state": "ACTION_STATE_SUCCEEDED"' in out and '"summary": ' in out, "the Confirm with its receipt"
    assert re.search(r"^action [0-9a-f]{32}: SUCCEEDED", out, flags=re.M), "the operator CLI read the action"
    assert "Traceback" not in done.stderr


def test_the_runbook_searches_logs_with_the_spelling_the_sidecar_writes() -> None:
    import logging

    from countersign.observability import logs

    runbook = (ROOT / "docs" / "runbook.md").read_text(encoding="utf-8")
    record = logging.getLogger("countersign.decision").makeRecord(
        "countersign.decision",
        logging.INFO,
        "",
        0,
        "decision",
        (),
        None,
        extra={
            "event": "decision",
            "action_id": "a" * 32,
            "tool": "create_todo",
            "decision": "executed",
            "reason": "DOWNSTREAM_TIMEOUT",
            "outcome": "unknown",
        },
    )
    line = logs.JsonLines().format(record)
    searched = re.findall(r"`(\"outcome\": \"[a-zA-Z]+\")`", runbook)
    assert searched and all(s in line for s in searched), (searched, line)
    for verb in ("list --state unknown", "show <action id>", "resolve <action id>"):
        assert f"kubectl exec <pod> -c countersign -- countersign actions {verb}" in runbook, verb


def test_the_docs_use_one_name_for_the_address_variable_and_the_keys_secret() -> None:
    texts = {
        p: p.read_text(encoding="utf-8")
        for p in [
            ROOT / "README.md",
            *sorted((ROOT / "docs").glob("*.md")),
            *sorted((ROOT / "helm").rglob("*.yaml")),
            *sorted((ROOT / "helm").rglob("*.tpl")),
        ]
    }
    for path, text in texts.items():
        assert not re.search(r"COUNTERSIGN_ADDR\b", text), f"{path}: the variable is COUNTERSIGN_ADDRESS"
        # the keys Secret's name; Redis's and the TLS certificates' (tls, downstreamTls) are other Secrets
        secrets = {s for s in re.findall(r"existingSecret: ([a-z0-9-]+)", text) if "redis" not in s and "tls" not in s}
        assert secrets <= {"countersign-keys"}, f"{path}: the keys Secret is called countersign-keys, not {secrets}"


def test_make_demo_installs_only_redis_server() -> None:
    make = shutil.which("make")
    if make is None:
        pytest.fail("make is not installed (apt-get install make)")
    dry = subprocess.run(
        [make, "-n", "-W", "pyproject.toml", "demo"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert dry.returncode == 0, dry.stderr
    assert "redis-server:redis-server" in dry.stdout
    for other in ("prometheus", "spin", "nodejs", "npm", "protobuf-compiler"):
        assert other not in dry.stdout, f"make demo would install {other}"
