"""What the sidecar decides about approvals at start (issue 13, items 1 and 2; docs/approvals.md "Settings"): a key
that cannot be loaded stops the start, as a bad registry does; a tool that says ``approval: signed`` with no issuer
stops it with the registry's message; with no issuer at all, one loud warning that writes are confirmable without
proof. And what the audit chain keeps of an approval (item 4): issuer, kid, jti, acr, never the JWS.

Real processes: the sidecar's own CLI, a real Redis, the real todo service.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
import redis
import yaml

from countersign.testing import processes
from countersign.testing.approval_issuer import AUD, ISS, CardIssuer, start_issuer
from countersign.testing.approvals import SigningKey, write_jwks, write_settings
from countersign.testing.calls import ctx
from countersign.testing.processes import ROOT
from countersign.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc

WARNING = "NO APPROVAL ISSUER IS CONFIGURED"


@dataclass
class Backends:
    work: Path
    redis_url: str
    redis_socket: str
    todo_url: str
    registry: Path
    keys: Path


@pytest.fixture(scope="module")
def backends(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backends]:
    work = tmp_path_factory.mktemp("approvals-start")
    redis_proc, todo, registry, keys = processes.start_backends(work)
    try:
        yield Backends(work, redis_proc.info["url"], redis_proc.info["socket"], todo.info["url"], registry, keys)
    finally:
        todo.stop()
        redis_proc.stop()


def serve(b: Backends, *flags: str, registry: Path | None = None) -> subprocess.CompletedProcess[str]:
    """The sidecar's start, to the point where it refuses (these settings never reach listening)."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "countersign.sidecar.cli",
            "serve",
            *("--registry", str(registry or b.registry), "--redis-url", b.redis_url, "--keys-file", str(b.keys)),
            *("--listen", "127.0.0.1:0", "--metrics-listen", ""),
            *flags,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )


def settings_naming(b: Backends, jwks: str) -> Path:
    return write_settings(
        b.work / f"approvals-{uuid.uuid4().hex[:6]}.json", [{"issuer": ISS, "audience": AUD, "jwks": jwks}]
    )


def test_a_jwks_that_cannot_be_loaded_stops_the_start_naming_the_file_and_issuer(backends: Backends) -> None:
    missing = settings_naming(backends, "nowhere.jwks.json")
    rsa_only = write_jwks(backends.work / f"rsa-{uuid.uuid4().hex[:6]}.jwks.json", SigningKey.generate("RS256", "r"))
    unfit = write_settings(
        backends.work / f"approvals-{uuid.uuid4().hex[:6]}.json",
        [{"issuer": ISS, "audience": AUD, "jwks": rsa_only.name, "algorithms": ["EdDSA"]}],
    )
    for settings, problem in ((missing, "does not exist"), (unfit, "no key in the JWKS fits the algorithms EdDSA")):
        result = serve(backends, "--approvals", str(settings))
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
        assert f"--approvals: approvals settings {settings}: issuer {ISS}: " in result.stderr
        assert problem in result.stderr


def test_a_signed_tool_without_an_issuer_stops_the_start_with_the_registry_s_message(backends: Backends) -> None:
    doc = yaml.safe_load(backends.registry.read_text(encoding="utf-8"))
    next(t for t in doc["tools"] if t["name"] == "create_todo")["approval"] = "signed"
    registry = backends.work / "signed-no-issuer.yaml"
    registry.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
    result = serve(backends, registry=registry)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert "approval-needs-issuer" in result.stderr and "create_todo" in result.stderr


def test_without_an_issuer_the_start_warns_once_and_with_one_it_does_not(backends: Backends) -> None:
    issuer = start_issuer(backends.work)
    for flags, warnings in (([], 1), (["--approvals", str(issuer.settings)], 0)):
        sidecar = processes.start_sidecar(
            backends.work, backends.registry, redis_url=backends.redis_url, keys=backends.keys, flags=flags
        )
        try:
            log = sidecar.log()
        finally:
            sidecar.stop()
        assert log.count(WARNING) == warnings, log[-2000:]


# -- the audit chain keeps who approved, never the approval ---------------------------------------------------------


def _events(b: Backends, action_id: str, kinds: set[str], timeout: float = 5.0) -> list[dict[str, Any]]:
    r = redis.Redis(unix_socket_path=b.redis_socket)
    deadline = time.monotonic() + timeout
    try:
        while True:
            events = [json.loads(f[b"e"]) for _, f in r.xrange(f"cs:{{{action_id}}}:events")]
            if kinds <= {e["t"] for e in events} or time.monotonic() > deadline:
                assert kinds <= {e["t"] for e in events}, [e["t"] for e in events]
                return events
            time.sleep(0.05)
    finally:
        r.close()


def test_the_claimed_and_settled_events_name_the_approval_s_issuer_kid_jti_and_acr_never_the_jws(
    backends: Backends,
) -> None:
    issuer: CardIssuer = start_issuer(backends.work)
    doc = yaml.safe_load(backends.registry.read_text(encoding="utf-8"))
    next(t for t in doc["tools"] if t["name"] == "create_todo")["approval"] = "signed"
    registry = backends.work / "signed.yaml"
    registry.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
    sidecar = processes.start_sidecar(
        backends.work,
        registry,
        redis_url=backends.redis_url,
        keys=backends.keys,
        flags=["--log-level", "warning", "--approvals", str(issuer.settings)],
    )
    try:
        channel = grpc.insecure_channel(sidecar.info["grpc"])
        stub = gateway_pb2_grpc.ToolGatewayServiceStub(channel)  # type: ignore[no-untyped-call]
        card = stub.Invoke(
            gateway_pb2.InvokeRequest(
                context=ctx(request_id=uuid.uuid4().hex), tool_name="create_todo", arguments_json='{"title": "审计"}'
            )
        ).confirmation
        approval = issuer.approve(card, acr="urn:example:acr:pwd")
        action = stub.Confirm(gateway_pb2.ConfirmRequest(context=ctx(), token=card.token, approval=approval)).action
        channel.close()
    finally:
        sidecar.stop()
    assert action.state == common_pb2.ACTION_STATE_SUCCEEDED
    jti = action.receipt.approval.jti
    events = _events(backends, card.action_id, {"claimed", "settled"})
    expected = {"issuer": ISS, "kid": issuer.key.kid, "jti": jti, "acr": "urn:example:acr:pwd"}
    for kind in ("claimed", "settled"):
        (event,) = [e for e in events if e["t"] == kind]
        assert event["f"]["approval"] == expected, event
    signature = approval.rsplit(".", 1)[1]
    assert all(signature not in json.dumps(e) and approval not in json.dumps(e) for e in events)
