"""The MCP front door: Countersign as an MCP server (Streamable HTTP at /mcp, or stdio), a thin transport over the
same path the gRPC servicer calls (docs/mcp-front-door.md).

    tools/list   the registry's enabled tools: the closed schema as inputSchema, risk and approval as annotations
    tools/call   read  -> Pipeline.invoke, the result now
                 write -> Pipeline.invoke (the card) -> form elicitation when the client declares it:
                          accept -> Pipeline.confirm (claim, execute once, receipt) | decline -> Pipeline.reject
                          | cancel -> the card stays READY; without elicitation: "confirmation required" + the card

Nothing here decides anything: admission is the gRPC servicer's Gate (one slot per path call, never held while the
user thinks), policy, cards, claims, the executor and receipts are the Pipeline's, and errors keep their reasons.
A CountersignError is a tool result with isError and the reason; a protocol fault (an unknown tool, params that are
not a tools/call) is a JSON-RPC error.

The protocol era: the initialize handshake (2025-11-25 and before), where a server may ask the client mid-call
(elicitation/create). A probe of the 2026-07-28 era (no handshake, server/discover) is answered with a JSON-RPC
error, which every SDK client reads as "use the handshake".
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import anyio
import mcp_types as types
from mcp.server.context import CallNext, HandlerResult
from mcp.server.lowlevel import Server
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError
from starlette.types import ASGIApp

from countersign.approvals import ContextMode
from countersign.errors import CountersignError, ResourceExhausted
from countersign.observability import tracing
from countersign.observability.metrics import Metrics
from countersign.path.pipeline import Pipeline
from countersign.reasons import Reason
from countersign.registry import Registry
from countersign.sidecar import mcp_results as results
from countersign.sidecar.admission import Gate
from countersign.sidecar.approval_inbox import ApprovalInbox
from countersign.sidecar.identity import Identity
from countersign.sidecar.mcp_http import HandshakeOnly
from countersign.v1 import common_pb2, gateway_pb2

log = logging.getLogger("countersign.mcp")

TURN_META = "io.countersign/turn"
# the identity headers: the names the HTTP adapter already sends downstream
HEADERS = {
    "tenant_id": "x-countersign-tenant",
    "actor_id": "x-countersign-actor",
    "subject_id": "x-countersign-subject",
    "session_id": "x-countersign-session",
    "role": "x-countersign-role",
    "locale": "x-countersign-locale",
}
TURN_HEADER = "x-countersign-request"
# No turn given: the turn is the MCP session and this window (fixed buckets of wall-clock time). A retry inside
# the bucket lands on the same card or receipt; one that crosses a bucket edge gets a new card, which runs only
# after a new confirmation, never on its own.
TURN_WINDOW_S = 60


@dataclass(frozen=True)
class StdioIdentity:
    """Who a stdio host acts for (no headers on stdio): from COUNTERSIGN_MCP_* variables."""

    fields: Mapping[str, str]

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> StdioIdentity:
        prefix = "COUNTERSIGN_MCP_"
        return cls({f: environ.get(prefix + h.removeprefix("x-countersign-").upper(), "") for f, h in HEADERS.items()})


class McpFront:
    """The MCP server over one Pipeline; the Gate and Metrics are the gRPC servicer's."""

    def __init__(
        self,
        pipeline: Pipeline,
        metrics: Metrics,
        gate: Gate,
        *,
        confirm_wait_ms: int,
        verified: Identity | None = None,
        inbox: ApprovalInbox | None = None,
        approval_url: str = "",
        approval_wait: float = 120.0,
        clock: Any = time.time,
    ) -> None:
        self.pipeline, self.metrics, self.gate = pipeline, metrics, gate
        self.confirm_wait_ms, self.verified, self.clock = confirm_wait_ms, verified, clock
        self.inbox, self.approval_url, self.approval_wait = inbox, approval_url, approval_wait
        self.identity: StdioIdentity | None = None  # mcp-stdio: who the local host acts for
        self.local_session = os.urandom(8).hex()  # stdio: one host, one session
        self.server: Server[Any] = Server(
            "countersign",
            instructions="Tools behind Countersign: a write runs only after the user confirms its card, once.",
            on_list_tools=self.list_tools,
            on_call_tool=self.call_tool,
        )
        self.server.middleware = [Spans()]  # in place of the SDK's, which makes every tool error an ERROR span

    @property
    def registry(self) -> Registry:
        return self.pipeline.registry

    # -- tools/list ------------------------------------------------------------------------------

    async def list_tools(self, ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        registry = self.registry
        tools = []
        for tool in registry.tools.values():
            cap = registry.capabilities.get(tool.capability)
            if cap is not None and cap.status != "enabled":
                continue
            tools.append(results.tool_of(tool))
        return types.ListToolsResult(tools=tools)

    # -- tools/call ------------------------------------------------------------------------------

    async def call_tool(self, ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        arguments = json.dumps(params.arguments or {}, ensure_ascii=False)
        try:
            context = await self._context(ctx, params)
            answer = await self._path(context, "Invoke", self.pipeline.invoke(context, params.name, arguments))
        except CountersignError as exc:
            if exc.reason == Reason.TOOL_NOT_FOUND:  # a protocol fault in MCP's terms: the tool is not offered
                raise MCPError(code=types.INVALID_PARAMS, message=exc.message, data={"reason": exc.reason}) from None
            return results.error(exc)
        kind = answer.WhichOneof("outcome")
        if kind == "result":
            return results.read_result(answer.result)
        if kind == "refusal":
            return results.refusal(answer.refusal)
        if kind == "action":  # covered by a standing grant of the caller: executed at once, its receipt names it
            return results.action_result(answer.action)
        if kind == "replay":
            try:  # a RUNNING one (another retry executes it) waited for: its receipt
                return await self._settled(context, answer.replay)
            except CountersignError as exc:
                return results.error(exc)
        card = answer.confirmation
        return await self._confirm(ctx, context, card)

    async def _confirm(
        self, ctx: Any, context: common_pb2.CallContext, card: gateway_pb2.ConfirmationCard
    ) -> types.CallToolResult:
        """Ask the user through the client when it can (form elicitation), else hand the card back."""
        if card.approval == common_pb2.APPROVAL_REQUIREMENT_SIGNED:  # never a form: the user signs on the page
            return await self._signed(ctx, context, card)
        if not _can_form(ctx):
            why = "the client declared no elicitation: confirm the card out of band"
            return results.confirmation_required(card, why)
        try:
            with anyio.fail_after(self.approval_wait):  # a dialog nobody answers must not hold the call forever
                answer = await ctx.session.elicit_form(
                    message=results.card_text(card),
                    requested_schema={"type": "object", "properties": {}},
                    related_request_id=ctx.request_id,
                )
        except MCPError as exc:  # the client refused the request itself: the card stays READY
            return results.confirmation_required(card, f"the elicitation failed: {exc.error.message}")
        except TimeoutError:
            why = f"the user did not answer within {self.approval_wait:g}s: the card is still READY"
            return results.confirmation_required(card, why)
        try:
            if answer.action == "accept":
                action = await self._path(
                    context, "Confirm", self.pipeline.confirm(context, card.token, self.confirm_wait_ms)
                )
                return results.action_result(action)
            if answer.action == "decline":
                action = await self._path(context, "Reject", self.pipeline.reject(context, card.token))
                return results.action_result(action)
        except CountersignError as exc:
            return results.error(exc)
        return results.confirmation_required(card, "the user dismissed the confirmation: the card is still READY")

    async def _signed(
        self, ctx: Any, context: common_pb2.CallContext, card: gateway_pb2.ConfirmationCard
    ) -> types.CallToolResult:
        """A card that needs the user's signed approval: an approval already in the inbox confirms it at once; else
        a URL elicitation sends the user to the approval page and the call waits (bounded, with progress) for the
        approval to reach the inbox of any sidecar; then Confirm with it, once."""
        try:
            approval = await self.inbox.take(card.action_id) if self.inbox is not None else None
            if approval is None:
                if self.inbox is None or not self.approval_url or not _can_url(ctx):
                    why = "it needs the user's signed approval: the approval page posts it, or Confirm carries it"
                    return results.confirmation_required(card, why)
                url = self.approval_url.replace("{action_id}", card.action_id)
                with anyio.fail_after(self.approval_wait):
                    answer = await ctx.session.elicit_url(
                        message=results.card_text(card),
                        url=url,
                        elicitation_id=card.action_id,
                        related_request_id=ctx.request_id,
                    )
                if answer.action == "decline":
                    return results.action_result(
                        await self._path(context, "Reject", self.pipeline.reject(context, card.token))
                    )
                if answer.action != "accept":
                    return results.confirmation_required(card, "the user did not open the approval page")

                async def progress(waited: float) -> None:
                    message = f"waiting for the user's approval of {card.tool_name} ({waited:.0f}s)"
                    with contextlib.suppress(Exception):  # progress is a courtesy: a client gone is seen elsewhere
                        await ctx.session.report_progress(waited, self.approval_wait, message)

                approval = await self.inbox.wait(card.action_id, self.approval_wait, progress)
                if approval is None:
                    action = await self._path(context, "GetAction", self.pipeline.get_action(context, card.action_id))
                    if action.state != common_pb2.ACTION_STATE_READY:  # another call of it was approved meanwhile
                        return await self._settled(context, action)
                    why = f"no approval arrived within {self.approval_wait:g}s: the card is still READY"
                    return results.confirmation_required(card, why)
            action = await self._path(
                context, "Confirm", self.pipeline.confirm(context, card.token, self.confirm_wait_ms, approval)
            )
        except CountersignError as exc:
            return results.error(exc)
        except MCPError as exc:
            return results.confirmation_required(card, f"the elicitation failed: {exc.error.message}")
        except TimeoutError:
            why = f"the user did not answer within {self.approval_wait:g}s: the card is still READY"
            return results.confirmation_required(card, why)
        with contextlib.suppress(Exception):  # the client's dialog may close now (best effort)
            await ctx.session.send_elicit_complete(card.action_id)
        return results.action_result(action)

    async def _settled(self, context: common_pb2.CallContext, action: common_pb2.Action) -> types.CallToolResult:
        """The action another call of the same action settled (or runs: waited for, bounded), as a replay."""
        if action.state == common_pb2.ACTION_STATE_RUNNING:
            wait = self.pipeline.get_action(context, action.action_id, self.confirm_wait_ms)
            action = await self._path(context, "GetAction", wait)
        action.replayed = True
        return results.action_result(action)

    async def _path(self, context: common_pb2.CallContext, name: str, call: Any) -> Any:
        """One call into the path under the gRPC servicer's admission (a slot of the caller's lane, released as
        soon as the path answers: a user deciding holds nothing), counted like the RPC of the same name."""
        start = time.perf_counter()
        code = "OK"
        try:
            try:
                quick = name in ("Reject", "GetAction")  # Redis only, never a downstream: the quick lane
                lane = self.gate.admit((context.tenant_id[:256], context.actor_id[:256]), quick)
            except ResourceExhausted as shed:
                call.close()
                code = shed.code.name
                raise
            try:
                return await call
            finally:
                self.gate.release(lane)
        except CountersignError as exc:
            code = exc.code.name
            self.metrics.refusals.labels(name, self.metrics.reason(exc.reason)).inc()
            log.info(
                "refused",
                extra={"event": "refused", "rpc": name, "transport": "mcp", "reason": exc.reason, "code": code},
            )
            raise
        finally:
            self.metrics.rpc_duration.labels(name, code).observe(time.perf_counter() - start)

    async def _context(self, ctx: Any, params: types.CallToolRequestParams) -> common_pb2.CallContext:
        """The CallContext from the identity headers (or the stdio identity), merged with the verified context
        assertion of an `Authorization: Bearer` header under --verified-context, as the gRPC servicer merges its
        metadata; the turn from _meta or the header, else the MCP session and the current window."""
        headers = _headers(ctx)
        values = dict(self.identity.fields) if self.identity is not None else {}
        for field_name, header in HEADERS.items():
            if header in headers:
                values[field_name] = headers[header]
        mcp_session = headers.get("mcp-session-id") or self.local_session
        meta = params.meta or {}
        turn = meta.get(TURN_META) if isinstance(meta, Mapping) else None
        if not isinstance(turn, str) or not turn:
            turn = headers.get(TURN_HEADER) or f"mcp:{mcp_session}:{int(self.clock() // TURN_WINDOW_S)}"
        context = common_pb2.CallContext(**{k: v for k, v in values.items() if v}, request_id=turn)
        if self.verified is not None and self.verified.mode is not ContextMode.OFF:
            bearer = [("authorization", headers["authorization"])] if "authorization" in headers else []
            context = await self.verified.context(context, bearer)
        if not context.session_id:  # neither a header nor the assertion names it: the MCP session is the session
            context.session_id = "mcp:" + mcp_session
        return context

    # -- transports ------------------------------------------------------------------------------

    def asgi_app(self, host: str, max_body: int) -> ASGIApp:
        """The Streamable HTTP app at /mcp (stateful sessions, SSE answers: a server request mid-call needs both)."""
        local = host in ("127.0.0.1", "localhost", "::1")
        security = (
            TransportSecuritySettings(
                enable_dns_rebinding_protection=True,
                allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
                allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
            )
            if local
            else TransportSecuritySettings(enable_dns_rebinding_protection=False)
        )
        app = self.server.streamable_http_app(
            streamable_http_path="/mcp", host=host, max_request_body_size=max_body, transport_security=security
        )
        return HandshakeOnly(app)

    async def run_stdio(self) -> None:
        from mcp.server.runner import serve_loop
        from mcp.server.stdio import stdio_server

        # the handshake era only, as over HTTP: a 2026-07-28 probe is refused and the client falls back
        async with stdio_server() as (read, write), self.server.lifespan(self.server) as state:
            await serve_loop(
                self.server, read, write, lifespan_state=state, init_options=self.server.create_initialization_options()
            )


class Spans:
    """A SERVER span for each tools/list and tools/call (docs/mcp-front-door.md, "Traces"), by the MCP semantic
    conventions and with the gRPC server spans' status rule (observability/tracing.py): the path's stage spans and
    the downstream's CLIENT span are under it. Other messages (initialize, ping, notifications) are not traced,
    as gRPC health and reflection are not."""

    TRACED = ("tools/list", "tools/call")

    async def __call__(self, ctx: Any, call_next: CallNext) -> HandlerResult:
        if ctx.method not in self.TRACED or ctx.request_id is None:
            return await call_next(ctx)
        attributes: dict[str, Any] = {
            "mcp.method.name": ctx.method,
            "jsonrpc.request.id": str(ctx.request_id),
            "mcp.protocol.version": ctx.protocol_version,
            "network.transport": "tcp" if ctx.request is not None else "pipe",
        }
        name = (ctx.params or {}).get("name") if ctx.method == "tools/call" else None
        target = name[:128] if isinstance(name, str) else None
        if ctx.method == "tools/call":
            attributes["gen_ai.operation.name"] = "execute_tool"
            if target:
                attributes["gen_ai.tool.name"] = target
        carrier = ctx.meta if ctx.meta and "traceparent" in ctx.meta else _headers(ctx)
        with tracing.mcp_server_span(ctx.method, target, attributes, carrier) as span:
            try:
                result = await call_next(ctx)
            except MCPError as exc:
                data = exc.error.data if isinstance(exc.error.data, Mapping) else {}
                tracing.end_mcp_span(span, jsonrpc=exc.error.code, reason=str(data.get("reason", "")))
                raise
            except ValidationError:  # params that are not a tools/call: the SDK answers INVALID_PARAMS
                tracing.end_mcp_span(span, jsonrpc=types.INVALID_PARAMS)
                raise
            except Exception:
                tracing.end_mcp_span(span, jsonrpc=types.INTERNAL_ERROR, reason="INTERNAL")
                raise
            # the result in its wire form (the SDK shapes it inside the chain): a tool error names its reason
            structured = result.get("structuredContent") if isinstance(result, Mapping) else None
            error = structured.get("error") if isinstance(structured, Mapping) else None
            if isinstance(result, Mapping) and result.get("isError") is True and isinstance(error, Mapping):
                tracing.end_mcp_span(span, code=str(error.get("code", "")), reason=str(error.get("reason", "")))
            return result


def _headers(ctx: Any) -> dict[str, str]:
    request = getattr(ctx, "request", None)
    headers = getattr(request, "headers", None)
    if headers is None:
        return {}
    return {k.lower(): v for k, v in headers.items()}


def _can_url(ctx: Any) -> bool:
    caps = ctx.session.client_capabilities
    elicitation = getattr(caps, "elicitation", None) if caps is not None else None
    return elicitation is not None and elicitation.url is not None


def _can_form(ctx: Any) -> bool:
    caps = ctx.session.client_capabilities
    elicitation = getattr(caps, "elicitation", None) if caps is not None else None
    if elicitation is None:
        return False
    # {} (before URL mode existed) means form; else form must be declared
    return elicitation.form is not None or elicitation.url is None
