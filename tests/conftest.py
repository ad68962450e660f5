"""Fixtures: real redis-server, the real example todo service, the real sidecar process, real gRPC."""

from __future__ import annotations

import json
import shutil
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from countersign.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc  # noqa: E402
from examples import harness  # noqa: E402


def pytest_configure(config: pytest.Config) -> None:
    if shutil.which("redis-server") is None:
        raise pytest.UsageError("redis-server is not installed (apt-get install redis-server); `make test` does it")


def ctx(**overrides: Any) -> common_pb2.CallContext:
    base = dict(tenant_id="t1", actor_id="alice", subject_id="alice", session_id="s1", request_id="r1",
                role="user", locale="zh-CN")
    base.update(overrides)
    return common_pb2.CallContext(**base)


def error_info(err: grpc.RpcError) -> error_details_pb2.ErrorInfo:
    """The ErrorInfo of a failed call (asserts there is one)."""
    status = rpc_status.from_call(err)  # type: ignore[arg-type]
    assert status is not None, f"no rich status in {err}"
    for detail in status.details:
        info = error_details_pb2.ErrorInfo()
        if detail.Unpack(info):
            return info
    raise AssertionError(f"no ErrorInfo in {status}")


def bad_request(err: grpc.RpcError) -> error_details_pb2.BadRequest:
    status = rpc_status.from_call(err)  # type: ignore[arg-type]
    assert status is not None
    for detail in status.details:
        bad = error_details_pb2.BadRequest()
        if detail.Unpack(bad):
            return bad
    raise AssertionError(f"no BadRequest in {status}")


class Todo:
    """The example downstream, seen from the test: what reached it, and faults to inject."""

    def __init__(self, proc: harness.Proc) -> None:
        self.proc, self.url = proc, proc.info["url"]

    def _call(self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json", **(headers or {})})
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            raw = exc.read()
        return json.loads(raw) if raw else None

    def requests(self, key: str | None = None, path: str | None = None) -> list[dict[str, Any]]:
        entries: list[dict[str, Any]] = self._call("GET", "/_test/log")["requests"]
        return [e for e in entries
                if (key is None or e["idempotency_key"] == key) and (path is None or e["path"] == path)]

    def writes(self, key: str) -> list[dict[str, Any]]:
        """Requests carrying this idempotency key that were not lookups or fences."""
        return [e for e in self.requests(key) if "/by-key/" not in e["path"]]

    def fault(self, **fault: Any) -> None:
        self._call("POST", "/_test/faults", fault)

    def clear_faults(self) -> None:
        self._call("DELETE", "/_test/faults")

    def get(self, path: str) -> Any:
        return self._call("GET", path)

    def post(self, path: str, body: Any, key: str) -> Any:
        return self._call("POST", path, body, {"Idempotency-Key": key})


@dataclass
class Stack:
    work: Path
    redis: harness.Proc
    todo: Todo
    registry: Path
    keys: Path
    sidecar: harness.Proc

    @property
    def address(self) -> str:
        return str(self.sidecar.info["grpc"])

    def stub(self, address: str | None = None) -> gateway_pb2_grpc.ToolGatewayServiceStub:
        return gateway_pb2_grpc.ToolGatewayServiceStub(grpc.insecure_channel(address or self.address))

    def start_sidecar(self, *, registry: Path | None = None, flags: list[str] | None = None,
                      redis_url: str | None = None) -> harness.Proc:
        return harness.start_sidecar(self.work, registry or self.registry,
                                     redis_url=self.redis.info["url"] if redis_url is None else redis_url,
                                     keys=self.keys, flags=["--log-level", "warning", *(flags or [])])

    def card(self, stub: gateway_pb2_grpc.ToolGatewayServiceStub | None = None, title: str = "买牛奶",
             **context: Any) -> gateway_pb2.ConfirmationCard:
        response = (stub or self.stub()).Invoke(gateway_pb2.InvokeRequest(
            context=ctx(**context), tool_name="create_todo", arguments_json=json.dumps({"title": title})))
        assert response.WhichOneof("outcome") == "confirmation", response
        return response.confirmation


def _stack(work: Path, flags: list[str] | None = None) -> Iterator[Stack]:
    redis = harness.start_redis(work)
    todo = harness.start_todo_service(work)
    registry = harness.write_registry(work, todo.info["url"])
    keys = harness.write_keys(work)
    sidecar = None
    try:
        sidecar = harness.start_sidecar(work, registry, redis_url=redis.info["url"], keys=keys,
                                        flags=["--log-level", "warning", *(flags or [])])
        yield Stack(work, redis, Todo(todo), registry, keys, sidecar)
    finally:
        for proc in (sidecar, todo, redis):
            if proc is not None:
                proc.stop()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """Redis, the todo service and one sidecar, shared by the tests of a module."""
    yield from _stack(tmp_path_factory.mktemp("stack"))


@pytest.fixture
def fresh_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A stack of its own, for tests that break things (kill, stop Redis)."""
    yield from _stack(tmp_path_factory.mktemp("fresh"), ["--lease", "3s", "--downstream-deadline", "1s"])


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    return tmp_path
