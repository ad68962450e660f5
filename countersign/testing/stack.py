"""One test stack: redis-server, the example todo service and one sidecar, each a real process; and what a test
sees of the downstream (what reached it, faults to inject)."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import yaml

from countersign.testing import processes
from countersign.testing.calls import ctx
from countersign.v1 import gateway_pb2, gateway_pb2_grpc


class Todo:
    """The example downstream, seen from the test: what reached it, and faults to inject."""

    def __init__(self, proc: processes.Proc, ca: Path | None = None) -> None:
        self.proc, self.url = proc, proc.info["url"]
        # a todo service over TLS: the test trusts its CA (and presents a client certificate when it needs one)
        self.ssl = ssl.create_default_context(cafile=str(ca)) if ca is not None else None

    def present(self, cert: Path, key: Path) -> None:
        """Present this client certificate to a todo service that requires one."""
        assert self.ssl is not None
        self.ssl.load_cert_chain(str(cert), str(key))

    def _call(self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(
            self.url + path, data=data, method=method, headers={"Content-Type": "application/json", **(headers or {})}
        )
        try:
            with urllib.request.urlopen(req, timeout=10, context=self.ssl) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            raw = exc.read()
        return json.loads(raw) if raw else None

    def requests(self, key: str | None = None, path: str | None = None) -> list[dict[str, Any]]:
        entries: list[dict[str, Any]] = self._call("GET", "/_test/log")["requests"]
        return [
            e for e in entries if (key is None or e["idempotency_key"] == key) and (path is None or e["path"] == path)
        ]

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
    redis: processes.Proc
    todo: Todo
    registry: Path
    keys: Path
    sidecar: processes.Proc

    @property
    def address(self) -> str:
        return str(self.sidecar.info["grpc"])

    def stub(self, address: str | None = None) -> gateway_pb2_grpc.ToolGatewayServiceStub:
        channel = grpc.insecure_channel(address or self.address)
        return gateway_pb2_grpc.ToolGatewayServiceStub(channel)  # type: ignore[no-untyped-call]

    def start_sidecar(
        self, *, registry: Path | None = None, flags: list[str] | None = None, redis_url: str | None = None
    ) -> processes.Proc:
        return processes.start_sidecar(
            self.work,
            registry or self.registry,
            redis_url=self.redis.info["url"] if redis_url is None else redis_url,
            keys=self.keys,
            flags=["--log-level", "warning", *(flags or [])],
        )

    def card(
        self, stub: gateway_pb2_grpc.ToolGatewayServiceStub | None = None, title: str = "买牛奶", **context: Any
    ) -> gateway_pb2.ConfirmationCard:
        response: gateway_pb2.InvokeResponse = (stub or self.stub()).Invoke(
            gateway_pb2.InvokeRequest(
                context=ctx(**context), tool_name="create_todo", arguments_json=json.dumps({"title": title})
            )
        )
        assert response.WhichOneof("outcome") == "confirmation", response
        return response.confirmation


def start_stack(work: Path, flags: list[str] | None = None) -> Iterator[Stack]:
    redis = processes.start_redis(work)
    todo = processes.start_todo_service(work)
    registry = processes.write_registry(work, todo.info["url"])
    keys = processes.write_keys(work)
    sidecar = None
    try:
        sidecar = processes.start_sidecar(
            work, registry, redis_url=redis.info["url"], keys=keys, flags=["--log-level", "warning", *(flags or [])]
        )
        yield Stack(work, redis, Todo(todo), registry, keys, sidecar)
    finally:
        for proc in (sidecar, todo, redis):
            if proc is not None:
                proc.stop()


def quiet(stack: Stack) -> Stack:
    """A stack of its own with its default sidecar stopped: no other sidecar's background reconciler (with
    another registry) may resolve this test's actions first. Every sidecar on one Redis must run one registry."""
    stack.sidecar.stop()
    return stack


def registry_with(stack: Stack, *, execute_url: str | None = None, fence: bool = True, lookup: bool = True) -> Path:
    """The stack's registry with create_todo's execute sent elsewhere, or its fence or lookup removed."""
    doc = yaml.safe_load(stack.registry.read_text())
    tool = next(t for t in doc["tools"] if t["name"] == "create_todo")
    if execute_url:
        tool["adapter"]["execute"]["url"] = execute_url + "/todos"
    if not fence:
        tool["adapter"].pop("fence")
    if not lookup:
        tool["adapter"].pop("lookup")
    path = stack.work / f"reconcile-{uuid.uuid4().hex}.yaml"
    path.write_text(yaml.safe_dump(doc, allow_unicode=True))
    return path


def changed_registry(stack: Stack, change: str) -> Path:
    """The example registry with todo.create planned (tool removed), or its risk raised under a new version."""
    doc = yaml.safe_load(stack.registry.read_text())
    cap = next(c for c in doc["capabilities"] if c["id"] == "todo.create")
    tool = next(t for t in doc["tools"] if t["name"] == "create_todo")
    if change == "planned":
        cap["status"] = "planned"
        cap["guidance"] = {"en": "Creating todos is paused."}
        doc["tools"].remove(tool)
    else:
        doc["policy_version"] = "2026-11-30.1"
        cap["risk"] = tool["risk"] = "high"
    path = stack.work / f"changed-{uuid.uuid4().hex}.yaml"
    path.write_text(yaml.safe_dump(doc, allow_unicode=True))
    return path
