"""The MCP todo server's tools over the todo service's store (examples/todo_service/store.py), and the faults a
test injects into them."""

from __future__ import annotations

import asyncio
import json
from dataclasses import asdict, dataclass, field
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, TextContent

from examples.todo_service.store import DEFAULT_OWNER, Answer, KeyState, TodoStore

KEY_META = "io.countersign/idempotency-key"
# tool-level faults, and two the transport applies once the tool has committed (app.py)
FAULT_MODES = (
    "error",  # answer isError with `reason`; nothing is written
    "jsonrpc_error",  # answer a JSON-RPC error with `code`; nothing is written
    "hang_before_commit",  # sleep `seconds`, then write and answer
    "hang_after_commit",  # write, sleep `seconds`, then answer
    "no_receipt",  # write, then answer without the todo's id
    "huge",  # write, then answer with `size` bytes of text besides the todo
    "drop_after_commit",  # write, then drop the connection instead of answering
    "garbage_after_commit",  # write, then answer bytes that are not JSON-RPC
)
TRANSPORT_MODES = ("drop_after_commit", "garbage_after_commit")


@dataclass
class Fault:
    """Applies to the next ``times`` calls of ``tool``."""

    tool: str
    mode: str
    times: int = 1
    seconds: float = 0.0
    reason: str = "INJECTED"
    code: int = -32603
    size: int = 2 << 20

    @classmethod
    def from_json(cls, data: Any) -> Fault:
        if not isinstance(data, dict) or not isinstance(data.get("tool"), str):
            raise ValueError("a fault needs a string tool")
        if data.get("mode") not in FAULT_MODES:
            raise ValueError(f"mode must be one of {', '.join(FAULT_MODES)}")
        known = {k: data[k] for k in ("times", "seconds", "reason", "code", "size") if k in data}
        return cls(tool=data["tool"], mode=data["mode"], **known)


@dataclass
class Controls:
    """What the tests see and steer: the request log, the faults, and the answers the transport must spoil."""

    log: list[dict[str, Any]] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    # (MCP session id, JSON-RPC request id) -> a transport mode, set by a tool once it has committed
    spoil: dict[tuple[str, str], str] = field(default_factory=dict)

    def take(self, tool: str) -> Fault | None:
        for fault in self.faults:
            if fault.tool == tool and fault.times > 0:
                fault.times -= 1
                return fault
        return None

    def active(self) -> list[dict[str, Any]]:
        return [asdict(f) for f in self.faults if f.times > 0]


def _result(answer: Answer, *, found: bool = False) -> CallToolResult:
    """A store answer as a tool result: the body as structured content (and as its JSON text), or isError with
    the refusal's reason."""
    body = answer.json()
    if answer.ok:
        return CallToolResult(content=[TextContent(type="text", text=answer.body)], structured_content=body)
    refusal = {"reason": answer.reason, "message": answer.message, **({"found": True} if found else {})}
    return CallToolResult(
        content=[TextContent(type="text", text=answer.message or answer.reason)],
        structured_content=refusal,
        is_error=True,
    )


def _refused(reason: str, message: str) -> CallToolResult:
    return CallToolResult(
        content=[TextContent(type="text", text=message)],
        structured_content={"reason": reason, "message": message},
        is_error=True,
    )


def _header(ctx: Context, name: str) -> str:
    headers = ctx.headers or {}
    return str(headers.get(name.lower()) or headers.get(name) or "")


def _key(ctx: Context) -> tuple[str, str]:
    """The idempotency key from _meta, else from the header (a Structured Field string, or a bare token); and
    why there is none usable ("" when there is)."""
    meta = dict(ctx.request_context.meta or {})
    from_meta = meta.get(KEY_META)
    header = _header(ctx, "Idempotency-Key").strip()
    if len(header) >= 2 and header[0] == header[-1] == '"':
        header = header[1:-1]
    if from_meta is not None and not isinstance(from_meta, str):
        return "", "the _meta idempotency key must be a string"
    if from_meta and header and from_meta != header:
        return "", "the _meta idempotency key and the Idempotency-Key header differ"
    key = from_meta or header
    return key, "" if key else "an idempotency key is required (_meta io.countersign/idempotency-key)"


