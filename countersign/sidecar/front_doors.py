"""The HTTP front doors beside the gRPC server, built by app.py from the settings: the MCP endpoint
(--mcp-listen, docs/mcp-front-door.md) and the approval inbox (--approval-inbox-listen). Both call the components
the gRPC servicers call, under the same gate; both take the gRPC listener's TLS settings (--tls-cert, --tls-key,
--tls-client-ca, --tls-allowed-peers: checked on every request) and its rule that plaintext beyond loopback needs
--insecure-listen yes."""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from countersign.errors import SettingsError
from countersign.observability.metrics import Metrics
from countersign.path.pipeline import Pipeline
from countersign.sidecar.admission import Gate
from countersign.sidecar.identity import Identity
from countersign.sidecar.settings import Settings, loopback
from countersign.store.protocols import InboxStore

if TYPE_CHECKING:
    from countersign.sidecar.approval_inbox import ApprovalInbox
    from countersign.sidecar.mcp_front import McpFront
    from countersign.sidecar.mcp_http import HttpListener


@dataclass
class FrontDoors:
    """The doors and what they serve. The MCP SDK (pydantic, starlette, uvicorn, httpx under it) is imported only
    when a door opens or ``front`` is first asked for (`countersign mcp-stdio`): about 30 MB resident and 0.6 s of
    start that a sidecar serving only gRPC does not pay (notes/lean-mem.md)."""

    settings: Settings
    pipeline: Pipeline
    store: InboxStore
    metrics: Metrics
    gate: Gate
    identity: Identity
    mcp: HttpListener | None = None
    inbox: HttpListener | None = None
    scheme: str = "http"
    _approvals: ApprovalInbox | None = field(default=None, repr=False)
    _front: McpFront | None = field(default=None, repr=False)

    def approvals(self) -> ApprovalInbox:
        """The approval inbox (one, shared by its HTTP door and the MCP front's approval flow)."""
        if self._approvals is None:
            from countersign.sidecar.approval_inbox import ApprovalInbox

            self._approvals = ApprovalInbox(self.store, self.pipeline, int(self.settings.confirm_ttl * 1000))
        return self._approvals

    @property
    def front(self) -> McpFront:
        """The MCP front: what --mcp-listen and `countersign mcp-stdio` serve."""
        if self._front is None:
            from countersign.sidecar.mcp_front import McpFront

            settings = self.settings
            self._front = McpFront(
                self.pipeline,
                self.metrics,
                self.gate,
                confirm_wait_ms=int(settings.max_wait * 1000),
                verified=self.identity,
                inbox=self.approvals(),
                approval_url=settings.approval_url,
                approval_wait=settings.approval_wait,
            )
        return self._front

    def addresses(self) -> dict[str, str]:
        return {
            "mcp": f"{self.scheme}://{self.mcp.address}/mcp" if self.mcp is not None else "",
            "approval_inbox": f"{self.scheme}://{self.inbox.address}/approvals" if self.inbox is not None else "",
        }

    async def stop(self, grace: float) -> None:
        for listener in (self.mcp, self.inbox):
            if listener is not None:
                await listener.stop(grace)


def tls_options(settings: Settings, flag: str, address: str) -> dict[str, Any]:
    """uvicorn's TLS options from the gRPC listener's; plaintext beyond loopback refused as gRPC refuses it."""
    if not settings.tls_cert:
        if settings.insecure_listen != "yes" and not loopback(address):
            raise SettingsError(
                f"--{flag} {address} is beyond loopback and has no TLS: give --tls-cert and --tls-key, or "
                "acknowledge plaintext with --insecure-listen yes"
            )
        return {}
    options: dict[str, Any] = {"ssl_certfile": settings.tls_cert, "ssl_keyfile": settings.tls_key}
    if settings.tls_client_ca:  # the client certificate handed to the app: AllowedPeers reads its SANs
        from countersign.sidecar.mcp_http import client_certificate_protocol

        options.update(
            ssl_ca_certs=settings.tls_client_ca, ssl_cert_reqs=ssl.CERT_REQUIRED, http=client_certificate_protocol()
        )
    return options


async def open_front_doors(
    settings: Settings, pipeline: Pipeline, store: InboxStore, metrics: Metrics, gate: Gate, identity: Identity
) -> FrontDoors:
    from countersign.sidecar.app import split_addr  # the wiring root's address parser

    doors = FrontDoors(
        settings, pipeline, store, metrics, gate, identity, scheme="https" if settings.tls_cert else "http"
    )
    if not (settings.mcp_listen or settings.approval_inbox_listen):
        return doors
    from countersign.sidecar.approval_inbox import refusal_body
    from countersign.sidecar.mcp_http import AllowedPeers, jsonrpc_refusal, listen

    try:
        if settings.mcp_listen:
            host, port = split_addr(settings.mcp_listen)
            tls = tls_options(settings, "mcp-listen", settings.mcp_listen)
            app = doors.front.asgi_app(host, settings.max_message_bytes)
            if identity.allowed_peers:
                app = AllowedPeers(app, identity, jsonrpc_refusal, "mcp")
            doors.mcp = await listen(app, host, port, ssl=tls)
        if settings.approval_inbox_listen:
            host, port = split_addr(settings.approval_inbox_listen)
            tls = tls_options(settings, "approval-inbox-listen", settings.approval_inbox_listen)
            app = doors.approvals().app()
            if identity.allowed_peers:
                app = AllowedPeers(app, identity, refusal_body, "approval_inbox")
            doors.inbox = await listen(app, host, port, ssl=tls, flag="approval-inbox-listen")
    except BaseException:
        await doors.stop(1.0)
        raise
    return doors
