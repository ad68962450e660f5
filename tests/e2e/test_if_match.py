"""A prepared resource version travels with the write (docs/design.md §8, issue 11 item 4).

The example todo service answers prepare with the todo's version; the card holds it; at Confirm the
sidecar sends it as ``If-Match`` (HTTP) or metadata ``if-match`` (gRPC). A todo changed after the card
was shown is not written: ``412`` / ``ABORTED`` is FAILED ``RESOURCE_VERSION_CONFLICT``, and the todo is
as the other change left it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from countersign.testing import processes
from countersign.testing.calls import ctx
from countersign.testing.stack import Stack, Todo
from countersign.v1 import common_pb2, gateway_pb2


def _todo(stack: Stack, title: str) -> dict[str, object]:
    todo: dict[str, object] = stack.todo.post("/todos", {"title": title}, uuid.uuid4().hex)
    assert todo["version"] == 1
    return todo


def _card(stack: Stack, tool: str, args: dict[str, object], address: str | None = None) -> gateway_pb2.ConfirmationCard:
    response = stack.stub(address).Invoke(
        gateway_pb2.InvokeRequest(
            context=ctx(request_id=uuid.uuid4().hex), tool_name=tool, arguments_json=json.dumps(args)
        )
    )
    assert response.WhichOneof("outcome") == "confirmation", response
    return response.confirmation


def _confirm(stack: Stack, card: gateway_pb2.ConfirmationCard, address: str | None = None) -> common_pb2.Action:
    return stack.stub(address).Confirm(gateway_pb2.ConfirmRequest(context=ctx(), token=card.token)).action


def _change_behind_the_cards_back(stack: Stack, todo_id: object) -> None:
    changed = stack.todo.post(f"/todos/{todo_id}/status", {"status": "done", "version": 1}, uuid.uuid4().hex)
    assert changed["version"] == 2


def test_a_todo_changed_after_the_delete_card_was_shown_is_not_deleted(stack: Stack) -> None:
    todo = _todo(stack, "别删我")
    card = _card(stack, "delete_todo", {"id": todo["id"]})
    _change_behind_the_cards_back(stack, todo["id"])
    action = _confirm(stack, card)
    assert action.state == common_pb2.ACTION_STATE_FAILED
    assert (action.error.reason, action.error.retryable) == ("RESOURCE_VERSION_CONFLICT", False)
    assert json.loads(action.receipt.evidence_json)["status"] == "412"
    assert stack.todo.get(f"/todos/{todo['id']}")["version"] == 2, "the todo is still there, as changed"
    [sent] = stack.todo.writes(card.action_id)
    assert (sent["method"], sent["headers"]["if-match"]) == ("DELETE", '"1"')


def test_an_unchanged_todo_is_deleted_with_the_version_the_card_showed(stack: Stack) -> None:
    todo = _todo(stack, "删我")
    card = _card(stack, "delete_todo", {"id": todo["id"]})
    action = _confirm(stack, card)
    assert action.state == common_pb2.ACTION_STATE_SUCCEEDED
    assert stack.todo.get(f"/todos/{todo['id']}")["reason"] == "TODO_NOT_FOUND"
    assert [w["headers"]["if-match"] for w in stack.todo.writes(card.action_id)] == ['"1"']


def test_a_status_card_carries_its_version_too(stack: Stack) -> None:
    todo = _todo(stack, "改状态")
    card = _card(stack, "set_todo_status", {"id": todo["id"], "status": "done"})
    _change_behind_the_cards_back(stack, todo["id"])
    action = _confirm(stack, card)
    assert (action.state, action.error.reason) == (common_pb2.ACTION_STATE_FAILED, "RESOURCE_VERSION_CONFLICT")
    assert stack.todo.get(f"/todos/{todo['id']}")["version"] == 2


def test_a_create_sends_no_if_match(stack: Stack) -> None:
    card = stack.card(request_id=uuid.uuid4().hex, title="新的")
    assert _confirm(stack, card).state == common_pb2.ACTION_STATE_SUCCEEDED
    assert [w["headers"].get("if-match") for w in stack.todo.writes(card.action_id)] == [None]


@pytest.fixture
def over_grpc(stack: Stack) -> Iterator[tuple[str, Todo]]:
    """A sidecar whose delete_todo goes to the same store through the gRPC ToolBackendService."""
    backend = processes.start_todo_service(stack.work, grpc=True)
    try:
        text = stack.registry.read_text().replace(stack.todo.url, backend.info["url"])
        start = text.index("  - name: delete_todo")
        block = text[start:]
        adapter = block.index("    # prepare answers")
        receipt = block.index("    receipt:")
        target = f"127.0.0.1:{backend.info['grpc_port']}"
        block = (
            block[:adapter]
            + f'    adapter: {{kind: grpc, target: "{target}", prepare: true, lookup: true}}\n'
            + block[receipt:]
        )
        path: Path = stack.work / f"grpc-{uuid.uuid4().hex}.yaml"
        path.write_text(text[:start] + block)
        sidecar = stack.start_sidecar(registry=path)
        try:
            yield str(sidecar.info["grpc"]), Todo(backend)
        finally:
            sidecar.stop()
    finally:
        backend.stop()


def test_over_grpc_the_version_travels_as_if_match_metadata_and_aborted_is_a_conflict(
    stack: Stack, over_grpc: tuple[str, Todo]
) -> None:
    address, backend = over_grpc
    for changed in (True, False):
        todo: dict[str, object] = backend.post("/todos", {"title": "经由 gRPC"}, uuid.uuid4().hex)
        card = _card(stack, "delete_todo", {"id": todo["id"]}, address)
        if changed:
            assert (
                backend.post(f"/todos/{todo['id']}/status", {"status": "done", "version": 1}, uuid.uuid4().hex)[
                    "version"
                ]
                == 2
            )
        action = _confirm(stack, card, address)
        executes = [e for e in backend.requests(card.action_id) if e["path"].endswith("/Execute")]
        assert [e["headers"]["if-match"] for e in executes] == ["1"]
        if changed:
            assert (action.state, action.error.reason) == (common_pb2.ACTION_STATE_FAILED, "RESOURCE_VERSION_CONFLICT")
            assert backend.get(f"/todos/{todo['id']}")["version"] == 2
        else:
            assert action.state == common_pb2.ACTION_STATE_SUCCEEDED
            assert backend.get(f"/todos/{todo['id']}")["reason"] == "TODO_NOT_FOUND"
