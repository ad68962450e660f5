"""Transport identity (issue 13, item 6; docs/design.md §12): a sidecar that listens with --tls-client-ca admits only
clients whose certificate its CA signed, and with --tls-allowed-peers only those naming an allowed SAN or SPIFFE id;
one that listens beyond loopback without TLS does not start unless told so. Certificates are made in the test.

Real processes, real gRPC over TLS, real Redis, the real todo service.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from countersign.testing import processes
from countersign.testing.calls import ctx, error_info
from countersign.testing.certs import Authority, Pair
from countersign.testing.processes import ROOT
from countersign.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc

AGENT = "spiffe://example.org/ns/shop/sa/agent"


@dataclass
class Tls:
    work: Path
    ca: Authority
    server: Pair
    address: str
    todo_url: str
    registry: Path

    def stub(self, client: Pair | None, ca: Authority | None = None) -> gateway_pb2_grpc.ToolGatewayServiceStub:
        chain, key = client.read() if client is not None else (None, None)
        credentials = grpc.ssl_channel_credentials((ca or self.ca).pem, key, chain)
        channel = grpc.secure_channel(self.address, credentials)
        return gateway_pb2_grpc.ToolGatewayServiceStub(channel)  # type: ignore[no-untyped-call]


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tls]:
    work = tmp_path_factory.mktemp("mtls")
    ca = Authority(work)
    server = ca.issue("sidecar", dns=("localhost",), ips=("127.0.0.1",))
    redis_proc, todo, registry, keys = processes.start_backends(work)
    sidecar = None
    try:
        flags = [
            "--log-level",
            "warning",
            *("--tls-cert", str(server.cert), "--tls-key", str(server.key), "--tls-client-ca", str(ca.path)),
            *("--tls-allowed-peers", f"{AGENT},agent.internal"),
        ]
        sidecar = processes.start_sidecar(work, registry, redis_url=redis_proc.info["url"], keys=keys, flags=flags)
        yield Tls(work, ca, server, sidecar.info["grpc"], todo.info["url"], registry)
    finally:
        for proc in (sidecar, todo, redis_proc):
            if proc is not None:
                proc.stop()


def invoke(stub: gateway_pb2_grpc.ToolGatewayServiceStub) -> gateway_pb2.InvokeResponse:
    request = gateway_pb2.InvokeRequest(
        context=ctx(request_id=uuid.uuid4().hex), tool_name="create_todo", arguments_json='{"title": "mTLS"}'
    )
    return stub.Invoke(request, timeout=10)


def test_the_agent_s_certificate_is_admitted_and_confirms(tls: Tls) -> None:
    stub = tls.stub(tls.ca.issue("agent", uris=(AGENT,), client=True))
    card = invoke(stub).confirmation
    action = stub.Confirm(gateway_pb2.ConfirmRequest(context=ctx(), token=card.token), timeout=10).action
    assert action.state == common_pb2.ACTION_STATE_SUCCEEDED
    # a DNS SAN on the list is a peer too
    assert invoke(tls.stub(tls.ca.issue("agent2", dns=("agent.internal",), client=True))).HasField("confirmation")


def test_a_client_without_a_certificate_is_refused_at_the_handshake(tls: Tls) -> None:
    with pytest.raises(grpc.RpcError) as info:
        invoke(tls.stub(None))
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE


def test_a_certificate_from_another_ca_is_refused_at_the_handshake(tls: Tls) -> None:
    stranger = Authority(tls.work, "another CA").issue("agent", uris=(AGENT,), client=True)
    with pytest.raises(grpc.RpcError) as info:
        invoke(tls.stub(stranger))
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE


def test_a_certificate_of_the_right_ca_naming_a_peer_off_the_allow_list_is_refused(tls: Tls) -> None:
    other = tls.ca.issue("batch-job", uris=("spiffe://example.org/ns/shop/sa/batch",), client=True)
    with pytest.raises(grpc.RpcError) as info:
        invoke(tls.stub(other))
    assert (info.value.code(), error_info(info.value).reason) == (grpc.StatusCode.PERMISSION_DENIED, "PEER_NOT_ALLOWED")
    # a common name equal to an allowed id is not a SAN: refused too
    with pytest.raises(grpc.RpcError) as info:
        invoke(tls.stub(tls.ca.issue(AGENT, client=True)))
    assert error_info(info.value).reason == "PEER_NOT_ALLOWED"


def test_plaintext_is_refused_by_a_tls_listener(tls: Tls) -> None:
    stub = gateway_pb2_grpc.ToolGatewayServiceStub(grpc.insecure_channel(tls.address))  # type: ignore[no-untyped-call]
    with pytest.raises(grpc.RpcError) as info:
        invoke(stub)
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE


# -- where the sidecar may listen without TLS ----------------------------------------------------------------------


def serve(*flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "countersign.sidecar.cli", "serve", "--metrics-listen", "", *flags],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )


def test_a_plaintext_listener_beyond_loopback_does_not_start_unless_acknowledged(tls: Tls) -> None:
    refused = serve("--registry", str(tls.registry), "--listen", "0.0.0.0:0")
    assert refused.returncode == 2 and refused.stdout == ""
    assert "--listen 0.0.0.0:0 is beyond loopback and has no TLS" in refused.stderr
    assert "--insecure-listen yes" in refused.stderr
    acknowledged = processes.start_sidecar(
        tls.work, tls.registry, listen="0.0.0.0:0", flags=["--insecure-listen", "yes", "--log-level", "warning"]
    )
    try:
        assert str(acknowledged.info["grpc"]).startswith("0.0.0.0:")
    finally:
        acknowledged.stop()


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--tls-cert", "/nonexistent.crt", "--tls-key", "/nonexistent.key"], "--tls-cert / --tls-key"),
        (["--tls-client-ca", "ca.pem"], "--tls-client-ca needs --tls-cert"),
        (["--tls-cert", "a.crt"], "--tls-cert and --tls-key go together"),
    ],
)
def test_tls_settings_that_cannot_work_stop_the_start(tls: Tls, flags: list[str], message: str) -> None:
    result = serve("--registry", str(tls.registry), "--listen", "127.0.0.1:0", *flags)
    assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr


def test_a_key_that_does_not_fit_the_certificate_stops_the_start(tls: Tls) -> None:
    other = tls.ca.issue("other", dns=("localhost",))
    result = serve(
        "--registry",
        str(tls.registry),
        "--listen",
        "127.0.0.1:0",
        *("--tls-cert", str(tls.server.cert), "--tls-key", str(other.key)),
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert "--tls-cert / --tls-key / --tls-client-ca: " in result.stderr and "KEY_VALUES_MISMATCH" in result.stderr
