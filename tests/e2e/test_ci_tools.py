"""The commands a platform team runs outside the pod (issue 16): `countersign registry check` in CI,
`countersign keys generate`, and the operator CLI facing records it has no key for. Real processes, a real
redis-server and a real sidecar."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import uuid
from pathlib import Path

import yaml

from countersign import registry as registry_mod
from countersign.errors import RegistryError
from countersign.keyring import Keyring
from countersign.testing import processes
from countersign.testing.calls import ctx
from countersign.testing.charts import STANDALONE, render
from countersign.testing.processes import ROOT
from countersign.testing.stack import Stack
from countersign.v1 import gateway_pb2

FIXTURES = ROOT / "tests" / "fixtures" / "registry"


def countersign(*args: str, stdin: str | None = None, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "countersign.sidecar.cli", *args],
        capture_output=True,
        text=True,
        input=stdin,
        cwd=cwd,
        timeout=60,
    )


# ---- registry check -------------------------------------------------------------------------------------


def test_registry_check_passes_a_valid_registry() -> None:
    result = countersign("registry", "check", str(FIXTURES / "valid.yaml"), "examples/registry.yaml")
    assert result.returncode == 0, result.stderr
    assert "examples/registry.yaml: ok: policy_version 2026-11-29.1, 4 tool(s)" in result.stdout
    assert not result.stderr


def test_registry_check_fails_with_the_message_the_sidecar_would_print() -> None:
    for bad in sorted(FIXTURES.glob("*.yaml")):
        if bad.name == "valid.yaml":
            continue
        try:
            registry_mod.load(str(bad))
        except RegistryError as exc:
            expected = str(exc)
        result = countersign("registry", "check", str(bad))
        assert result.returncode == 1, bad.name
        assert result.stderr.strip() == expected, bad.name
        assert "Traceback" not in result.stderr
    # and the sidecar itself stops at start on the same line
    serve = countersign(
        "serve", "--registry", str(FIXTURES / "unique-names.yaml"), "--listen", "127.0.0.1:0", "--metrics-listen", ""
    )
    assert serve.returncode == 2
    assert countersign("registry", "check", str(FIXTURES / "unique-names.yaml")).stderr.strip() in serve.stderr


def test_registry_check_reads_rendered_manifests_from_stdin() -> None:
    """`helm template ... | countersign registry check -`: every registry ConfigMap of the release is checked."""
    good = render({**STANDALONE, "registry": yaml.safe_load((FIXTURES / "valid.yaml").read_text())})
    stream = yaml.safe_dump_all(good)
    result = countersign("registry", "check", "-", stdin=stream)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("<stdin>: ConfigMap/demo-countersign-registry: ok: policy_version")
    broken = render({**STANDALONE, "registry": (FIXTURES / "risk-matches-capability.yaml").read_text()})
    result = countersign("registry", "check", "-", stdin=yaml.safe_dump_all(broken))
    assert result.returncode == 1
    assert result.stderr.startswith("<stdin>: ConfigMap/demo-countersign-registry: tool '")
    assert ": risk-matches-capability: " in result.stderr


def test_registry_check_with_the_sidecars_approvals_applies_the_approval_rule_as_the_sidecar_does(
    tmp_path: Path,
) -> None:
    """approval: signed needs an issuer: without --approvals the check fails as the sidecar's start would; with the
    sidecars' approvals file it passes (its keys are not fetched: CI needs no network)."""
    fixture = str(FIXTURES / "approval-needs-issuer.yaml")
    assert countersign("registry", "check", fixture).returncode == 1
    approvals = tmp_path / "approvals.yaml"
    approvals.write_text("issuers:\n  - {issuer: https://app.example, audience: countersign, jwks: app.jwks.json}\n")
    result = countersign("registry", "check", "--approvals", str(approvals), fixture)
    assert result.returncode == 0, result.stderr
    approvals.write_text("issuers: []\n")
    bad = countersign("registry", "check", "--approvals", str(approvals), fixture)
    assert bad.returncode == 2 and f"approvals settings {approvals}: " in bad.stderr


def test_registry_check_says_when_a_file_holds_no_registry(tmp_path: Path) -> None:
    deployment_only = [d for d in render(STANDALONE) if d["kind"] == "Deployment"]
    path = tmp_path / "manifests.yaml"
    path.write_text(yaml.safe_dump_all(deployment_only))
    result = countersign("registry", "check", str(path))
    assert result.returncode == 2 and "no registry" in result.stderr
    missing = countersign("registry", "check", str(tmp_path / "nope.yaml"))
    assert missing.returncode == 1 and f"{tmp_path / 'nope.yaml'}: tool '-': readable: " in missing.stderr


# ---- keys generate --------------------------------------------------------------------------------------


def test_keys_generate_makes_a_file_the_sidecar_loads_and_never_overwrites_it(tmp_path: Path) -> None:
    printed = countersign("keys", "generate", "--kid", "prod-1")
    assert printed.returncode == 0, printed.stderr
    doc = json.loads(printed.stdout)
    assert doc["active"] == "prod-1" and len(bytes.fromhex(doc["keys"]["prod-1"])) == 32
    path = tmp_path / "keys.json"
    written = countersign("keys", "generate", "--out", str(path))
    assert written.returncode == 0, written.stderr
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    keyring = Keyring.from_file(str(path))
    assert keyring.active in keyring.keys and keyring.active.startswith("k")
    before = path.read_text()
    again = countersign("keys", "generate", "--out", str(path))
    assert again.returncode == 2 and "not overwriting" in again.stderr and path.read_text() == before
    assert countersign("keys", "generate", "--kid", "no spaces").returncode == 2


