"""The back door's test stack: redis-server, the example MCP todo server and one sidecar over
examples/registry_mcp.yaml, each a real process; and what a test sees of the MCP server (what reached it, the
todos it holds, faults to inject)."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Generator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import yaml

from countersign.testing import processes
from countersign.v1 import gateway_pb2_grpc


class McpTodo:
    """The example MCP server, seen from the test: its request log, its todos, its faults; and its restart."""

    def __init__(self, proc: processes.Proc, work: Path) -> None:
        self.proc, self.work = proc, work
        self.url: str = proc.info["url"]
        self.base = self.url.removesuffix("/mcp")

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(
            self.base + path, data=data, method=method, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            raw = exc.read()
        return json.loads(raw) if raw else None

    def requests(self, tool: str | None = None) -> list[dict[str, Any]]:
        """Every JSON-RPC message that reached /mcp (a tools/call answered 404 for a dropped session too)."""
        entries: list[dict[str, Any]] = self._call("GET", "/_test/log")["requests"]
        return [e for e in entries if tool is None or e.get("tool") == tool]

    def calls(self, tool: str, key: str) -> list[dict[str, Any]]:
        """The tools/call messages of ``tool`` that carried this idempotency key (in _meta or the header)."""
        return [e for e in self.requests(tool) if e["method"] == "tools/call" and e["idempotency_key"] == key]

    def lookups(self, key: str) -> list[dict[str, Any]]:
        return [
            e for e in self.requests("find_todo_by_key") if (e.get("arguments") or {}).get("idempotency_key") == key
        ]

    def todos(self, title: str | None = None) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = self._call("GET", "/_test/todos")["todos"]
        return [r for r in rows if title is None or r["title"] == title]

    def fault(self, **fault: Any) -> None:
        self._call("POST", "/_test/faults", fault)

    def clear_faults(self) -> None:
        self._call("DELETE", "/_test/faults")

    def stop(self) -> None:
        self.proc.stop()

    def restart(self) -> None:
        """Start it again on the same port with the same database (its MCP sessions are gone)."""
        self.proc.stop()
        self.proc = processes.start_mcp_todo(self.work, port=self.proc.info["port"], db=Path(self.proc.info["db"]))


@dataclass
class McpStack:
    work: Path
    redis: processes.Proc
    mcp: McpTodo
    registry: Path
    keys: Path
    sidecar: processes.Proc

    @property
    def address(self) -> str:
        return str(self.sidecar.info["grpc"])

    def stub(self, address: str | None = None) -> gateway_pb2_grpc.ToolGatewayServiceStub:
        channel = grpc.insecure_channel(address or self.address)
        return gateway_pb2_grpc.ToolGatewayServiceStub(channel)  # type: ignore[no-untyped-call]

    def start_sidecar(self, *, registry: Path | None = None, flags: list[str] | None = None) -> processes.Proc:
        return processes.start_sidecar(
            self.work,
            registry or self.registry,
            redis_url=self.redis.info["url"],
            keys=self.keys,
            flags=["--log-level", "warning", *(flags or [])],
        )


def start_mcp_stack(work: Path, flags: list[str] | None = None, *, json_response: bool = False) -> Generator[McpStack]:
    """Redis, the MCP todo server, and a sidecar whose registry sends create_todo and list_todos to it."""
    redis = processes.start_redis(work)
    mcp: McpTodo | None = None
    sidecar = None
    try:
        mcp = McpTodo(processes.start_mcp_todo(work, json_response=json_response), work)
        registry = processes.write_mcp_registry(work, mcp.url)
        keys = processes.write_keys(work)
        sidecar = processes.start_sidecar(
            work, registry, redis_url=redis.info["url"], keys=keys, flags=["--log-level", "warning", *(flags or [])]
        )
        yield McpStack(work, redis, mcp, registry, keys, sidecar)
    finally:
        if sidecar is not None:
            sidecar.stop()
        if mcp is not None:
            mcp.stop()  # the process it runs now (a test may have restarted it)
        redis.stop()


# the MCP todo server's tools under the names a registry beside the HTTP example gives them
BESIDE = {"create_todo": ("create_mcp_todo", "mcp_todo.create"), "list_todos": ("list_mcp_todos", "mcp_todo.list")}


def write_both_registry(work: Path, todo_url: str, mcp_url: str, *, timeout_ms: int = 0) -> Path:
    """The example registry (the HTTP todo service) plus the MCP todo server's create_todo and list_todos as
    create_mcp_todo and list_mcp_todos: one sidecar in front of both kinds of downstream (the walkthrough's back
    door step, bench/mcp_adapter.py). ``timeout_ms`` gives the MCP tools a deadline of their own."""
    doc = yaml.safe_load(processes.write_registry(work, todo_url).read_text(encoding="utf-8"))
    back = yaml.safe_load(processes.write_mcp_registry(work, mcp_url).read_text(encoding="utf-8"))
    capabilities = {c["tool"]: c for c in back["capabilities"]}
    for tool in back["tools"]:
        name, capability = BESIDE[tool["name"]]
        doc["capabilities"].append({**capabilities[tool["name"]], "id": capability, "tool": name})
        tool["name"], tool["capability"] = name, capability
        if timeout_ms:
            tool["adapter"]["timeout_ms"] = timeout_ms
        doc["tools"].append(tool)
    path = work / f"registry-both-{time.monotonic_ns()}.yaml"
    path.write_text(yaml.safe_dump(doc, allow_unicode=True, sort_keys=False), encoding="utf-8")
    return path
