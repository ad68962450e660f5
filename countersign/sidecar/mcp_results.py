"""What an MCP host sees of the path's answers (docs/mcp-front-door.md): tools as MCP tools, results, cards,
refusals and errors as CallToolResults (structuredContent for the host, a text summary for the model)."""

from __future__ import annotations

import json
from typing import Any

import mcp_types as types
from google.protobuf import json_format

from countersign.errors import CountersignError
from countersign.registry import Tool
from countersign.v1 import common_pb2, gateway_pb2

_RISK = {
    common_pb2.RISK_LEVEL_LOW: "low",
    common_pb2.RISK_LEVEL_MEDIUM: "medium",
    common_pb2.RISK_LEVEL_HIGH: "high",
    common_pb2.RISK_LEVEL_IRREVERSIBLE: "irreversible",
}


def tool_of(tool: Tool) -> types.Tool:
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


def _content(text: str) -> list[types.ContentBlock]:
    return [types.TextContent(type="text", text=text)]


def _dict(message: Any) -> dict[str, Any]:
    out: dict[str, Any] = json_format.MessageToDict(message, preserving_proto_field_name=True)
    return out


def read_result(result: gateway_pb2.ToolResult) -> types.CallToolResult:
    body = json.loads(result.result_json) if result.result_json else None
    structured = body if isinstance(body, dict) else {"result": body}
    return types.CallToolResult(content=_content(result.result_json), structured_content=structured)


def action_result(action: common_pb2.Action) -> types.CallToolResult:
    state = common_pb2.ActionState.Name(action.state).removeprefix("ACTION_STATE_")
    if action.state == common_pb2.ACTION_STATE_SUCCEEDED:
        summary = action.receipt.summary or f"{action.tool_name} succeeded"
    elif action.error.reason:
        summary = f"{action.tool_name} {state}: {action.error.reason} ({action.error.message})"
    else:
        summary = f"{action.tool_name} {state}"
    return types.CallToolResult(
        content=_content(f"{summary} [action {action.action_id}]"),
        structured_content={"state": state, "action": _dict(action)},
        # RUNNING is no error: another call of the same action is executing it (calling again returns its receipt)
        is_error=action.state not in (common_pb2.ACTION_STATE_SUCCEEDED, common_pb2.ACTION_STATE_RUNNING),
    )


def card_text(card: gateway_pb2.ConfirmationCard) -> str:
    preview = card.preview
    lines = [preview.title or card.tool_name, preview.target, preview.impact]
    lines += [f"{d.label}: {d.value}" for d in preview.details]
    risk = _RISK.get(card.risk, "")
    if risk:
        lines.append(f"risk: {risk}")
    return "\n".join(line for line in lines if line)


def confirmation_required(card: gateway_pb2.ConfirmationCard, why: str) -> types.CallToolResult:
    """Nothing ran: the card, for the host to show and confirm (gRPC Confirm with its token) or to call again."""
    return types.CallToolResult(
        content=_content(
            f"Confirmation required before {card.tool_name} runs ({why}).\n{card_text(card)}\n[action {card.action_id}]"
        ),
        structured_content={"state": "CONFIRMATION_REQUIRED", "card": _dict(card)},
        is_error=False,
    )


def refusal(found: gateway_pb2.Refusal) -> types.CallToolResult:
    status = common_pb2.CapabilityStatus.Name(found.status).removeprefix("CAPABILITY_STATUS_")
    return types.CallToolResult(
        content=_content(found.guidance or f"{found.capability_id} is {status.lower()}"),
        structured_content={"state": "REFUSED", "refusal": _dict(found)},
        is_error=True,
    )


def error(exc: CountersignError) -> types.CallToolResult:
    detail: dict[str, Any] = {"reason": exc.reason, "code": exc.code.name, "message": exc.message[:1000]}
    if exc.violations:
        detail["violations"] = [{"field": v.field, "description": v.description} for v in exc.violations[:10]]
    if exc.retry_after:
        detail["retry_after_s"] = exc.retry_after
    return types.CallToolResult(
        content=_content(f"{exc.reason}: {exc.message[:1000]}"), structured_content={"error": detail}, is_error=True
    )
