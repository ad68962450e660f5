"""No argument can change a URL's path shape (docs/design.md §8, issue 11 item 3).

A value bound to a path segment of an execute, prepare or lookup URL that is empty, ".", "..", or holds
"/" or "\\" (also percent-encoded) is refused at Invoke, INVALID_ARGUMENT ARGS_INVALID with a field
violation naming the argument: no card is issued and the downstream sees nothing. A compensation whose
arguments come from a downstream's receipt is held to the same rule.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import grpc
import pytest

from countersign.testing.calls import bad_request, ctx, error_info
from countersign.testing.downstreams import Raw, answer, registry_doc, sidecar_over
from countersign.testing.stack import Stack
from countersign.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc

UNSAFE = [
    "",
    ".",
    "..",
    "a/b",
    "../status",
    "%2e%2e",
    "%2E",
    "..%2F",
    "a%2fb",
    "..\\",
    "a\\b",
    "%252e%252e",
    "x" * 1100,
]


@pytest.mark.parametrize("value", UNSAFE)
@pytest.mark.parametrize("tool", ["set_todo_status", "delete_todo"])
def test_an_unsafe_path_value_is_refused_at_invoke_and_reaches_nobody(stack: Stack, tool: str, value: str) -> None:
    before = len(stack.todo.requests())
    args = {"id": value, "status": "done"} if tool == "set_todo_status" else {"id": value}
    with pytest.raises(grpc.RpcError) as info:
        stack.stub().Invoke(
            gateway_pb2.InvokeRequest(
                context=ctx(request_id=uuid.uuid4().hex), tool_name=tool, arguments_json=json.dumps(args)
            )
        )
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error_info(info.value).reason == "ARGS_INVALID"
    fields = [v.field for v in bad_request(info.value).field_violations]
    assert "id" in fields, fields
    assert len(stack.todo.requests()) == before, "not even prepare was asked"


@pytest.mark.parametrize("value", ["t_a..b", "...", ".x", "a b", "a?b#c", "买", "%41"])
def test_any_other_value_passes_policy_and_reaches_prepare_encoded(stack: Stack, value: str) -> None:
    with pytest.raises(grpc.RpcError) as info:  # the service has no such todo: its prepare refuses
        stack.stub().Invoke(
            gateway_pb2.InvokeRequest(
                context=ctx(request_id=uuid.uuid4().hex),
                tool_name="delete_todo",
                arguments_json=json.dumps({"id": value}),
            )
        )
    assert (info.value.code(), error_info(info.value).reason) == (grpc.StatusCode.FAILED_PRECONDITION, "TODO_NOT_FOUND")
    assert stack.todo.requests(path="/todos/prepare")[-1]["body"]["arguments"] == {"id": value}


async def test_a_receipt_id_of_dot_dot_is_never_compensated(tmp_path: Path) -> None:
    """The downstream answered a create with id "..": the inverse would be DELETE /things/.. (that is,
    DELETE /things or DELETE /). Compensate refuses; nothing is sent."""
    raw = await Raw(lambda s: answer(201, {"id": "..", "version": 1})).start()
    try:
        async with (
            sidecar_over(tmp_path, registry_doc(raw.url)) as sidecar,
            grpc.aio.insecure_channel(sidecar.address) as channel,
        ):
            stub = gateway_pb2_grpc.ToolGatewayServiceStub(channel)
            card = (
                await stub.Invoke(
                    gateway_pb2.InvokeRequest(
                        context=ctx(request_id=uuid.uuid4().hex),
                        tool_name="create_thing",
                        arguments_json='{"title": "t"}',
                    )
                )
            ).confirmation
            done = (await stub.Confirm(gateway_pb2.ConfirmRequest(context=ctx(), token=card.token))).action
            assert (done.state, done.receipt.resource_id) == (common_pb2.ACTION_STATE_SUCCEEDED, "..")
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await stub.Compensate(gateway_pb2.CompensateRequest(context=ctx(), action_id=card.action_id))
            assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
            assert error_info(info.value).reason == "NOT_COMPENSABLE"
            got = (await stub.GetAction(gateway_pb2.GetActionRequest(context=ctx(), action_id=card.action_id))).action
            assert got.state == common_pb2.ACTION_STATE_SUCCEEDED, "the original stays as it was"
    finally:
        await raw.stop()
    assert [(s.method, s.target) for s in raw.seen] == [("POST", "/things")], "no DELETE reached the downstream"


@pytest.mark.parametrize(
    "url",
    [
        "http://{host}/things",
        "http://api.{region}.example/things",
        "http://127.0.0.1:{port}/things",
        "https://{title}@example/things",
    ],
)
def test_no_argument_may_pick_the_host(url: str) -> None:
    from countersign import registry
    from countersign.errors import RegistryError

    doc = registry_doc("http://127.0.0.1:9")
    schema = {
        "type": "object",
        "additionalProperties": False,
        "properties": {k: {"type": "string"} for k in ("host", "region", "port", "title")},
    }
    doc["tools"][0] |= {"schema": schema, "adapter": {"kind": "http", "execute": {"url": url}}}
    with pytest.raises(RegistryError) as info:
        registry.build(doc, "hosts.yaml")
    assert str(info.value) == (
        "hosts.yaml: tool 'create_thing': adapter-valid: adapter.execute.url may not take its "
        "host or port from a template"
    )
