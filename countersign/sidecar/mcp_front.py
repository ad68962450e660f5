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

import json
import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import mcp_types as types
from google.protobuf import json_format
from mcp.server.lowlevel import Server
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from starlette.types import ASGIApp

from countersign.approvals import ContextMode
from countersign.errors import CountersignError, ResourceExhausted
from countersign.observability.metrics import Metrics
from countersign.path.pipeline import Pipeline
from countersign.reasons import Reason
from countersign.registry import Registry, Tool
from countersign.sidecar.admission import Gate
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
_RISK = {
    common_pb2.RISK_LEVEL_LOW: "low",
    common_pb2.RISK_LEVEL_MEDIUM: "medium",
    common_pb2.RISK_LEVEL_HIGH: "high",
    common_pb2.RISK_LEVEL_IRREVERSIBLE: "irreversible",
}


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
        clock: Any = time.time,
    ) -> None:
        self.pipeline, self.metrics, self.gate = pipeline, metrics, gate
        self.confirm_wait_ms, self.verified, self.clock = confirm_wait_ms, verified, clock
        self.identity: StdioIdentity | None = None  # mcp-stdio: who the local host acts for
        self.local_session = os.urandom(8).hex()  # stdio: one host, one session
        self.server: Server[Any] = Server(
            "countersign",
            instructions="Tools behind Countersign: a write runs only after the user confirms its card, once.",
            on_list_tools=self.list_tools,
            on_call_tool=self.call_tool,
        )

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
            tools.append(_tool(tool))
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
            return _error(exc)
        kind = answer.WhichOneof("outcome")
        if kind == "result":
            return _read_result(answer.result)
        if kind == "refusal":
            return _refusal(answer.refusal)
        if kind == "replay":
            action = answer.replay
            if action.state == common_pb2.ACTION_STATE_RUNNING:  # another retry runs it: wait for its receipt
                try:
                    action = await self._path(
                        context, "GetAction", self.pipeline.get_action(context, action.action_id, self.confirm_wait_ms)
                    )
                except CountersignError as exc:
                    return _error(exc)
                action.replayed = True
            return _action_result(action)
        card = answer.confirmation
        return await self._confirm(ctx, context, card)

    async def _confirm(
        self, ctx: Any, context: common_pb2.CallContext, card: gateway_pb2.ConfirmationCard
    ) -> types.CallToolResult:
        """Ask the user through the client when it can (form elicitation), else hand the card back."""
        if not _can_form(ctx):
            return _confirmation_required(card, "the client declared no elicitation: confirm the card out of band")
        try:
            answer = await ctx.session.elicit_form(
                message=_card_text(card),
                requested_schema={"type": "object", "properties": {}},
                related_request_id=ctx.request_id,
            )
        except MCPError as exc:  # the client refused the request itself: the card stays READY
            return _confirmation_required(card, f"the elicitation failed: {exc.error.message}")
        try:
            if answer.action == "accept":
                action = await self._path(
                    context, "Confirm", self.pipeline.confirm(context, card.token, self.confirm_wait_ms)
                )
                return _action_result(action)
            if answer.action == "decline":
                action = await self._path(context, "Reject", self.pipeline.reject(context, card.token))
                return _action_result(action)
        except CountersignError as exc:
            return _error(exc)
        return _confirmation_required(card, "the user dismissed the confirmation: the card is still READY")

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
        values["session_id"] = values.get("session_id") or "mcp:" + mcp_session
        meta = params.meta or {}
        turn = meta.get(TURN_META) if isinstance(meta, Mapping) else None
        if not isinstance(turn, str) or not turn:
            turn = headers.get(TURN_HEADER) or f"mcp:{mcp_session}:{int(self.clock() // TURN_WINDOW_S)}"
        context = common_pb2.CallContext(**{k: v for k, v in values.items() if v}, request_id=turn)
        if self.verified is not None and self.verified.mode is not ContextMode.OFF:
            bearer = [("authorization", headers["authorization"])] if "authorization" in headers else []
            context = await self.verified.context(context, bearer)
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


# -- what the client sees ------------------------------------------------------------------------


