"""Real downstream servers for adapter tests: they listen on loopback, record every request that reached
them, and write their answers exactly as a test scripts them (split into TCP segments, delayed, chunked,
gzipped, cut short, oversize).

``Raw`` is a bare asyncio TCP server, so the bytes on the wire are the test's own; ``registry_doc`` builds
a small registry whose tools point at it, and ``sidecar_over`` runs the sidecar over such a registry.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from countersign.sidecar import app, settings
from countersign.testing import processes

Step = bytes | float  # bytes: written and drained as one segment; float: a pause in seconds


@dataclass
class Seen:
    """One request as it reached the server: the raw request target, never normalised."""

    method: str
    target: str
    headers: dict[str, str]
    body: bytes


def answer(
    status: int,
    body: bytes | str | Any = b"",
    *,
    headers: dict[str, str] | None = None,
    split: tuple[int, ...] = (),
    pause: float = 0.05,
    chunked: bool = False,
    gzipped: bool = False,
    length: int | None = None,
    reason: str = "X",
) -> list[Step]:
    """An HTTP/1.1 answer as steps: the head, then the body cut at ``split`` offsets with ``pause`` between.

    ``length`` overrides Content-Length (a cut answer announces more than it sends)."""
    if not isinstance(body, (bytes, str)):
        body = json.dumps(body)
    raw = body.encode() if isinstance(body, str) else body
    head = {"Content-Type": "application/json", "Connection": "close", **(headers or {})}
    if gzipped:
        raw = gzip.compress(raw)
        head["Content-Encoding"] = "gzip"
    parts = [raw[a:b] for a, b in zip((0, *split), (*split, len(raw)), strict=True)]
    if chunked:
        head["Transfer-Encoding"] = "chunked"
        parts = [b"%x\r\n%s\r\n" % (len(p), p) for p in parts if p] + [b"0\r\n\r\n"]
    else:
        head["Content-Length"] = str(len(raw) if length is None else length)
    first = (
        f"HTTP/1.1 {status} {reason}\r\n".encode()
        + b"".join(f"{k}: {v}\r\n".encode() for k, v in head.items())
        + b"\r\n"
    )
    steps: list[Step] = [first]
    for part in parts:
        steps += [pause, part]
    return steps


Script = Callable[[Seen], list[Step]]


@dataclass
class Raw:
    """A downstream on 127.0.0.1:<free port> that answers each request with ``script(request)``."""

    script: Script = field(default=lambda seen: answer(200, {"ok": True}))
    seen: list[Seen] = field(default_factory=list)
    server: asyncio.Server | None = None
    handlers: set[asyncio.Task[None]] = field(default_factory=set)

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def start(self) -> Raw:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def stop(self) -> None:
        for task in self.handlers:
            task.cancel()
        await asyncio.gather(*self.handlers, return_exceptions=True)
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.handlers.add(task)
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, target, _ = lines[0].split(" ", 2)
            headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
            body = await reader.readexactly(int(headers.get("content-length", "0")))
            seen = Seen(method, target, headers, body)
            self.seen.append(seen)
            for step in self.script(seen):
                if isinstance(step, float):
                    await asyncio.sleep(step)
                else:
                    writer.write(step)
                    await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            self.handlers.discard(task)
            writer.close()


def registry_doc(base: str, **tool_overrides: dict[str, Any]) -> dict[str, Any]:
    """A registry over one downstream at ``base``: a declared-receipt write with lookup and fence, a write
    with no receipt declared, a read, a prepared write with an id in the path, and its delete."""
    closed_id = {
        "type": "object",
        "additionalProperties": False,
        "required": ["id"],
        "properties": {"id": {"type": "string", "maxLength": 2000}},
    }
    tools: dict[str, dict[str, Any]] = {
        "create_thing": {
            "capability": "thing.create",
            "is_write": True,
            "roles": ["user"],
            "schema": {
                "type": "object",
                "additionalProperties": False,
                "required": ["title"],
                "properties": {"title": {"type": "string"}},
            },
            "adapter": {
                "kind": "http",
                "execute": {"method": "POST", "url": f"{base}/things"},
                "lookup": {"url": f"{base}/things/by-key/{{idempotency_key}}"},
                "fence": {"url": f"{base}/things/by-key/{{idempotency_key}}/fence"},
            },
            "receipt": {"resource_id": "id", "resource_version": "version", "summary": "{title} created"},
            "compensation": {"tool": "delete_thing", "args": {"id": "{receipt.resource_id}"}},
        },
        "create_plain": {
            "capability": "plain.create",
            "is_write": True,
            "roles": ["user"],
            "schema": {"type": "object", "additionalProperties": False, "properties": {"title": {"type": "string"}}},
            "adapter": {"kind": "http", "execute": {"method": "POST", "url": f"{base}/plain"}},
        },
        "read_things": {
            "capability": "thing.read",
            "is_write": False,
            "roles": ["user"],
            "schema": {"type": "object", "additionalProperties": False, "properties": {"q": {"type": "string"}}},
            "adapter": {"kind": "http", "execute": {"method": "GET", "url": f"{base}/things?q={{q}}"}},
        },
        "set_thing": {
            "capability": "thing.set",
            "is_write": True,
            "roles": ["user"],
            "schema": {
                "type": "object",
                "additionalProperties": False,
                "required": ["id", "status"],
                "properties": {"id": {"type": "string", "maxLength": 2000}, "status": {"type": "string"}},
            },
            "adapter": {
                "kind": "http",
                "execute": {"method": "POST", "url": f"{base}/things/{{id}}/status"},
                "prepare": {"url": f"{base}/things/prepare"},
            },
            "receipt": {"resource_id": "id"},
        },
        "delete_thing": {
            "capability": "thing.delete",
            "is_write": True,
            "roles": ["user"],
            "schema": closed_id,
            "adapter": {"kind": "http", "execute": {"method": "DELETE", "url": f"{base}/things/{{id}}"}},
            "receipt": {"resource_id": "id"},
        },
    }
    for name, override in tool_overrides.items():
        tools[name] = {**tools[name], **override}
    caps = [{"id": t["capability"], "status": "enabled", "tool": name, "risk": "low"} for name, t in tools.items()]
    return {
        "policy_version": "adapters.1",
        "capabilities": caps,
        "tools": [{"name": name, **t} for name, t in tools.items()],
    }


@contextlib.asynccontextmanager
async def sidecar_over(work: Path, doc: dict[str, Any], **overrides: Any) -> AsyncIterator[app.Sidecar]:
    """The sidecar in this process over a private redis-server and the registry ``doc`` (its background
    reconciler idle unless ``reconcile_interval`` says otherwise)."""
    redis = processes.start_redis(work)
    path = work / f"registry-{time.monotonic_ns()}.yaml"
    path.write_text(yaml.safe_dump(doc, allow_unicode=True))
    values: dict[str, Any] = {
        "registry": str(path),
        "listen": "127.0.0.1:0",
        "redis_url": redis.info["url"],
        "metrics_listen": "127.0.0.1:0",
        "keys_file": str(processes.write_keys(work)),
        "downstream_deadline": 1.0,
        "lease": 5.0,
        "reconcile_interval": 3600.0,
        "log_level": "warning",
        **overrides,
    }
    running = await app.start(settings.Settings(**values).validate())
    try:
        yield running
    finally:
        await running.stop(grace=1)
        redis.stop()
