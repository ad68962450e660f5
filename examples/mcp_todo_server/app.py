"""The MCP todo server's HTTP side: the SDK's Streamable HTTP app at /mcp, wrapped in the request log and the
transport faults (an answer dropped or spoiled after the tool committed), and the /_test/ routes beside it."""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, Router
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from examples.todo_service.app import recorded_headers
from examples.todo_service.store import TodoStore

from .tools import KEY_META, Controls, Fault, build


class Recorder:
    """ASGI middleware in front of /mcp: records every JSON-RPC request, and spoils the answer a tool marked."""

    def __init__(self, app: ASGIApp, tests: ASGIApp, controls: Controls) -> None:
        self.app, self.tests, self.controls = app, tests, controls

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and (scope["path"].startswith("/_test/") or scope["path"] == "/healthz"):
            await self.tests(scope, receive, send)
            return
        if scope["type"] != "http" or scope["path"] != "/mcp" or scope["method"] != "POST":
            await self.app(scope, receive, send)  # the MCP app: its GET and DELETE, and the lifespan
            return
        raw = b""
        while True:
            message = await receive()
            raw += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        client = scope.get("client")
        ids = self._record(raw, headers, f"{client[0]}:{client[1]}" if client else "")
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()  # the disconnect, when it comes
            replayed = True
            return {"type": "http.request", "body": raw, "more_body": False}

        session = headers.get("mcp-session-id", "")
        head: Message | None = None
        dropped = False

        async def spoil_if_marked(message: Message) -> None:
            """Pass the answer on, unless the tool marked it: then drop or spoil the message with its result."""
            nonlocal head, dropped
            mode = next((self.controls.spoil[(session, i)] for i in ids if (session, i) in self.controls.spoil), "")
            if dropped or not mode:
                if not dropped:
                    await send(message)
                return
            if message["type"] == "http.response.start":
                head = message  # a JSON answer: its head waits for its body
                return
            body = message.get("body", b"")
            if b'"result"' not in body and b'"error"' not in body:
                if head is None:
                    await send(message)  # an SSE event before the result (the stream's head went out already)
                return
            for i in ids:
                self.controls.spoil.pop((session, i), None)
            if mode == "drop_after_commit":
                if head is not None:  # the head only, announcing more than will come
                    await send({**head, "headers": [h for h in head["headers"] if h[0].lower() != b"content-length"]})
                dropped = True  # nothing more is sent; the connection is closed below
                return
            garbage = b"<html>this is not JSON-RPC</html>"
            if head is None:  # an SSE stream: an event that is no JSON-RPC message
                await send({**message, "body": b"event: message\ndata: " + garbage + b"\n\n"})
                return
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(garbage))],
                }
            )
            await send({"type": "http.response.body", "body": garbage, "more_body": False})

        await self.app(scope, replay, spoil_if_marked)
        if dropped:
            # an application error after the answer started: the server closes the connection mid-answer
            raise ConnectionAbortedError("fault drop_after_commit: the todo was written, the answer is dropped")

    def _record(self, raw: bytes, headers: dict[str, str], peer: str) -> list[str]:
        """Log each JSON-RPC message of the body; the ids of its requests."""
        try:
            doc = json.loads(raw)
        except ValueError:
            doc = None
        messages = doc if isinstance(doc, list) else [doc]
        ids: list[str] = []
        for message in messages:
            if not isinstance(message, dict):
                self.controls.log.append(
                    {"seq": len(self.controls.log) + 1, "method": None, "raw": raw[:200].decode(errors="replace")}
                )
                continue
            params: dict[str, Any] = message["params"] if isinstance(message.get("params"), dict) else {}
            meta: dict[str, Any] = params["_meta"] if isinstance(params.get("_meta"), dict) else {}
            header_key = headers.get("idempotency-key", "").strip().strip('"') or None
            if "id" in message:
                ids.append(str(message["id"]))
            self.controls.log.append(
                {
                    "seq": len(self.controls.log) + 1,
                    "method": message.get("method"),
                    "tool": params.get("name"),
                    "arguments": params.get("arguments"),
                    "meta": meta,
                    "idempotency_key": meta.get(KEY_META) or header_key,
                    "header_key": header_key,
                    "session": headers.get("mcp-session-id"),
                    "peer": peer,  # the client's address and port: one per TCP connection
                    "headers": recorded_headers(headers.items()),
                }
            )
        return ids


def make_app(store: TodoStore, controls: Controls | None = None, *, json_response: bool = False) -> ASGIApp:
    """The server over ``store``: /mcp (SSE answers, or JSON with ``json_response``) and the /_test/ routes."""
    controls = controls if controls is not None else Controls()

    async def log(request: Request) -> Response:
        if request.method == "DELETE":
            controls.log.clear()
        return JSONResponse({"requests": controls.log})

    async def todos(request: Request) -> Response:
        rows = store._db.execute("SELECT id, owner, title FROM todos ORDER BY created_at, rowid").fetchall()
        return JSONResponse({"todos": [dict(r) for r in rows]})

    async def faults(request: Request) -> Response:
        if request.method == "DELETE":
            controls.faults.clear()
        elif request.method == "POST":
            try:
                body: Any = json.loads(await request.body())
                items = body if isinstance(body, list) else [body]
                controls.faults.extend(Fault.from_json(item) for item in items)
            except (ValueError, TypeError) as exc:
                return JSONResponse({"reason": "BAD_FAULT", "message": str(exc)}, status_code=400)
        return JSONResponse({"faults": controls.active()})

    async def healthz(request: Request) -> Response:
        return JSONResponse({"ok": True})

    tests = Router(
        routes=[
            Route("/_test/log", log, methods=["GET", "DELETE"]),
            Route("/_test/todos", todos, methods=["GET"]),
            Route("/_test/faults", faults, methods=["GET", "POST", "DELETE"]),
            Route("/healthz", healthz, methods=["GET"]),
        ]
    )
    mcp = build(store, controls).streamable_http_app(json_response=json_response)
    return Recorder(mcp, tests, controls)
