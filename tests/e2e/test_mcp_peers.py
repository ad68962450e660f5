"""The HTTP front doors admit the peers the gRPC listener admits (issue 15 item 1: "the same TLS options as gRPC";
docs/design.md §12): with --tls-client-ca and --tls-allowed-peers, a client certificate of the right CA whose SANs
name no allowed peer is refused on the MCP endpoint and on the approval inbox (HTTP 403, a JSON body naming
PEER_NOT_ALLOWED; nothing runs, nothing is recorded), and an allowed peer is served. And, as for gRPC, plaintext
beyond loopback on either listener needs --insecure-listen yes.

A real sidecar process over real HTTPS (certificates made in the test), the official MCP Python SDK client, a plain
HTTPS POST for the inbox, a real redis-server and the recording todo service."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import httpx2
import pytest
import redis
import yaml
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from countersign.store.keys import inbox_key
from countersign.testing import processes
from countersign.testing.approval_issuer import CardIssuer, start_issuer
from countersign.testing.calls import ctx
from countersign.testing.certs import Authority, Pair
from countersign.testing.mcp_front import identity
from countersign.testing.stack import Stack, quiet, start_stack
from countersign.v1 import gateway_pb2, gateway_pb2_grpc

AGENT = "spiffe://example.org/ns/shop/sa/agent"
PAGE = "spiffe://example.org/ns/shop/sa/approval-page"


@dataclass
class Peers:
    stack: Stack
    ca: Authority
    issuer: CardIssuer
    sidecar: processes.Proc

    @property
    def mcp(self) -> str:
        return str(self.sidecar.info["mcp"])

    @property
    def inbox(self) -> str:
        return str(self.sidecar.info["approval_inbox"])

    def tls(self, peer: Pair) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.ca.path))
        context.load_cert_chain(str(peer.cert), str(peer.key))
        return context

    def client(self, peer: Pair) -> Client:
        http = httpx2.AsyncClient(headers=identity(), verify=self.tls(peer), timeout=20)
        return Client(streamable_http_client(self.mcp, http_client=http), read_timeout_seconds=20)

    def post(self, peer: Pair, action_id: str, approval: str) -> tuple[int, dict[str, Any]]:
        request = urllib.request.Request(f"{self.inbox}/{action_id}", data=approval.encode(), method="POST")
        try:
            with urllib.request.urlopen(request, timeout=10, context=self.tls(peer)) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    def waiting(self, action_id: str) -> int:
        """How many approvals the inbox holds for this action (in Redis)."""
        r = redis.Redis(unix_socket_path=self.stack.redis.info["socket"])
        try:
            return int(r.llen(inbox_key(action_id)))
        finally:
            r.close()

    def creates(self, title: str) -> list[dict[str, Any]]:
        return [
            e
            for e in self.stack.todo.requests(path="/todos")
            if e["method"] == "POST" and isinstance(e["body"], dict) and e["body"].get("title") == title
        ]


@pytest.fixture(scope="module")
def peers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Peers]:
    work = tmp_path_factory.mktemp("mcp-peers")
    stacks = start_stack(work)
    stack = quiet(next(stacks))  # one registry on this Redis: the signed one below
    doc = yaml.safe_load(stack.registry.read_text(encoding="utf-8"))
    next(t for t in doc["tools"] if t["name"] == "create_todo")["approval"] = "signed"
    registry = work / "registry-signed.yaml"
    registry.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
    ca = Authority(work)
    server = ca.issue("sidecar", dns=("localhost",), ips=("127.0.0.1",))
    issuer = start_issuer(work)
    flags = [
        *("--tls-cert", str(server.cert), "--tls-key", str(server.key), "--tls-client-ca", str(ca.path)),
        *("--tls-allowed-peers", f"{AGENT},{PAGE}"),
        *("--approvals", str(issuer.settings)),
        *("--mcp-listen", "127.0.0.1:0", "--approval-inbox-listen", "127.0.0.1:0"),
    ]
    sidecar = stack.start_sidecar(registry=registry, flags=flags)
    try:
        yield Peers(stack, ca, issuer, sidecar)
    finally:
        sidecar.stop()
        next(stacks, None)


async def test_mcp_refuses_a_peer_off_the_allow_list_and_serves_an_allowed_one(peers: Peers) -> None:
    title = "peer " + uuid.uuid4().hex[:8]
    stranger = peers.ca.issue("batch-job", uris=("spiffe://example.org/ns/shop/sa/batch",), client=True)
    named_in_cn_only = peers.ca.issue(AGENT, client=True)  # a common name is not a SAN
    for peer in (stranger, named_in_cn_only):
        with pytest.RaisesGroup(MCPError, flatten_subgroups=True) as refused:  # raised out of the client's tasks
            async with peers.client(peer) as c:
                await c.call_tool("create_todo", {"title": title})
        error = _leaf(refused.value).error
        assert "PEER_NOT_ALLOWED" in error.message and (error.data or {}).get("reason") == "PEER_NOT_ALLOWED", error
    # the same refusal as raw HTTP: 403 and a JSON body naming the reason, for any method on the endpoint
    async with httpx2.AsyncClient(verify=peers.tls(stranger), timeout=10) as http:
        for method in ("POST", "GET", "DELETE"):
            answer = await http.request(method, peers.mcp, headers={"content-type": "application/json"}, content="{}")
            assert answer.status_code == 403, (method, answer.text)
            assert answer.json()["error"]["data"]["reason"] == "PEER_NOT_ALLOWED", answer.text
    assert peers.creates(title) == []
    # an allowed peer is served: a read runs, and the write's card comes back (it needs a signed approval)
    agent = peers.ca.issue("agent", uris=(AGENT,), client=True)
    async with peers.client(agent) as c:
        listed = {t.name for t in (await c.list_tools()).tools}
        read = await c.call_tool("list_todos", {})
        result = await c.call_tool("create_todo", {"title": title}, meta={"io.countersign/turn": uuid.uuid4().hex})
    assert "create_todo" in listed and not read.is_error, read
    assert result.structured_content["state"] == "CONFIRMATION_REQUIRED", result
    assert peers.creates(title) == []


def _leaf(group: BaseExceptionGroup[MCPError]) -> MCPError:
    found = group.exceptions[0]
    return found if isinstance(found, MCPError) else _leaf(found)


def test_the_inbox_refuses_a_peer_off_the_allow_list_and_records_nothing(peers: Peers) -> None:
    page = peers.ca.issue("approval-page", uris=(PAGE,), client=True)
    card = _signed_card(peers, page)
    approval = peers.issuer.approve(card, ctx(session_id="s-mcp", locale="en"))
    stranger = peers.ca.issue("stranger", dns=("stranger.internal",), client=True)
    status, body = peers.post(stranger, card.action_id, approval)
    assert (status, body["reason"]) == (403, "PEER_NOT_ALLOWED"), body
    assert peers.waiting(card.action_id) == 0, "a refused peer recorded an approval"
    status, body = peers.post(page, card.action_id, approval)
    assert (status, body["state"]) == (202, "RECORDED"), body
    assert peers.waiting(card.action_id) == 1


def _signed_card(peers: Peers, peer: Pair) -> gateway_pb2.ConfirmationCard:
    """A card that needs a signed approval (create_todo here), issued over gRPC by an allowed peer."""
    chain, key = peer.read()
    channel = grpc.secure_channel(
        str(peers.sidecar.info["grpc"]), grpc.ssl_channel_credentials(peers.ca.pem, key, chain)
    )
    try:
        stub = gateway_pb2_grpc.ToolGatewayServiceStub(channel)  # type: ignore[no-untyped-call]
        answer = stub.Invoke(
            gateway_pb2.InvokeRequest(
                context=ctx(session_id="s-mcp", locale="en", request_id=uuid.uuid4().hex),
                tool_name="create_todo",
                arguments_json=json.dumps({"title": "signed " + uuid.uuid4().hex[:6]}),
            ),
            timeout=10,
        )
    finally:
        channel.close()
    assert answer.WhichOneof("outcome") == "confirmation", answer
    return answer.confirmation


# -- plaintext beyond loopback, as for gRPC ---------------------------------------------------------------------------


@pytest.mark.parametrize("flag", ["--mcp-listen", "--approval-inbox-listen"])
def test_a_plaintext_front_door_beyond_loopback_starts_only_when_acknowledged(
    peers: Peers, flag: str, tmp_path: Path
) -> None:
    with pytest.raises(RuntimeError) as refused:
        peers.stack.start_sidecar(flags=[flag, "0.0.0.0:0"])
    assert f"{flag} 0.0.0.0:0 is beyond loopback and has no TLS" in str(refused.value)
    assert "--insecure-listen yes" in str(refused.value)
    acknowledged = peers.stack.start_sidecar(flags=[flag, "0.0.0.0:0", "--insecure-listen", "yes"])
    try:
        key = "mcp" if flag == "--mcp-listen" else "approval_inbox"
        assert str(acknowledged.info[key]).startswith("http://0.0.0.0:"), acknowledged.info
    finally:
        acknowledged.stop()