def _tool(tool: Tool) -> types.Tool:
    risky = tool.is_write and (tool.risk in ("high", "irreversible") or tool.compensation is None)
    meta = {
        "io.countersign/capability": tool.capability,
        "io.countersign/risk": tool.risk,
        "io.countersign/confirmation": tool.confirmation if tool.is_write else "none",
        "io.countersign/approval": getattr(tool, "approval", "none") if tool.is_write else "none",
    }
    description = (
        f"{'Writes' if tool.is_write else 'Reads'} through Countersign ({tool.capability}, risk {tool.risk})."
        + (" Runs once, after the user confirms its card." if tool.is_write else "")
    )
    return types.Tool(
        name=tool.name,
        description=description,
        input_schema=dict(tool.schema),
        annotations=types.ToolAnnotations(
            read_only_hint=not tool.is_write,
            destructive_hint=risky if tool.is_write else None,
            idempotent_hint=True,  # the same call in the same turn is the same action
            open_world_hint=True,
        ),
        _meta=meta,
    )


def _headers(ctx: Any) -> dict[str, str]:
    request = getattr(ctx, "request", None)
    headers = getattr(request, "headers", None)
    if headers is None:
        return {}
    return {k.lower(): v for k, v in headers.items()}


def _can_form(ctx: Any) -> bool:
    caps = ctx.session.client_capabilities
    elicitation = getattr(caps, "elicitation", None) if caps is not None else None
    if elicitation is None:
        return False
    # {} (before URL mode existed) means form; else form must be declared
    return elicitation.form is not None or elicitation.url is None


def _text(text: str) -> list[types.ContentBlock]:
    return [types.TextContent(type="text", text=text)]


def _proto(message: Any) -> dict[str, Any]:
    out: dict[str, Any] = json_format.MessageToDict(message, preserving_proto_field_name=True)
    return out


def _read_result(result: gateway_pb2.ToolResult) -> types.CallToolResult:
    body = json.loads(result.result_json) if result.result_json else None
    structured = body if isinstance(body, dict) else {"result": body}
    return types.CallToolResult(content=_text(result.result_json), structured_content=structured)


def _action_result(action: common_pb2.Action) -> types.CallToolResult:
    state = common_pb2.ActionState.Name(action.state).removeprefix("ACTION_STATE_")
    if action.state == common_pb2.ACTION_STATE_SUCCEEDED:
        summary = action.receipt.summary or f"{action.tool_name} succeeded"
    elif action.error.reason:
        summary = f"{action.tool_name} {state}: {action.error.reason} ({action.error.message})"
    else:
        summary = f"{action.tool_name} {state}"
    return types.CallToolResult(
        content=_text(f"{summary} [action {action.action_id}]"),
        structured_content={"state": state, "action": _proto(action)},
        # RUNNING is no error: another call of the same action is executing it (calling again returns its receipt)
        is_error=action.state not in (common_pb2.ACTION_STATE_SUCCEEDED, common_pb2.ACTION_STATE_RUNNING),
    )


def _card_text(card: gateway_pb2.ConfirmationCard) -> str:
    preview = card.preview
    lines = [preview.title or card.tool_name, preview.target, preview.impact]
    lines += [f"{d.label}: {d.value}" for d in preview.details]
    risk = _RISK.get(card.risk, "")
    if risk:
        lines.append(f"risk: {risk}")
    return "\n".join(line for line in lines if line)


def _confirmation_required(card: gateway_pb2.ConfirmationCard, why: str) -> types.CallToolResult:
    """Nothing ran: the card, for the host to show and confirm (gRPC Confirm with its token) or to call again."""
    return types.CallToolResult(
        content=_text(
            f"Confirmation required before {card.tool_name} runs ({why}).\n{_card_text(card)}\n"
            f"[action {card.action_id}]"
        ),
        structured_content={"state": "CONFIRMATION_REQUIRED", "card": _proto(card)},
        is_error=False,
    )


def _refusal(refusal: gateway_pb2.Refusal) -> types.CallToolResult:
    status = common_pb2.CapabilityStatus.Name(refusal.status).removeprefix("CAPABILITY_STATUS_")
    return types.CallToolResult(
        content=_text(refusal.guidance or f"{refusal.capability_id} is {status.lower()}"),
        structured_content={"state": "REFUSED", "refusal": _proto(refusal)},
        is_error=True,
    )


def _error(exc: CountersignError) -> types.CallToolResult:
    detail: dict[str, Any] = {"reason": exc.reason, "code": exc.code.name, "message": exc.message[:1000]}
    if exc.violations:
        detail["violations"] = [{"field": v.field, "description": v.description} for v in exc.violations[:10]]
    if exc.retry_after:
        detail["retry_after_s"] = exc.retry_after
    return types.CallToolResult(
        content=_text(f"{exc.reason}: {exc.message[:1000]}"), structured_content={"error": detail}, is_error=True
    )
