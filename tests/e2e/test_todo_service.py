"""The example todo service: run as a real subprocess (HTTP + gRPC) and exercised over the wire."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import aiohttp
import grpc
import grpc.aio
import pytest
from aiohttp.test_utils import TestClient, TestServer
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from countersign.testing.processes import ROOT
from countersign.v1 import backend_pb2, backend_pb2_grpc
from examples.todo_service import SERVICE_TZ, DueAtError, TodoStore, make_app, parse_due_at, resolve_due_at

NOON = datetime(2026, 11, 30, 12, 0, tzinfo=SERVICE_TZ)


@dataclass
class Service:
    proc: subprocess.Popen[str]
    port: int
    grpc_port: int

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@pytest.fixture(scope="module")
def service() -> Iterator[Service]:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "examples.todo_service",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--grpc-port",
            "0",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 20)
    if not ready:
        proc.kill()
        pytest.fail("todo service did not print its listening line")
    line = json.loads(proc.stdout.readline())
    assert line["event"] == "listening"
    try:
        yield Service(proc, int(line["port"]), int(line["grpc_port"]))
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            code = proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
        assert code == 0


@pytest.fixture
async def http(service: Service) -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(base_url=service.base) as session:
        yield session
        await session.delete("/_test/faults")


def key() -> str:
    return "k_" + uuid.uuid4().hex


def subject() -> dict[str, str]:
    return {"X-Countersign-Subject": "u_" + uuid.uuid4().hex[:8]}


async def post(
    http: aiohttp.ClientSession, path: str, body: Any, headers: dict[str, str], idem: str | None = None
) -> tuple[int, bytes]:
    hdrs = dict(headers)
    if idem is not None:
        hdrs["Idempotency-Key"] = idem
    async with http.post(path, json=body, headers=hdrs) as resp:
        return resp.status, await resp.read()


async def todos(http: aiohttp.ClientSession, headers: dict[str, str], status: str = "") -> list[Any]:
    async with http.get("/todos", params={"status": status}, headers=headers) as resp:
        assert resp.status == 200
        data = await resp.json()
        assert data["count"] == len(data["todos"])
        return list(data["todos"])


async def by_key(http: aiohttp.ClientSession, idem: str) -> tuple[int, Any]:
    async with http.get(f"/todos/by-key/{idem}") as resp:
        return resp.status, await resp.json()


# --------------------------------------------------------------------------- dueAt parsing (unit)


def test_parse_due_at_phrases_with_injected_now() -> None:
    assert parse_due_at("今晚 9 点", NOON).isoformat() == "2026-11-30T21:00:00+08:00"
    assert parse_due_at("今晚9点", NOON).isoformat() == "2026-11-30T21:00:00+08:00"
    assert parse_due_at("明天 9 点", NOON).isoformat() == "2026-12-01T09:00:00+08:00"
    assert parse_due_at("明天上午 9 点", NOON).isoformat() == "2026-12-01T09:00:00+08:00"
    assert parse_due_at("明天下午 3 点", NOON).isoformat() == "2026-12-01T15:00:00+08:00"
    assert parse_due_at("tonight 9pm", NOON).isoformat() == "2026-11-30T21:00:00+08:00"
    assert parse_due_at("tomorrow 9am", NOON).isoformat() == "2026-12-01T09:00:00+08:00"
    assert parse_due_at("tomorrow 3pm", NOON).isoformat() == "2026-12-01T15:00:00+08:00"
    assert parse_due_at("in 2 hours", NOON).isoformat() == "2026-11-30T14:00:00+08:00"
    assert parse_due_at("in 45 minutes", NOON).isoformat() == "2026-11-30T12:45:00+08:00"
    assert parse_due_at("2026-12-02T08:30:15.987+08:00", NOON).isoformat() == "2026-12-02T08:30:15+08:00"
    # "now" given in another zone is still resolved on the service's (UTC+8) calendar.
    utc_now = NOON.replace(hour=23).astimezone(UTC)
    assert parse_due_at("明天 9 点", utc_now).isoformat() == "2026-12-01T09:00:00+08:00"


def test_resolve_due_at_refuses_past_far_future_and_garbage() -> None:
    evening = NOON.replace(hour=22)
    with pytest.raises(DueAtError) as past:
        resolve_due_at("今晚 9 点", evening)
    assert past.value.reason == "TODO_DUE_AT_SUSPICIOUS"
    assert resolve_due_at("今晚 9 点", NOON.replace(hour=21, minute=4)).hour == 21  # within 5 minutes
    with pytest.raises(DueAtError) as far:
        resolve_due_at("2028-01-01T00:00:00+08:00", NOON)
    assert far.value.reason == "TODO_DUE_AT_SUSPICIOUS"
    for text in ("someday", "明天 25 点", "tomorrow 13pm"):
        with pytest.raises(DueAtError) as bad:
            resolve_due_at(text, NOON)
        assert bad.value.reason == "TODO_DUE_AT_UNPARSEABLE"


async def test_prepare_endpoint_in_process_with_injected_clock() -> None:
    store = TodoStore(clock=lambda: NOON)
    async with TestClient(TestServer(make_app(store))) as client:
        body = {"tool": "create_todo", "arguments": {"title": "交周报", "dueAt": "今晚 9 点"}, "context": {}}
        resp = await client.post("/todos/prepare", json=body)
        assert resp.status == 200
        data = await resp.json()
        assert data["arguments"] == {"title": "交周报", "dueAt": "2026-11-30T21:00:00+08:00"}
        assert data["preview"] == {
            "title": "创建待办",
            "target": "交周报",
            "impact": "确认后将创建一条截止于 2026-11-30 21:00 的待办。",
        }
        body["arguments"] = {"title": "x"}
        data = await (await client.post("/todos/prepare", json=body)).json()
        assert data["preview"]["impact"] == "确认后将创建一条待办（无截止时间）。"
        english = {**body, "arguments": {"title": "Report", "dueAt": "今晚 9 点"}, "context": {"locale": "en-US"}}
        data = await (await client.post("/todos/prepare", json=english)).json()
        assert data["preview"] == {
            "title": "Create a to-do",
            "target": "Report",
            "impact": "Confirm to create a to-do due 2026-11-30 21:00.",
        }, "the caller's language"

        for due, reason in (
            ("今天上午 9 点", "TODO_DUE_AT_SUSPICIOUS"),
            ("whenever", "TODO_DUE_AT_UNPARSEABLE"),
        ):
            body["arguments"] = {"title": "x", "dueAt": due}
            resp = await client.post("/todos/prepare", json=body)
            assert resp.status == 422
            assert (await resp.json())["reason"] == reason

        created = await client.post("/todos", json={"title": "t"}, headers={"Idempotency-Key": key()})
        todo = await created.json()
        prep = {"tool": "set_todo_status", "arguments": {"id": todo["id"], "status": "done"}}
        data = await (await client.post("/todos/prepare", json=prep)).json()
        assert data == {
            "arguments": {"id": todo["id"], "status": "done", "version": 1},
            "resource_version": "1",
        }
        prep["arguments"] = {"id": "t_missing", "status": "done"}
        resp = await client.post("/todos/prepare", json=prep)
        assert resp.status == 422
        assert (await resp.json())["reason"] == "TODO_NOT_FOUND"
        doomed = {"tool": "delete_todo", "arguments": {"id": todo["id"]}}
        assert await (await client.post("/todos/prepare", json=doomed)).json() == {
            "arguments": {"id": todo["id"]},
            "resource_version": "1",
        }
        doomed["arguments"] = {"id": "t_missing"}
        resp = await client.post("/todos/prepare", json=doomed)
        assert (resp.status, (await resp.json())["reason"]) == (422, "TODO_NOT_FOUND")
    store.close()


# --------------------------------------------------------------------------- HTTP over the wire


async def test_idempotent_create_answers_byte_identically_and_writes_one_row(
    http: aiohttp.ClientSession,
) -> None:
    who = subject()
    idem = key()
    body = {"title": "买牛奶", "dueAt": "2026-11-30T21:00:00+08:00", "priority": 2}
    first = await post(http, "/todos", body, who, idem)
    second = await post(http, "/todos", body, who, idem)
    assert first[0] == second[0] == 201
    assert first[1] == second[1]
    todo = json.loads(first[1])
    assert todo["id"].startswith("t_") and len(todo["id"]) == 14
    assert todo["version"] == 1 and todo["status"] == "open" and todo["owner"] == who["X-Countersign-Subject"]
    assert await todos(http, who) == [todo]

    assert await by_key(http, idem) == (201, todo)

    status, raw = await post(http, "/todos", {**body, "title": "别的"}, who, idem)
    assert status == 422 and json.loads(raw)["reason"] == "IDEMPOTENCY_KEY_REUSED"
    status, raw = await post(http, "/todos", body, who)
    assert status == 400 and json.loads(raw)["reason"] == "IDEMPOTENCY_KEY_MISSING"
    status, raw = await post(http, "/todos", {"dueAt": "x"}, who, key())
    assert status == 400 and json.loads(raw)["reason"] == "TODO_INVALID"
    assert len(await todos(http, who)) == 1


async def test_lookup_and_fence(http: aiohttp.ClientSession) -> None:
    who = subject()
    idem = key()
    assert await by_key(http, idem) == (404, {"reason": "KEY_NOT_FOUND"})

    async with http.post(f"/todos/by-key/{idem}/fence") as resp:
        assert resp.status == 410
        assert await resp.json() == {"reason": "KEY_FENCED", "fenced": True}
    async with http.post(f"/todos/by-key/{idem}/fence") as resp:
        assert resp.status == 410
    assert await by_key(http, idem) == (404, {"reason": "KEY_FENCED", "fenced": True})

    status, raw = await post(http, "/todos", {"title": "too late"}, who, idem)
    assert status == 409 and json.loads(raw)["reason"] == "KEY_FENCED"
    assert await todos(http, who) == []

    applied = key()
    status, raw = await post(http, "/todos", {"title": "in time"}, who, applied)
    async with http.post(f"/todos/by-key/{applied}/fence") as resp:
        assert resp.status == 201
        assert await resp.read() == raw
    assert len(await todos(http, who)) == 1


async def test_status_change_version_conflict_and_delete(http: aiohttp.ClientSession) -> None:
    who = subject()
    _, raw = await post(http, "/todos", {"title": "写测试"}, who, key())
    todo_id = json.loads(raw)["id"]

    done = key()
    status, first = await post(http, f"/todos/{todo_id}/status", {"status": "done", "version": 1}, who, done)
    assert status == 200
    assert json.loads(first)["version"] == 2 and json.loads(first)["status"] == "done"
    assert await post(http, f"/todos/{todo_id}/status", {"status": "done", "version": 1}, who, done) == (
        200,
        first,
    )

    stale = key()
    status, raw = await post(http, f"/todos/{todo_id}/status", {"status": "open", "version": 1}, who, stale)
    assert status == 409
    assert json.loads(raw) == {"reason": "TODO_VERSION_CONFLICT", "message": "stale version 1, current 2"}
    assert await by_key(http, stale) == (409, json.loads(raw))
    assert [t["status"] for t in await todos(http, who, "done")] == ["done"]
    assert await todos(http, who, "open") == []

    status, raw = await post(http, "/todos/t_nope/status", {"status": "done", "version": 1}, who, key())
    assert status == 404 and json.loads(raw)["reason"] == "TODO_NOT_FOUND"

    gone = key()
    async with http.delete(f"/todos/{todo_id}", headers={**who, "Idempotency-Key": gone}) as resp:
        assert resp.status == 200
        assert await resp.json() == {"id": todo_id, "deleted": True, "version": 3}
    async with http.delete(f"/todos/{todo_id}", headers={**who, "Idempotency-Key": gone}) as resp:
        assert resp.status == 200  # replayed, not a 404
    async with http.delete(f"/todos/{todo_id}", headers={**who, "Idempotency-Key": key()}) as resp:
        assert resp.status == 404
    assert await todos(http, who) == []


async def test_hang_after_commit_loses_the_answer_but_not_the_write(http: aiohttp.ClientSession) -> None:
    who = subject()
    idem = key()
    fault = {"path": "/todos", "method": "POST", "mode": "hang_after_commit", "seconds": 2.0}
    async with http.post("/_test/faults", json=fault) as resp:
        assert resp.status == 200
    with pytest.raises(TimeoutError):
        async with http.post(
            "/todos",
            json={"title": "lost answer"},
            headers={**who, "Idempotency-Key": idem},
            timeout=aiohttp.ClientTimeout(total=0.5),
        ) as resp:
            await resp.read()
    # The server keeps serving while that request hangs, and the write had committed.
    async with http.get("/healthz") as resp:
        assert await resp.json() == {"ok": True}
    status, todo = await by_key(http, idem)
    assert status == 201 and todo["title"] == "lost answer"
    assert await todos(http, who) == [todo]
    # The retry with the same key gets the stored answer; the fault was used up.
    assert await post(http, "/todos", {"title": "lost answer"}, who, idem) == (
        201,
        json.dumps(todo, ensure_ascii=False, separators=(",", ":")).encode(),
    )


async def test_hang_before_commit_and_injected_status(http: aiohttp.ClientSession) -> None:
    who = subject()
    idem = key()
    async with http.post("/_test/faults", json={"path": "/todos", "mode": "status", "status": 503}) as resp:
        assert resp.status == 200
    status, raw = await post(http, "/todos", {"title": "x"}, who, idem)
    assert status == 503 and json.loads(raw)["reason"] == "INJECTED"
    assert await todos(http, who) == []
    assert await by_key(http, idem) == (404, {"reason": "KEY_NOT_FOUND"})

    slow = {"path": "/todos", "method": "POST", "mode": "hang_before_commit", "seconds": 2.0}
    async with http.post("/_test/faults", json=slow) as resp:
        assert resp.status == 200
    with pytest.raises(TimeoutError):
        await http.post(
            "/todos",
            json={"title": "x"},
            headers={**who, "Idempotency-Key": idem},
            timeout=aiohttp.ClientTimeout(total=0.5),
        )
    assert await by_key(http, idem) == (404, {"reason": "KEY_NOT_FOUND"})  # not yet committed
    status, _ = await post(http, "/todos", {"title": "x"}, who, idem)
    assert status == 201


async def test_request_log_records_what_reached_the_service(http: aiohttp.ClientSession) -> None:
    async with http.delete("/_test/log") as resp:
        assert resp.status == 200
    idem = key()
    headers = {
        "X-Countersign-Subject": "alice",
        "X-Countersign-Action": "act_1",
        "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        "User-Agent": "not-recorded",
    }
    await post(http, "/todos", {"title": "logged"}, headers, idem)
    await http.get("/healthz")
    async with http.get("/_test/log") as resp:
        entries = (await resp.json())["requests"]
    assert len(entries) == 1
    entry = entries[0]
    assert entry["method"] == "POST" and entry["path"] == "/todos"
    assert entry["idempotency_key"] == idem
    assert entry["body"] == {"title": "logged"}
    assert entry["headers"] == {
        "x-countersign-subject": "alice",
        "x-countersign-action": "act_1",
        "traceparent": headers["traceparent"],
        "idempotency-key": idem,
    }
    assert isinstance(entry["seq"], int) and isinstance(entry["at"], float)


# --------------------------------------------------------------------------- gRPC ToolBackendService


def error_reason(err: grpc.aio.AioRpcError) -> str:
    status = rpc_status.from_call(err)  # type: ignore[arg-type]
    assert status is not None
    info = error_details_pb2.ErrorInfo()
    assert status.details[0].Unpack(info)
    assert info.domain == "todo.example"
    return str(info.reason)


async def test_grpc_execute_twice_with_same_key_writes_one_row(service: Service, http: aiohttp.ClientSession) -> None:
    who = subject()
    owner = who["X-Countersign-Subject"]
    idem = key()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{service.grpc_port}") as channel:
        stub = backend_pb2_grpc.ToolBackendServiceStub(channel)  # type: ignore[no-untyped-call]
        md = (("idempotency-key", idem), ("x-countersign-subject", owner))
        request = backend_pb2.ExecuteRequest(
            tool_name="create_todo", arguments_json=json.dumps({"title": "经 gRPC 创建"})
        )
        first = await stub.Execute(request, metadata=md)
        second = await stub.Execute(request, metadata=md)
        assert first == second
        assert first.resource_id.startswith("t_") and first.resource_version == "1"
        rows = await todos(http, who)
        assert [t["id"] for t in rows] == [first.resource_id]

        found = await stub.Lookup(backend_pb2.LookupRequest(tool_name="create_todo", idempotency_key=idem))
        assert found.result == backend_pb2.LOOKUP_RESULT_APPLIED
        assert (found.resource_id, found.result_json) == (first.resource_id, first.result_json)
        assert await by_key(http, idem) == (201, json.loads(first.result_json))  # same store as HTTP

        absent = key()
        probe = await stub.Lookup(backend_pb2.LookupRequest(tool_name="create_todo", idempotency_key=absent))
        assert probe.result == backend_pb2.LOOKUP_RESULT_ABSENT_UNFENCED
        fenced = await stub.Lookup(
            backend_pb2.LookupRequest(tool_name="create_todo", idempotency_key=absent, fence=True)
        )
        assert fenced.result == backend_pb2.LOOKUP_RESULT_ABSENT_FENCED
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.Execute(request, metadata=(("idempotency-key", absent), ("x-countersign-subject", owner)))
        assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert (refused.value.details() or "").startswith("KEY_FENCED: ")
        assert error_reason(refused.value) == "KEY_FENCED"

        stale = backend_pb2.ExecuteRequest(
            tool_name="set_todo_status",
            arguments_json=json.dumps({"id": first.resource_id, "status": "done", "version": 7}),
        )
        with pytest.raises(grpc.aio.AioRpcError) as conflict:
            await stub.Execute(stale, metadata=(("idempotency-key", key()),))
        assert conflict.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert error_reason(conflict.value) == "TODO_VERSION_CONFLICT"

        with pytest.raises(grpc.aio.AioRpcError) as missing:
            await stub.Prepare(
                backend_pb2.PrepareRequest(tool_name="set_todo_status", arguments_json='{"id": "t_gone"}')
            )
        assert missing.value.code() == grpc.StatusCode.NOT_FOUND
        assert error_reason(missing.value) == "TODO_NOT_FOUND"

        undo = await stub.Compensate(
            backend_pb2.ToolBackendServiceCompensateRequest(
                tool_name="create_todo", resource_id=first.resource_id, arguments_json="{}"
            )
        )
        assert json.loads(undo.result_json)["deleted"] is True
        assert await todos(http, who) == []

    async with http.get("/_test/log") as resp:
        entries = (await resp.json())["requests"]
    executes = [e for e in entries if e["method"] == "GRPC" and e["idempotency_key"] == idem]
    assert [e["path"] for e in executes] == ["/countersign.v1.ToolBackendService/Execute"] * 2
    assert executes[0]["headers"]["x-countersign-subject"] == owner
