"""SQLite-backed todo store with Idempotency-Key semantics.

Every operation returns an :class:`Answer` (an HTTP status plus the exact JSON body text), so the
HTTP app and the gRPC backend share one implementation and a replayed answer is byte-identical.

One ``sqlite3`` connection in autocommit mode; every keyed write runs in one ``BEGIN IMMEDIATE``
transaction together with its idempotency-key check. All methods are synchronous and must be called
from one thread (the event loop's), which makes each call atomic with respect to other coroutines.
"""

from __future__ import annotations

import enum
import hashlib
import json
import secrets
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from .due import SERVICE_TZ, Clock, DueAtError, format_iso, format_local, resolve_due_at, system_clock

TODO_STATUSES = ("open", "done")
DEFAULT_OWNER = "anonymous"
TOOLS = ("create_todo", "set_todo_status", "delete_todo")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS todos (
    id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    title TEXT NOT NULL,
    due_at TEXT,
    priority INTEGER,
    status TEXT NOT NULL,
    version INTEGER NOT NULL,
    created_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS todos_owner ON todos (owner, created_at);
CREATE TABLE IF NOT EXISTS idem (
    key TEXT PRIMARY KEY,
    fingerprint TEXT,
    status_code INTEGER,
    body TEXT,
    fenced INTEGER NOT NULL DEFAULT 0
);
"""


def canonical_json(value: Any) -> str:
    """The canonical form used for request fingerprints."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def fingerprint(value: Any) -> str:
    """sha256 (hex) of :func:`canonical_json`."""
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Answer:
    """An HTTP-shaped outcome: status code and the JSON body text exactly as sent."""

    status: int
    body: str

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def reason(self) -> str:
        """The refusal reason (``""`` for a success or a body without one)."""
        data = self.json()
        return str(data.get("reason", "")) if isinstance(data, dict) else ""

    @property
    def message(self) -> str:
        data = self.json()
        return str(data.get("message", "")) if isinstance(data, dict) else ""


def make_answer(status: int, payload: Any) -> Answer:
    return Answer(status, json.dumps(payload, ensure_ascii=False, separators=(",", ":")))


def refusal(status: int, reason: str, message: str | None = None, **extra: Any) -> Answer:
    payload: dict[str, Any] = {"reason": reason}
    if message is not None:
        payload["message"] = message
    payload.update(extra)
    return make_answer(status, payload)


def if_match_holds(if_match: str | None, current: int) -> bool:
    """RFC 9110 §13.1.1 over the row's version as a strong entity-tag: ``*``, or a listed ``"<version>"``
    (a bare ``<version>``, as gRPC metadata carries it, too). A weak tag never matches. No header: holds."""
    if if_match is None or not if_match.strip():
        return True
    tags = [t.strip() for t in if_match.split(",")]
    return "*" in tags or any(t in (f'"{current}"', str(current)) for t in tags)


def version_conflict(if_match: str | None, current: int) -> Answer:
    return refusal(
        412, "RESOURCE_VERSION_CONFLICT", f"If-Match {str(if_match)[:80]} does not match the current version {current}"
    )


class KeyState(enum.Enum):
    ABSENT = "absent"
    FENCED = "fenced"
    ANSWERED = "answered"


@dataclass(frozen=True)
class KeyRecord:
    """What an idempotency key did: nothing yet, fenced, or a stored answer."""

    state: KeyState
    answer: Answer | None = None


Apply = Callable[[sqlite3.Connection], Answer]
"""A write run inside the key's transaction; its answer is stored under the key."""


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _todo_dict(row: sqlite3.Row) -> dict[str, Any]:
    return {
        "id": row["id"],
        "title": row["title"],
        "dueAt": row["due_at"],
        "priority": row["priority"],
        "status": row["status"],
        "version": int(row["version"]),
        "owner": row["owner"],
    }


class TodoStore:
    """The todo service's state. ``path`` is a SQLite path (default in-memory)."""

    def __init__(self, path: str = ":memory:", *, clock: Clock | None = None) -> None:
        self.path = path
        self.clock: Clock = clock or system_clock
        self._db = sqlite3.connect(path, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        if path != ":memory:":
            self._db.execute("PRAGMA journal_mode=WAL")
        self._db.executescript(_SCHEMA)

    def close(self) -> None:
        self._db.close()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    # ------------------------------------------------------------------ idempotency keys

    @staticmethod
    def _key_record(conn: sqlite3.Connection, key: str) -> tuple[KeyRecord, str | None]:
        row = conn.execute("SELECT fingerprint, status_code, body, fenced FROM idem WHERE key = ?", (key,)).fetchone()
        if row is None:
            return KeyRecord(KeyState.ABSENT), None
        if row["fenced"]:
            return KeyRecord(KeyState.FENCED), None
        return KeyRecord(KeyState.ANSWERED, Answer(int(row["status_code"]), row["body"])), row["fingerprint"]

    def run_idempotent(self, key: str, request_fingerprint: str, apply: Apply) -> Answer:
        """Apply a write at most once per key (IETF Idempotency-Key semantics), atomically.

        fenced key -> 409 KEY_FENCED; stored answer with another fingerprint -> 422
        IDEMPOTENCY_KEY_REUSED; stored answer -> that answer, byte-identical; else run ``apply``
        and store its answer (2xx or 4xx) under the key, all in one transaction.
        """
        with self._transaction() as conn:
            record, stored_fingerprint = self._key_record(conn, key)
            if record.state is KeyState.FENCED:
                return refusal(409, "KEY_FENCED", f"idempotency key {key!r} is fenced and can never be applied")
            if record.state is KeyState.ANSWERED:
                assert record.answer is not None
                if stored_fingerprint != request_fingerprint:
                    return refusal(
                        422, "IDEMPOTENCY_KEY_REUSED", f"idempotency key {key!r} was used for another request"
                    )
                return record.answer
            answer = apply(conn)
            conn.execute(
                "INSERT INTO idem (key, fingerprint, status_code, body, fenced) VALUES (?, ?, ?, ?, 0)",
                (key, request_fingerprint, answer.status, answer.body),
            )
            return answer

    def lookup_key(self, key: str) -> KeyRecord:
        return self._key_record(self._db, key)[0]

    def fence_key(self, key: str) -> KeyRecord:
        """Atomically: a key with a stored answer stays as is; an absent key becomes fenced."""
        with self._transaction() as conn:
            record, _ = self._key_record(conn, key)
            if record.state is KeyState.ABSENT:
                conn.execute("INSERT INTO idem (key, fenced) VALUES (?, 1)", (key,))
                return KeyRecord(KeyState.FENCED)
            return record

    # ------------------------------------------------------------------ reads

    def get_todo(self, todo_id: str) -> dict[str, Any] | None:
        row = self._db.execute("SELECT * FROM todos WHERE id = ?", (todo_id,)).fetchone()
        return None if row is None else _todo_dict(row)

    def list_todos(self, owner: str, status: str | None = None) -> list[dict[str, Any]]:
        if status:
            rows = self._db.execute(
                "SELECT * FROM todos WHERE owner = ? AND status = ? ORDER BY created_at, rowid",
                (owner, status),
            ).fetchall()
        else:
            rows = self._db.execute(
                "SELECT * FROM todos WHERE owner = ? ORDER BY created_at, rowid", (owner,)
            ).fetchall()
        return [_todo_dict(r) for r in rows]

    def count_todos(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM todos").fetchone()[0])

    # ------------------------------------------------------------------ prepare

    def prepare(self, tool: str, arguments: dict[str, Any], locale: str = "") -> Answer:
        """Turn normalised tool arguments into concrete ones, or refuse (422). The preview is in the caller's
        language: English for an ``en`` locale, Chinese otherwise."""
        if tool == "create_todo":
            return self._prepare_create(arguments, english=locale.split("-")[0].lower() == "en")
        if tool == "set_todo_status":
            todo_id = arguments.get("id")
            if not isinstance(todo_id, str) or not todo_id:
                return refusal(422, "TODO_INVALID", "arguments.id must be a non-empty string")
            todo = self.get_todo(todo_id)
            if todo is None:
                return refusal(422, "TODO_NOT_FOUND", f"todo {todo_id!r} does not exist")
            concrete = dict(arguments)
            if concrete.get("version") is None:
                concrete["version"] = todo["version"]
            return make_answer(200, {"arguments": concrete, "resource_version": str(todo["version"])})
        if tool == "delete_todo":
            todo_id = arguments.get("id")
            todo = self.get_todo(todo_id) if isinstance(todo_id, str) and todo_id else None
            if todo is None:
                return refusal(422, "TODO_NOT_FOUND", f"todo {todo_id!r} does not exist")
            # the version the user sees on the card; it comes back as If-Match, so a todo changed
            # meanwhile is not deleted
            return make_answer(200, {"arguments": arguments, "resource_version": str(todo["version"])})
        return make_answer(200, {"arguments": arguments})

    def _prepare_create(self, arguments: dict[str, Any], *, english: bool = False) -> Answer:
        concrete = dict(arguments)
        title = arguments.get("title")
        target = title if isinstance(title, str) else ""
        due_text = arguments.get("dueAt")
        if due_text is None:
            impact = (
                "Confirm to create a to-do with no due date." if english else "确认后将创建一条待办（无截止时间）。"
            )
        else:
            if not isinstance(due_text, str) or not due_text.strip():
                return refusal(422, "TODO_DUE_AT_UNPARSEABLE", "dueAt must be a non-empty string")
            try:
                due = resolve_due_at(due_text, self.clock())
            except DueAtError as err:
                return refusal(422, err.reason, err.message)
            concrete["dueAt"] = format_iso(due)
            impact = (
                f"Confirm to create a to-do due {format_local(due)}."
                if english
                else f"确认后将创建一条截止于 {format_local(due)} 的待办。"
            )
        preview = {"title": "Create a to-do" if english else "创建待办", "target": target, "impact": impact}
        return make_answer(200, {"arguments": concrete, "preview": preview})

    # ------------------------------------------------------------------ keyed writes

    def create_todo(self, key: str, owner: str, body: Any) -> Answer:
        """Create once per key. ``body``: {"title": str, "dueAt"?: str|null, "priority"?: int|null}."""
        if not isinstance(body, dict) or not isinstance(body.get("title"), str):
            return refusal(400, "TODO_INVALID", "body must be an object with a string title")
        due_at = body.get("dueAt")
        priority = body.get("priority")
        if due_at is not None and not isinstance(due_at, str):
            return refusal(400, "TODO_INVALID", "dueAt must be a string")
        if priority is not None and not _is_int(priority):
            return refusal(400, "TODO_INVALID", "priority must be an integer")
        title: str = body["title"]

        def apply(conn: sqlite3.Connection) -> Answer:
            todo_id = "t_" + secrets.token_hex(6)
            conn.execute(
                "INSERT INTO todos (id, owner, title, due_at, priority, status, version, created_at)"
                " VALUES (?, ?, ?, ?, ?, 'open', 1, ?)",
                (todo_id, owner, title, due_at, priority, time.time()),
            )
            todo = {
                "id": todo_id,
                "title": title,
                "dueAt": due_at,
                "priority": priority,
                "status": "open",
                "version": 1,
                "owner": owner,
            }
            return make_answer(201, todo)

        return self.run_idempotent(key, fingerprint(body), apply)

    def set_todo_status(self, key: str, todo_id: str, body: Any, if_match: str | None = None) -> Answer:
        """Optimistic status change once per key. ``body``: {"status": "open"|"done", "version": int};
        ``if_match`` (the If-Match header), when given, must match the current version (else 412)."""
        if not isinstance(body, dict):
            return refusal(400, "TODO_INVALID", "body must be an object")
        status = body.get("status")
        version = body.get("version")
        if status not in TODO_STATUSES:
            return refusal(400, "TODO_INVALID", "status must be 'open' or 'done'")
        if not _is_int(version):
            return refusal(400, "TODO_INVALID", "version must be an integer")
        if body.get("id") not in (None, todo_id):
            return refusal(400, "TODO_INVALID", "body id does not match the path")
        request = {"op": "set_todo_status", "id": todo_id, "status": status, "version": version, "if_match": if_match}

        def apply(conn: sqlite3.Connection) -> Answer:
            row = conn.execute("SELECT * FROM todos WHERE id = ?", (todo_id,)).fetchone()
            if row is None:
                return refusal(404, "TODO_NOT_FOUND", f"todo {todo_id!r} does not exist")
            current = int(row["version"])
            if not if_match_holds(if_match, current):
                return version_conflict(if_match, current)
            if version != current:
                return refusal(409, "TODO_VERSION_CONFLICT", f"stale version {version}, current {current}")
            conn.execute("UPDATE todos SET status = ?, version = version + 1 WHERE id = ?", (status, todo_id))
            updated = conn.execute("SELECT * FROM todos WHERE id = ?", (todo_id,)).fetchone()
            return make_answer(200, _todo_dict(updated))

        return self.run_idempotent(key, fingerprint(request), apply)

    def delete_todo(self, key: str, todo_id: str, body: Any = None, if_match: str | None = None) -> Answer:
        """Delete once per key. ``body`` may be null or {"id"?: str, "version"?: int}; ``if_match`` as for
        :meth:`set_todo_status`."""
        if body is None:
            body = {}
        if not isinstance(body, dict):
            return refusal(400, "TODO_INVALID", "body must be an object")
        if body.get("id") not in (None, todo_id):
            return refusal(400, "TODO_INVALID", "body id does not match the path")
        version = body.get("version")
        if version is not None and not _is_int(version):
            return refusal(400, "TODO_INVALID", "version must be an integer")
        request = {"op": "delete_todo", "id": todo_id, "version": version, "if_match": if_match}

        def apply(conn: sqlite3.Connection) -> Answer:
            row = conn.execute("SELECT version FROM todos WHERE id = ?", (todo_id,)).fetchone()
            if row is None:
                return refusal(404, "TODO_NOT_FOUND", f"todo {todo_id!r} does not exist")
            current = int(row["version"])
            if not if_match_holds(if_match, current):
                return version_conflict(if_match, current)
            if version is not None and version != current:
                return refusal(409, "TODO_VERSION_CONFLICT", f"stale version {version}, current {current}")
            conn.execute("DELETE FROM todos WHERE id = ?", (todo_id,))
            return make_answer(200, {"id": todo_id, "deleted": True, "version": current + 1})

        return self.run_idempotent(key, fingerprint(request), apply)

    def execute(self, tool: str, key: str, owner: str, arguments: Any, if_match: str | None = None) -> Answer:
        """Dispatch a tool call (as the gRPC backend receives it) to the keyed write."""
        if not isinstance(arguments, dict):
            return refusal(400, "TODO_INVALID", "arguments must be an object")
        if tool == "create_todo":
            return self.create_todo(key, owner, arguments)
        if tool not in ("set_todo_status", "delete_todo"):
            return refusal(400, "UNKNOWN_TOOL", f"unknown tool {tool!r}")
        todo_id = arguments.get("id")
        if not isinstance(todo_id, str) or not todo_id:
            return refusal(400, "TODO_INVALID", "arguments.id must be a non-empty string")
        if tool == "set_todo_status":
            return self.set_todo_status(key, todo_id, arguments, if_match)
        return self.delete_todo(key, todo_id, arguments, if_match)

    def compensate(self, tool: str, resource_id: str, arguments: Any) -> Answer:
        """Undo a resource: create_todo -> delete it (idempotent); set_todo_status -> restore
        ``arguments.previousStatus`` (default: the opposite of ``arguments.status``); delete_todo
        cannot be undone (409 TODO_NOT_COMPENSABLE)."""
        args: dict[str, Any] = arguments if isinstance(arguments, dict) else {}
        if not resource_id:
            return refusal(400, "TODO_INVALID", "resource_id is required")
        with self._transaction() as conn:
            row = conn.execute("SELECT * FROM todos WHERE id = ?", (resource_id,)).fetchone()
            if tool == "create_todo":
                if row is None:
                    return make_answer(200, {"id": resource_id, "deleted": False})
                conn.execute("DELETE FROM todos WHERE id = ?", (resource_id,))
                return make_answer(200, {"id": resource_id, "deleted": True, "version": int(row["version"]) + 1})
            if tool == "set_todo_status":
                if row is None:
                    return refusal(404, "TODO_NOT_FOUND", f"todo {resource_id!r} does not exist")
                restore = args.get("previousStatus")
                if restore not in TODO_STATUSES:
                    restore = "open" if args.get("status", row["status"]) == "done" else "done"
                if row["status"] != restore:
                    conn.execute(
                        "UPDATE todos SET status = ?, version = version + 1 WHERE id = ?",
                        (restore, resource_id),
                    )
                updated = conn.execute("SELECT * FROM todos WHERE id = ?", (resource_id,)).fetchone()
                return make_answer(200, _todo_dict(updated))
            if tool == "delete_todo":
                return refusal(409, "TODO_NOT_COMPENSABLE", "a deleted todo cannot be restored")
            return refusal(400, "UNKNOWN_TOOL", f"unknown tool {tool!r}")


__all__ = [
    "DEFAULT_OWNER",
    "SERVICE_TZ",
    "TOOLS",
    "Answer",
    "KeyRecord",
    "KeyState",
    "TodoStore",
    "canonical_json",
    "fingerprint",
    "make_answer",
    "refusal",
]
