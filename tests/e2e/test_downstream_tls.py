"""TLS to the downstreams (issue 13, item 6; docs/design.md §8, §12): the HTTP adapter reaches an https:// service and
the gRPC adapter a tool with ``tls: true``, trusting --downstream-ca and presenting --downstream-cert when the service
asks for one. A handshake that fails sends nothing: NOT_SENT, the card READY again, the same token confirms later.

The real todo service serving TLS (its --tls-cert/--tls-key/--tls-client-ca), real sidecars, real Redis; the
certificates are made in the test.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from countersign.testing import processes
from countersign.testing.calls import ctx, error_info
from countersign.testing.certs import Authority, Pair
from countersign.testing.stack import Todo
from countersign.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc


@dataclass
class Downstream:
    work: Path
    ca: Authority
    client: Pair  # a client certificate the todo service's CA signed
    redis: processes.Proc
    keys: Path

    def sidecar(self, registry: Path, *flags: str) -> processes.Proc:
        return processes.start_sidecar(
            self.work,
            registry,
            redis_url=self.redis.info["url"],
            keys=self.keys,
            flags=["--log-level", "warning", *flags],
        )

    def trusting(self, *, client: bool = False) -> list[str]:
        flags = ["--downstream-ca", str(self.ca.path)]
        if client:
            flags += ["--downstream-cert", str(self.client.cert), "--downstream-key", str(self.client.key)]
        return flags


@pytest.fixture(scope="module")
def downstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Downstream]:
    work = tmp_path_factory.mktemp("downstream-tls")
    ca = Authority(work)
    redis_proc = processes.start_redis(work)
    try:
        yield Downstream(
            work,
            ca,
            ca.issue("sidecar", uris=("spiffe://example.org/sidecar",), client=True),
            redis_proc,
            processes.write_keys(work),
        )
    finally:
        redis_proc.stop()


def todo_service(d: Downstream, *, client_ca: bool = False, grpc_port: bool = False) -> tuple[processes.Proc, Todo]:
    server = d.ca.issue("todo", dns=("localhost",), ips=("127.0.0.1",))
    tls = ["--tls-cert", str(server.cert), "--tls-key", str(server.key)]
    if client_ca:
        tls += ["--tls-client-ca", str(d.ca.path)]
    proc = processes.start_todo_service(d.work, grpc=grpc_port, tls=tls)
    todo = Todo(proc, ca=d.ca.path)
    if client_ca:
        todo.present(d.client.cert, d.client.key)
    return proc, todo


def card(address: str, title: str) -> gateway_pb2.ConfirmationCard:
    stub = gateway_pb2_grpc.ToolGatewayServiceStub(grpc.insecure_channel(address))  # type: ignore[no-untyped-call]
    request = gateway_pb2.InvokeRequest(
        context=ctx(request_id=uuid.uuid4().hex), tool_name="create_todo", arguments_json=json.dumps({"title": title})
    )
    response = stub.Invoke(request, timeout=15)
    assert response.WhichOneof("outcome") == "confirmation", response
    return response.confirmation


def confirm(address: str, token: str) -> common_pb2.Action:
    stub = gateway_pb2_grpc.ToolGatewayServiceStub(grpc.insecure_channel(address))  # type: ignore[no-untyped-call]
    return stub.Confirm(gateway_pb2.ConfirmRequest(context=ctx(), token=token), timeout=15).action


def not_sent(address: str, token: str) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        confirm(address, token)
    err = info.value
    assert (err.code(), error_info(err).reason) == (grpc.StatusCode.UNAVAILABLE, "DOWNSTREAM_NOT_SENT"), err
    assert "card is ready again" in (err.details() or "")
    return err


def test_an_https_downstream_is_reached_with_the_ca_bundle_and_a_failed_handshake_sends_nothing(
    downstream: Downstream,
) -> None:
    proc, todo = todo_service(downstream)
    registry = processes.write_registry(downstream.work, todo.url)
    assert todo.url.startswith("https://")
    good = downstream.sidecar(registry, *downstream.trusting())
    blind = downstream.sidecar(registry)  # without the CA bundle: the system's CAs do not know this one
    try:
        proposed = card(good.info["grpc"], f"经由 TLS {uuid.uuid4().hex[:6]}")  # prepare went over TLS
        not_sent(blind.info["grpc"], proposed.token)
        assert todo.writes(proposed.action_id) == [], "the handshake failed: nothing reached the service"
        action = confirm(good.info["grpc"], proposed.token)  # the same card, READY again
        assert action.state == common_pb2.ACTION_STATE_SUCCEEDED
        assert len(todo.writes(proposed.action_id)) == 1
        assert todo.get(f"/todos/{action.receipt.resource_id}")["title"].startswith("经由 TLS")
    finally:
        for p in (good, blind, proc):
            p.stop()


def test_a_client_certificate_is_presented_to_a_service_that_requires_one(downstream: Downstream) -> None:
    """With the certificate the write runs once. Without it, a TLS 1.3 service refuses the handshake only after
    the request was written (client authentication ends the handshake on the server's side): the sidecar cannot
    know it was not applied, so the action is UNKNOWN, never SUCCEEDED, never retried; the fence of a sidecar
    that holds the certificate then proves it never landed."""
    proc, todo = todo_service(downstream, client_ca=True)
    registry = processes.write_registry(downstream.work, todo.url)
    good = downstream.sidecar(registry, *downstream.trusting(client=True), "--reconcile-interval", "1h")
    blind = downstream.sidecar(registry, *downstream.trusting(), "--reconcile-interval", "1h")
    try:
        first = card(good.info["grpc"], f"双向 TLS {uuid.uuid4().hex[:6]}")
        action = confirm(good.info["grpc"], first.token)
        assert action.state == common_pb2.ACTION_STATE_SUCCEEDED and len(todo.writes(first.action_id)) == 1
        second = card(good.info["grpc"], f"没有客户端证书 {uuid.uuid4().hex[:6]}")
        unknown = confirm(blind.info["grpc"], second.token)
        assert unknown.state == common_pb2.ACTION_STATE_UNKNOWN, unknown
        assert todo.writes(second.action_id) == []
        stub = gateway_pb2_grpc.ToolGatewayServiceStub(grpc.insecure_channel(good.info["grpc"]))  # type: ignore[no-untyped-call]
        settled = stub.Reconcile(gateway_pb2.ReconcileRequest(context=ctx(), action_id=second.action_id)).action
        assert (settled.state, settled.error.reason) == (common_pb2.ACTION_STATE_FAILED, "NOT_APPLIED")
        assert todo.writes(second.action_id) == [], "never applied, never retried"
    finally:
        for p in (good, blind, proc):
            p.stop()


def test_a_grpc_tool_with_tls_true_is_reached_with_the_ca_bundle_and_client_certificate(downstream: Downstream) -> None:
    proc, todo = todo_service(downstream, client_ca=True, grpc_port=True)
    target = f"localhost:{proc.info['grpc_port']}"
    text = processes.EXAMPLE_REGISTRY.read_text(encoding="utf-8").replace(processes.TEMPLATE_URL, todo.url)
    start, end = text.index("  - name: create_todo"), text.index("  - name: set_todo_status")
    block = text[start:end]
    adapter = f'    adapter: {{kind: grpc, target: "{target}", prepare: true, lookup: true, tls: true}}\n'
    block = block[: block.index("    adapter:")] + adapter + block[block.index("    receipt:") :]
    registry = downstream.work / f"grpc-tls-{uuid.uuid4().hex[:6]}.yaml"
    registry.write_text(text[:start] + block + text[end:], encoding="utf-8")
    good = downstream.sidecar(registry, *downstream.trusting(client=True))
    blind = downstream.sidecar(registry, "--downstream-deadline", "1s", "--lease", "5s")
    try:
        proposed = card(good.info["grpc"], f"gRPC over TLS {uuid.uuid4().hex[:6]}")
        not_sent(blind.info["grpc"], proposed.token)
        action = confirm(good.info["grpc"], proposed.token)
        assert action.state == common_pb2.ACTION_STATE_SUCCEEDED
        executes = [e for e in todo.requests(proposed.action_id) if e["path"].endswith("/Execute")]
        assert len(executes) == 1
    finally:
        for p in (good, blind, proc):
            p.stop()


def test_an_unreadable_ca_bundle_stops_the_start(downstream: Downstream) -> None:
    registry = processes.write_registry(downstream.work, "https://127.0.0.1:9")
    with pytest.raises(RuntimeError, match="--downstream-ca"):
        downstream.sidecar(registry, "--downstream-ca", str(downstream.work / "missing.pem"))
