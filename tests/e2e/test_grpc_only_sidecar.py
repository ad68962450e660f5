"""A sidecar whose registry names only gRPC backends (and no approval issuer) serves without loading the HTTP
client (issue 17: aiohttp is ~12 MB of an idle pod and ~0.1 s of its start, app.build builds only the adapters the
registry names). Real processes: the example todo service's gRPC ToolBackendService behind every tool, redis-server,
the sidecar; what the process loaded is read from its /proc/<pid>/maps (aiohttp's C HTTP parser)."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

from countersign.testing import processes
from countersign.testing.calls import ctx
from countersign.testing.stack import Stack, Todo
from countersign.v1 import common_pb2, gateway_pb2


def grpc_registry(text: str, target: str) -> str:
    """The example registry with every tool behind the gRPC backend, with the calls its HTTP adapter declared."""

    def swap(m: re.Match[str]) -> str:
        block = m.group(0)
        calls = "".join(f", {call}: true" for call in ("prepare", "lookup", "fence") if f"{call}:" in block)
        return f'adapter: {{kind: grpc, target: "{target}"{calls}}}\n'

    return re.sub(r"adapter: \{kind: http,.*?\}\}\n", swap, text, flags=re.S)


def loaded_aiohttp(pid: int) -> bool:
    return "aiohttp/_http_parser" in Path(f"/proc/{pid}/maps").read_text()


def test_a_sidecar_with_only_grpc_backends_writes_without_loading_the_http_client(stack: Stack) -> None:
    backend = processes.start_todo_service(stack.work, grpc=True)
    try:
        path = stack.work / f"grpc-only-{uuid.uuid4().hex}.yaml"
        target = f"127.0.0.1:{backend.info['grpc_port']}"
        path.write_text(grpc_registry(processes.EXAMPLE_REGISTRY.read_text(encoding="utf-8"), target))
        sidecar = stack.start_sidecar(registry=path)
        try:
            address = str(sidecar.info["grpc"])
            invoked = stack.stub(address).Invoke(
                gateway_pb2.InvokeRequest(
                    context=ctx(request_id=uuid.uuid4().hex),
                    tool_name="create_todo",
                    arguments_json=json.dumps({"title": "只走 gRPC"}),
                )
            )
            card = invoked.confirmation
            action = stack.stub(address).Confirm(gateway_pb2.ConfirmRequest(context=ctx(), token=card.token)).action
            assert action.state == common_pb2.ACTION_STATE_SUCCEEDED, action
            todo = Todo(backend).get(f"/todos/{action.receipt.resource_id}")
            assert todo["title"] == "只走 gRPC"
            assert not loaded_aiohttp(sidecar.pid)
        finally:
            sidecar.stop()
    finally:
        backend.stop()
    # the stack's own sidecar, whose registry names HTTP tools, has it: the probe sees it when it is there
    assert loaded_aiohttp(stack.sidecar.pid)
