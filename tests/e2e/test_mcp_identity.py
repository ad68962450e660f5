"""Who calls the MCP front door (issue 15 item 1): the gRPC listener's TLS settings (and client certificates), its
refusal of plaintext beyond loopback, and the verified context assertion (Authorization: Bearer) instead of the
identity headers. Real sidecar processes, real redis-server, the recording todo service."""

from __future__ import annotations

import ssl
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from countersign.testing.approval_issuer import start_issuer
from countersign.testing.certs import Authority
from countersign.testing.mcp_front import client, identity
from countersign.testing.stack import Stack, start_stack


@pytest.fixture(scope="module")
def quiet_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    stacks = start_stack(tmp_path_factory.mktemp("mcp-id"))
    stack = next(stacks)
    yield stack
    next(stacks, None)


def test_plaintext_mcp_beyond_loopback_does_not_start(quiet_stack: Stack) -> None:
    with pytest.raises(RuntimeError) as err:
        quiet_stack.start_sidecar(flags=["--mcp-listen", "0.0.0.0:0"])
    assert "--mcp-listen 0.0.0.0:0 is beyond loopback and has no TLS" in str(err.value)


async def test_mcp_over_tls_requires_the_client_certificate(quiet_stack: Stack, tmp_path: Path) -> None:
    ca = Authority(tmp_path)
    server = ca.issue("sidecar", ips=("127.0.0.1",), dns=("localhost",))
    agent = ca.issue("agent", client=True)
    flags = ["--tls-cert", str(server.cert), "--tls-key", str(server.key), "--tls-client-ca", str(ca.path)]
    proc = quiet_stack.start_sidecar(flags=[*flags, "--mcp-listen", "127.0.0.1:0"])
    try:
        url = str(proc.info["mcp"])
        assert url.startswith("https://127.0.0.1:")
        trusted = ssl.create_default_context(cafile=str(ca.path))
        trusted.load_cert_chain(str(agent.cert), str(agent.key))
        http = httpx2.AsyncClient(headers=identity(), verify=trusted, timeout=20)
        async with Client(streamable_http_client(url, http_client=http)) as c:
            result = await c.call_tool("list_todos", {})
        assert not result.is_error, result
        anonymous = ssl.create_default_context(cafile=str(ca.path))  # trusts the server, shows no certificate
        http = httpx2.AsyncClient(headers=identity(), verify=anonymous, timeout=20)
        with pytest.raises(Exception):  # noqa: B017 - the handshake (or the first read) fails, whichever the TLS version
            async with Client(streamable_http_client(url, http_client=http)) as c:
                await c.call_tool("list_todos", {})
    finally:
        proc.stop()


async def test_verified_context_takes_the_identity_from_the_bearer_assertion(
    quiet_stack: Stack, tmp_path: Path
) -> None:
    issuer = start_issuer(tmp_path)
    flags = ["--approvals", str(issuer.settings), "--verified-context", "required", "--mcp-listen", "127.0.0.1:0"]
    proc = quiet_stack.start_sidecar(flags=flags)
    try:
        url = str(proc.info["mcp"])
        async with client(url) as c:  # the identity headers alone: refused
            refused = await c.call_tool("list_todos", {})
        assert refused.is_error and refused.structured_content["error"]["reason"] == "CONTEXT_INVALID", refused
        bearer = {"Authorization": f"Bearer {issuer.context(session_id='s-mcp')}", "X-Countersign-Locale": "en"}
        async with client(url, {**bearer, "X-Countersign-Subject": "alice"}) as c:
            result = await c.call_tool("list_todos", {})
        assert not result.is_error, result
        lying = {**identity(), **bearer, "X-Countersign-Actor": "mallory"}  # a header that disagrees with the claims
        async with client(url, lying) as c:
            mismatch = await c.call_tool("create_todo", {"title": "x " + uuid.uuid4().hex[:6]})
        assert mismatch.is_error and mismatch.structured_content["error"]["reason"] == "CONTEXT_MISMATCH", mismatch
    finally:
        proc.stop()