def test_keys_generate_from_a_file_rotates(tmp_path: Path) -> None:
    old = tmp_path / "old.json"
    assert countersign("keys", "generate", "--kid", "k1", "--out", str(old)).returncode == 0
    new = tmp_path / "new.json"
    rotated = countersign("keys", "generate", "--kid", "k2", "--from", str(old), "--out", str(new))
    assert rotated.returncode == 0, rotated.stderr
    before, after = Keyring.from_file(str(old)), Keyring.from_file(str(new))
    assert after.active == "k2" and after.keys["k1"] == before.keys["k1"]
    clash = countersign("keys", "generate", "--kid", "k1", "--from", str(old))
    assert clash.returncode == 2 and "already there" in clash.stderr


def test_a_rotated_keys_file_derives_the_same_action_ids_whatever_the_new_key_is_called(tmp_path: Path) -> None:
    """Action ids come from the id key, which rotation must not touch: a new key whose id sorts first (no
    id_key in the old file) or an old file's explicit id_key must not move the ids, or sidecars on the new
    file would refuse to start (cs:id-key) and one call could become two actions."""
    parts = ["tenant", "actor", "request", "create_task", {"title": "buy milk"}]
    old = tmp_path / "old.json"
    assert countersign("keys", "generate", "--kid", "k5", "--out", str(old)).returncode == 0
    first = tmp_path / "first.json"
    assert countersign("keys", "generate", "--kid", "a0", "--from", str(old), "--out", str(first)).returncode == 0
    before, after = Keyring.from_file(str(old)), Keyring.from_file(str(first))
    assert after.active == "a0" and after.action_id(parts) == before.action_id(parts)
    assert after.id_fingerprint().rpartition(":")[2] == before.id_fingerprint().rpartition(":")[2]
    pinned = json.loads(old.read_text()) | {"id_key": "cd" * 32}
    old.chmod(0o600)
    old.write_text(json.dumps(pinned))
    second = tmp_path / "second.json"
    assert countersign("keys", "generate", "--kid", "k6", "--from", str(old), "--out", str(second)).returncode == 0
    assert Keyring.from_file(str(second)).action_id(parts) == Keyring.from_file(str(old)).action_id(parts)


# ---- the operator CLI and records under a key it does not have ----------------------------------------


def test_records_written_under_a_generated_key_are_named_not_called_edited(stack: Stack, tmp_path: Path) -> None:
    """The README's first serve has no keys file: its sidecar signs with a generated key 'gen'. The operator CLI,
    given a real keys file, must say so instead of reporting every record as edited or tampered."""
    sidecar = processes.start_sidecar(
        tmp_path, stack.registry, redis_url=stack.redis.info["url"], keys=None, flags=["--log-level", "error"]
    )
    try:
        stub = stack.stub(sidecar.info["grpc"])
        card = stack.card(stub, request_id=uuid.uuid4().hex, title="generated key")
        stub.Confirm(gateway_pb2.ConfirmRequest(context=ctx(), token=card.token))
    finally:
        sidecar.stop()
    keys = tmp_path / "keys.json"
    assert countersign("keys", "generate", "--out", str(keys)).returncode == 0

    def operator(*args: str) -> subprocess.CompletedProcess[str]:
        return countersign(*args, "--redis-url", stack.redis.info["url"], "--keys-file", str(keys))

    verify = operator("audit", "verify")
    assert verify.returncode == 1
    assert "key 'gen' is not in the keys file" in verify.stdout and "edited" not in verify.stdout
    shown = json.loads(operator("actions", "show", card.action_id, "--json").stdout)
    assert "key 'gen' is not in the keys file" in shown["audit"]
    assert shown["reason"] == "KEY_NOT_IN_KEYS_FILE" and "RECORD_TAMPERED" not in json.dumps(shown)
    resolved = operator(
        "actions", "resolve", card.action_id, "--outcome", "failed", "--reason", "x", "--operator", "sre"
    )
    assert resolved.returncode == 1 and "key 'gen' is not in the keys file" in resolved.stderr
    assert "Traceback" not in resolved.stderr


def test_a_cli_command_piped_into_a_reader_that_went_away_ends_quietly() -> None:
    """`countersign keys generate | head -c1` and `countersign registry check F | head -c1`: the reader has gone, so
    the CLI stops with 141 (128 + SIGPIPE), as a shell tool does, and no BrokenPipeError traceback."""
    for args in (["keys", "generate"], ["registry", "check", str(ROOT / "examples" / "registry.yaml")]):
        read, write = os.pipe()
        os.close(read)  # the reader is gone before the first byte
        try:
            done = subprocess.run(
                [sys.executable, "-m", "countersign.sidecar.cli", *args],
                stdout=write,
                stderr=subprocess.PIPE,
                text=True,
                cwd=ROOT,
                timeout=60,
            )
        finally:
            os.close(write)
        assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr
        assert done.returncode == 141, (args, done.returncode, done.stderr)