def build(store: TodoStore, controls: Controls) -> MCPServer:
    mcp = MCPServer(
        "example-mcp-todo", instructions="A todo list. Writes take an idempotency key in _meta.", log_level="WARNING"
    )

    def owner(ctx: Context) -> str:
        return _header(ctx, "X-Countersign-Subject") or DEFAULT_OWNER

    def spoil(ctx: Context, mode: str) -> None:
        session = _header(ctx, "mcp-session-id")
        controls.spoil[(session, ctx.request_id)] = mode

    @mcp.tool(description="Create a todo, once per idempotency key.")
    async def create_todo(
        title: str, ctx: Context, dueAt: str | None = None, priority: int | None = None
    ) -> CallToolResult:
        fault = controls.take("create_todo")
        mode = fault.mode if fault else ""
        if fault is not None and mode == "error":
            return _refused(fault.reason, "injected refusal")
        if fault is not None and mode == "jsonrpc_error":
            raise MCPError(fault.code, "injected JSON-RPC error")
        key, problem = _key(ctx)
        if problem:
            return _refused("IDEMPOTENCY_KEY_MISSING" if not key else "IDEMPOTENCY_KEY_INVALID", problem)
        if fault is not None and mode == "hang_before_commit":
            await asyncio.sleep(fault.seconds)
        body: dict[str, Any] = {"title": title}
        if dueAt is not None:
            body["dueAt"] = dueAt
        if priority is not None:
            body["priority"] = priority
        answer = store.create_todo(key, owner(ctx), body)  # synchronous: atomic with its key check
        if fault is not None and mode == "hang_after_commit":
            await asyncio.sleep(fault.seconds)
        if fault is not None and mode in TRANSPORT_MODES:
            spoil(ctx, mode)
        result = _result(answer)
        if fault is not None and mode == "no_receipt" and answer.ok:
            return CallToolResult(
                content=[TextContent(type="text", text='{"ok": true}')], structured_content={"ok": True}
            )
        if fault is not None and mode == "huge":
            result.content.append(TextContent(type="text", text="x" * fault.size))
        return result

    @mcp.tool(description="List the caller's todos.")
    async def list_todos(ctx: Context, status: str | None = None) -> CallToolResult:
        fault = controls.take("list_todos")
        if fault is not None and fault.mode == "error":
            return _refused(fault.reason, "injected refusal")
        todos = store.list_todos(owner(ctx), status)
        body = {"todos": todos, "count": len(todos)}
        result = CallToolResult(content=[TextContent(type="text", text=json.dumps(body))], structured_content=body)
        if fault is not None and fault.mode == "huge":
            result.content.append(TextContent(type="text", text="x" * fault.size))
        return result

    @mcp.tool(description="What an idempotency key produced; with fence, an absent key is fenced for good.")
    async def find_todo_by_key(idempotency_key: str, ctx: Context, fence: bool = False) -> CallToolResult:
        record = store.fence_key(idempotency_key) if fence else store.lookup_key(idempotency_key)
        if record.state is KeyState.ANSWERED:
            assert record.answer is not None
            return _result(record.answer, found=True)
        body: dict[str, Any] = {"found": False}
        if record.state is KeyState.FENCED:
            body["fenced"] = True
        return CallToolResult(content=[TextContent(type="text", text=json.dumps(body))], structured_content=body)

    @mcp.tool(description="Concrete arguments and a preview for a write.")
    async def prepare_todo(
        tool: str, arguments: dict[str, Any], ctx: Context, context: dict[str, Any] | None = None
    ) -> CallToolResult:
        locale = (context or {}).get("locale")
        return _result(store.prepare(tool, arguments, locale if isinstance(locale, str) else ""))

    return mcp
