"""aiohttp application for the todo service, plus the request log and fault injection under /_test/."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler

from .store import DEFAULT_OWNER, Answer, KeyState, TodoStore, refusal

FAULT_MODES = ("hang_after_commit", "hang_before_commit", "status")
# Endpoints that do not write: a fault only reaches them when its path names them explicitly.
_EXPLICIT_ONLY_PREFIXES = ("/todos/prepare", "/todos/by-key/")


def recorded_headers(pairs: Iterable[tuple[str, str]]) -> dict[str, str]:
    """The headers worth recording: x-countersign-*, traceparent, idempotency-key, if-match (lower-case)."""
    out: dict[str, str] = {}
    for name, value in pairs:
        lower = name.lower()
        if lower.startswith("x-countersign-") or lower in ("traceparent", "idempotency-key", "if-match"):
            out[lower] = value
    return out


class RequestLog:
    """In-memory record of every request that reached the service (HTTP and gRPC)."""

    def __init__(self) -> None:
        self._entries: list[dict[str, Any]] = []
        self._seq = 0

    def record(
        self,
        method: str,
        path: str,
        idempotency_key: str | None,
        headers: dict[str, str],
        body: Any,
    ) -> dict[str, Any]:
        self._seq += 1
        entry = {
            "seq": self._seq,
            "method": method,
            "path": path,
            "idempotency_key": idempotency_key,
            "headers": headers,
            "body": body,
            "at": time.time(),
        }
        self._entries.append(entry)
        return entry

    def entries(self) -> list[dict[str, Any]]:
        return list(self._entries)

    def clear(self) -> None:
        self._entries.clear()


@dataclass
class Fault:
    """Applies to the next ``times`` requests with exactly ``method`` and a path starting with ``path``.

    Paths under /todos/prepare and /todos/by-key/ are matched only when ``path`` itself starts with
    one of those, so a fault on POST /todos never hits the prepare or fence calls.
    """

    path: str
    method: str = "POST"
    mode: str = "status"
    seconds: float = 0.0
    status: int = 503
    times: int = 1

    def matches(self, method: str, path: str) -> bool:
        if self.times <= 0 or method.upper() != self.method.upper() or not path.startswith(self.path):
            return False
        for prefix in _EXPLICIT_ONLY_PREFIXES:
            if path.startswith(prefix) and not self.path.startswith(prefix):
                return False
        return True

    @classmethod
    def from_json(cls, data: Any) -> Fault:
        if not isinstance(data, dict) or not isinstance(data.get("path"), str):
            raise ValueError("a fault needs a string path")
        mode = data.get("mode", "status")
        if mode not in FAULT_MODES:
            raise ValueError(f"mode must be one of {FAULT_MODES}")
        return cls(
            path=data["path"],
            method=str(data.get("method", "POST")).upper(),
            mode=mode,
            seconds=float(data.get("seconds", 0.0)),
            status=int(data.get("status", 503)),
            times=int(data.get("times", 1)),
        )


class FaultInjector:
    def __init__(self) -> None:
        self._faults: list[Fault] = []

    def add(self, fault: Fault) -> None:
        self._faults.append(fault)

    def clear(self) -> None:
        self._faults.clear()

    def active(self) -> list[Fault]:
        return [f for f in self._faults if f.times > 0]

    def take(self, method: str, path: str) -> Fault | None:
        """The first fault matching the request, with one use counted down."""
        for fault in self._faults:
            if fault.matches(method, path):
                fault.times -= 1
                return fault
        return None


class ServiceControls:
    """The request log and the fault injector, shared by the HTTP app and the gRPC backend."""

    def __init__(self) -> None:
        self.log = RequestLog()
        self.faults = FaultInjector()


STORE_KEY = web.AppKey("todo_store", TodoStore)
CONTROLS_KEY = web.AppKey("todo_controls", ServiceControls)


def answer_response(answer: Answer) -> web.Response:
    return web.Response(status=answer.status, text=answer.body, content_type="application/json")


def _json(status: int, payload: Any) -> web.Response:
    return web.json_response(
        payload, status=status, dumps=lambda v: json.dumps(v, ensure_ascii=False, separators=(",", ":"))
    )


class _BadJson(Exception):
    pass


async def _body(request: web.Request) -> Any:
    """Parsed JSON body, ``None`` when empty; raises :class:`_BadJson` otherwise."""
    raw = await request.read()
    if not raw.strip():
        return None
    try:
        return json.loads(raw)
    except ValueError as err:
        raise _BadJson(str(err)) from err


def _owner(request: web.Request) -> str:
    return request.headers.get("X-Countersign-Subject") or DEFAULT_OWNER


def _idempotency_key(request: web.Request) -> str | None:
    """The key as a Structured Field string (the IETF draft quotes it); a bare token is accepted too."""
    raw = request.headers.get("Idempotency-Key", "").strip()
    if len(raw) >= 2 and raw[0] == raw[-1] == '"':
        raw = raw[1:-1]
    return raw or None


def _bad_json() -> web.Response:
    return answer_response(refusal(400, "BAD_JSON", "request body is not valid JSON"))


def _missing_key() -> web.Response:
    return answer_response(refusal(400, "IDEMPOTENCY_KEY_MISSING", "Idempotency-Key header is required"))


@web.middleware
async def _controls_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    path = request.path
    if path.startswith("/_test") or path == "/healthz":
        return await handler(request)
    controls = request.app[CONTROLS_KEY]
    try:
        body = await _body(request)
    except _BadJson:
        body = None
    controls.log.record(
        request.method, path, _idempotency_key(request), recorded_headers(request.headers.items()), body
    )
    fault = controls.faults.take(request.method, path)
    if fault is not None and fault.mode == "status":
        return answer_response(refusal(fault.status, "INJECTED", f"injected status {fault.status}"))
    if fault is not None and fault.mode == "hang_before_commit":
        await asyncio.sleep(fault.seconds)
    response = await handler(request)
    if fault is not None and fault.mode == "hang_after_commit":
        # The handler has already committed (store calls are synchronous); now lose the answer.
        await asyncio.sleep(fault.seconds)
    return response


# ---------------------------------------------------------------------- handlers


async def _prepare(request: web.Request) -> web.Response:
    try:
        body = await _body(request)
    except _BadJson:
        return _bad_json()
    if not isinstance(body, dict) or not isinstance(body.get("tool"), str):
        return answer_response(refusal(400, "BAD_REQUEST", "body must be {tool, arguments, context}"))
    arguments = body.get("arguments") or {}
    if not isinstance(arguments, dict):
        return answer_response(refusal(400, "BAD_REQUEST", "arguments must be an object"))
    context = body.get("context")
    locale = context.get("locale") if isinstance(context, dict) else ""
    return answer_response(
        request.app[STORE_KEY].prepare(body["tool"], arguments, locale if isinstance(locale, str) else "")
    )


async def _create(request: web.Request) -> web.Response:
    key = _idempotency_key(request)
    if key is None:
        return _missing_key()
    try:
        body = await _body(request)
    except _BadJson:
        return _bad_json()
    return answer_response(request.app[STORE_KEY].create_todo(key, _owner(request), body))


async def _list(request: web.Request) -> web.Response:
    status = request.query.get("status") or None
    todos = request.app[STORE_KEY].list_todos(_owner(request), status)
    return _json(200, {"todos": todos, "count": len(todos)})


async def _get(request: web.Request) -> web.Response:
    todo_id = request.match_info["id"]
    todo = request.app[STORE_KEY].get_todo(todo_id)
    if todo is None:
        return answer_response(refusal(404, "TODO_NOT_FOUND", f"todo {todo_id!r} does not exist"))
    return _json(200, todo)


async def _set_status(request: web.Request) -> web.Response:
    key = _idempotency_key(request)
    if key is None:
        return _missing_key()
    try:
        body = await _body(request)
    except _BadJson:
        return _bad_json()
    return answer_response(
        request.app[STORE_KEY].set_todo_status(key, request.match_info["id"], body, request.headers.get("If-Match"))
    )


async def _delete(request: web.Request) -> web.Response:
    key = _idempotency_key(request)
    if key is None:
        return _missing_key()
    try:
        body = await _body(request)
    except _BadJson:
        return _bad_json()
    return answer_response(
        request.app[STORE_KEY].delete_todo(key, request.match_info["id"], body, request.headers.get("If-Match"))
    )


async def _by_key(request: web.Request) -> web.Response:
    record = request.app[STORE_KEY].lookup_key(request.match_info["key"])
    if record.state is KeyState.ANSWERED:
        assert record.answer is not None
        return answer_response(record.answer)
    if record.state is KeyState.FENCED:
        return _json(404, {"reason": "KEY_FENCED", "fenced": True})
    return _json(404, {"reason": "KEY_NOT_FOUND"})


async def _fence(request: web.Request) -> web.Response:
    record = request.app[STORE_KEY].fence_key(request.match_info["key"])
    if record.state is KeyState.ANSWERED:
        assert record.answer is not None
        return answer_response(record.answer)
    return _json(410, {"reason": "KEY_FENCED", "fenced": True})


async def _healthz(request: web.Request) -> web.Response:
    return _json(200, {"ok": True})


async def _get_log(request: web.Request) -> web.Response:
    return _json(200, {"requests": request.app[CONTROLS_KEY].log.entries()})


async def _clear_log(request: web.Request) -> web.Response:
    request.app[CONTROLS_KEY].log.clear()
    return _json(200, {"ok": True})


async def _add_faults(request: web.Request) -> web.Response:
    try:
        body = await _body(request)
    except _BadJson:
        return _bad_json()
    items = body if isinstance(body, list) else body.get("faults", [body]) if isinstance(body, dict) else []
    try:
        faults = [Fault.from_json(item) for item in items]
    except (TypeError, ValueError) as err:
        return answer_response(refusal(400, "BAD_FAULT", str(err)))
    injector = request.app[CONTROLS_KEY].faults
    for fault in faults:
        injector.add(fault)
    return _json(200, {"faults": [asdict(f) for f in injector.active()]})


async def _get_faults(request: web.Request) -> web.Response:
    return _json(200, {"faults": [asdict(f) for f in request.app[CONTROLS_KEY].faults.active()]})


async def _clear_faults(request: web.Request) -> web.Response:
    request.app[CONTROLS_KEY].faults.clear()
    return _json(200, {"ok": True})


def make_app(
    store: TodoStore,
    *,
    controls: ServiceControls | None = None,
    test_routes: bool = True,
) -> web.Application:
    """Build the todo service app over ``store``. ``controls`` (log + faults) is created when not given;
    share it with :class:`~examples.todo_service.grpc_backend.TodoBackend` to log gRPC calls too."""
    app = web.Application(middlewares=[_controls_middleware])
    app[STORE_KEY] = store
    app[CONTROLS_KEY] = controls if controls is not None else ServiceControls()
    app.router.add_post("/todos/prepare", _prepare)
    app.router.add_get("/todos/by-key/{key}", _by_key)
    app.router.add_post("/todos/by-key/{key}/fence", _fence)
    app.router.add_post("/todos", _create)
    app.router.add_get("/todos", _list)
    app.router.add_get("/todos/{id}", _get)
    app.router.add_post("/todos/{id}/status", _set_status)
    app.router.add_delete("/todos/{id}", _delete)
    app.router.add_get("/healthz", _healthz)
    if test_routes:
        app.router.add_get("/_test/log", _get_log)
        app.router.add_delete("/_test/log", _clear_log)
        app.router.add_get("/_test/faults", _get_faults)
        app.router.add_post("/_test/faults", _add_faults)
        app.router.add_delete("/_test/faults", _clear_faults)
    return app
