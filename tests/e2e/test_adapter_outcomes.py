"""The HTTP adapter's outcomes through the sidecar, against real downstreams: what the agent and the user see
(the adapter on its own: tests/unit/test_adapters_http.py)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from countersign.testing.downstreams import Raw, answer, registry_doc


async def _confirm(sidecar: Any, tool: str = "create_thing", args: dict[str, Any] | None = None) -> Any:
    import uuid

    import grpc

    from countersign.testing.calls import ctx
    from countersign.v1 import gateway_pb2, gateway_pb2_grpc

    async with grpc.aio.insecure_channel(sidecar.address) as channel:
        stub = gateway_pb2_grpc.ToolGatewayServiceStub(channel)
        invoked = await stub.Invoke(
            gateway_pb2.InvokeRequest(
                context=ctx(request_id=uuid.uuid4().hex),
                tool_name=tool,
                arguments_json=json.dumps(args or {"title": "t"}),
            )
        )
        card = invoked.confirmation
        action = (await stub.Confirm(gateway_pb2.ConfirmRequest(context=ctx(), token=card.token))).action
        got = (await stub.GetAction(gateway_pb2.GetActionRequest(context=ctx(), action_id=card.action_id))).action
        return card, action, got


async def test_a_201_in_two_segments_confirms_with_its_id_and_an_empty_201_is_unknown(raw: Raw, tmp_path: Any) -> None:
    from countersign.testing.downstreams import sidecar_over
    from countersign.v1 import common_pb2

    async with sidecar_over(tmp_path, registry_doc(raw.url)) as sidecar:
        raw.script = lambda s: answer(201, {"id": "t_7", "version": 1}, split=(3,), pause=0.1)
        _, action, _ = await _confirm(sidecar)
        assert action.state == common_pb2.ACTION_STATE_SUCCEEDED
        assert (action.receipt.resource_id, action.receipt.resource_version) == ("t_7", "1")
        raw.script = lambda s: answer(201, b"")
        card, action, got = await _confirm(sidecar)
        assert (action.state, action.error.reason) == (common_pb2.ACTION_STATE_UNKNOWN, "RECEIPT_INVALID")
        assert not action.HasField("receipt")
        assert got.state == common_pb2.ACTION_STATE_UNKNOWN
        # reconciliation asks by key; a lookup answer without the receipt fields is still no verdict
        raw.script = lambda s: answer(200, {"title": "t"})
        again = await sidecar.parts.reconciler.reconcile(card.action_id)
        assert again.state == common_pb2.ACTION_STATE_UNKNOWN
        await asyncio.sleep(1.1)  # the reconciler's backoff
        raw.script = lambda s: answer(200, {"id": "t_8", "version": 1}, split=(2, 9))
        settled = await sidecar.parts.reconciler.reconcile(card.action_id)
        assert (settled.state, settled.receipt.resource_id) == (common_pb2.ACTION_STATE_SUCCEEDED, "t_8")
        writes = [s for s in raw.seen if s.method == "POST" and s.target == "/things"]
        assert len(writes) == 2, "one POST per action, none re-sent"


async def test_a_lookup_that_never_yields_a_receipt_goes_to_review_not_failed(raw: Raw, tmp_path: Any) -> None:
    from countersign.testing.downstreams import sidecar_over
    from countersign.v1 import common_pb2

    async with sidecar_over(tmp_path, registry_doc(raw.url), reconcile_window=0.001) as sidecar:
        raw.script = lambda s: answer(201, b'{"id":')
        card, action, _ = await _confirm(sidecar)
        assert (action.state, action.error.reason) == (common_pb2.ACTION_STATE_UNKNOWN, "RECEIPT_INVALID")
        raw.script = lambda s: answer(302, b"", headers={"Location": "http://127.0.0.1:1/x"})
        first = await sidecar.parts.reconciler.reconcile(card.action_id)
        assert first.state == common_pb2.ACTION_STATE_UNKNOWN, "a redirect is never a verdict"
        await asyncio.sleep(1.1)  # past the backoff, and past the (tiny) window
        settled = await sidecar.parts.reconciler.reconcile(card.action_id)
        assert (settled.state, settled.error.reason) == (common_pb2.ACTION_STATE_NEEDS_MANUAL_REVIEW, "RECEIPT_INVALID")


async def test_a_redirected_write_is_unknown_and_the_other_host_sees_nothing(
    raw: Raw, elsewhere: tuple[str, list[str]], tmp_path: Any
) -> None:
    from countersign.testing.downstreams import sidecar_over
    from countersign.v1 import common_pb2

    there, seen = elsewhere
    async with sidecar_over(tmp_path, registry_doc(raw.url)) as sidecar:
        for status in (302, 307):
            raw.script = lambda s, status=status: answer(status, b"", headers={"Location": f"{there}/todos"})
            _, action, got = await _confirm(sidecar)
            assert (action.state, action.error.reason) == (common_pb2.ACTION_STATE_UNKNOWN, "DOWNSTREAM_REDIRECT")
            assert got.state == common_pb2.ACTION_STATE_UNKNOWN
    assert seen == []


async def test_a_large_answer_to_a_write_is_kept_as_its_hash(raw: Raw, tmp_path: Any) -> None:
    from countersign.path.receipts import EVIDENCE_BYTES
    from countersign.testing.downstreams import sidecar_over
    from countersign.v1 import common_pb2

    async with sidecar_over(tmp_path, registry_doc(raw.url)) as sidecar:
        raw.script = lambda s: answer(201, {"id": "t_big", "version": 1, "pad": "x" * 300_000}, split=(1000,))
        _, action, got = await _confirm(sidecar)
    assert (action.state, action.receipt.resource_id) == (common_pb2.ACTION_STATE_SUCCEEDED, "t_big")
    evidence = json.loads(action.receipt.evidence_json)
    assert (evidence["status"], len(evidence["evidence_sha256"])) == ("201", 64)
    assert evidence["evidence_bytes"] > 300_000
    assert len(action.receipt.evidence_json) < EVIDENCE_BYTES and got.receipt == action.receipt


@pytest.mark.parametrize(("max_message", "size"), [(64 << 10, 60_000), (1 << 20, (1 << 20) - 10)])
async def test_a_read_too_large_to_send_back_is_a_clear_failure(
    raw: Raw, tmp_path: Any, max_message: int, size: int
) -> None:
    import uuid

    import grpc

    from countersign.testing.calls import ctx, error_info
    from countersign.testing.downstreams import sidecar_over
    from countersign.v1 import gateway_pb2, gateway_pb2_grpc

    body = json.dumps({"items": "x" * (size - 13)})
    raw.script = lambda s: answer(200, body, split=(5000,))
    async with (
        sidecar_over(tmp_path, registry_doc(raw.url), max_message_bytes=max_message) as sidecar,
        grpc.aio.insecure_channel(sidecar.address, options=[("grpc.max_receive_message_length", 8 << 20)]) as channel,
    ):
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await gateway_pb2_grpc.ToolGatewayServiceStub(channel).Invoke(
                gateway_pb2.InvokeRequest(
                    context=ctx(request_id=uuid.uuid4().hex), tool_name="read_things", arguments_json="{}"
                )
            )
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION, info.value
    assert error_info(info.value).reason == "DOWNSTREAM_ANSWER_INVALID"


class _AnswersTwice:
    """A keep-alive HTTP/1.1 downstream that applies every write it reads and answers it, and answers its first
    write a second time a moment later (a buggy proxy, a retried handler): the extra answer lands on an idle pooled
    connection, where the next request, another owner's, would read it as its own."""

    def __init__(self, extra: tuple[int, dict[str, Any]]) -> None:
        self.extra, self.applied = extra, 0
        self.server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    @staticmethod
    def _head(status: int, body: bytes) -> bytes:
        return b"HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
            status,
            len(body),
            body,
        )

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").lower()
                length = next((ln.split(":")[1] for ln in head.split("\r\n") if ln.startswith("content-length:")), 0)
                await reader.readexactly(int(length))
                self.applied += 1
                writer.write(self._head(201, json.dumps({"id": f"thing-{self.applied}", "version": 1}).encode()))
                await writer.drain()
                if self.applied == 1:
                    await asyncio.sleep(0.2)
                    writer.write(self._head(self.extra[0], json.dumps(self.extra[1]).encode()))
                    await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@pytest.mark.parametrize(
    "extra",
    [(409, {"reason": "OUT_OF_STOCK", "message": "no"}), (201, {"id": "someone-elses-thing", "version": 9})],
    ids=["a-4xx", "another-receipt"],
)
async def test_an_answer_sent_twice_is_never_taken_for_the_next_callers_answer(
    tmp_path: Any, extra: tuple[int, dict[str, Any]]
) -> None:
    import uuid

    import grpc

    from countersign.testing.calls import ctx
    from countersign.testing.downstreams import sidecar_over
    from countersign.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc

    downstream = _AnswersTwice(extra)
    downstream.server = await asyncio.start_server(downstream._serve, "127.0.0.1", 0)
    bob = {"tenant_id": "t2", "actor_id": "bob", "subject_id": "bob"}
    try:
        async with (
            sidecar_over(tmp_path, registry_doc(downstream.url)) as sidecar,
            grpc.aio.insecure_channel(sidecar.address) as channel,
        ):
            stub = gateway_pb2_grpc.ToolGatewayServiceStub(channel)
            actions = []
            for who in ({}, bob):
                context = ctx(request_id=uuid.uuid4().hex, **who)
                args = json.dumps({"title": "t"})
                invoked = await stub.Invoke(
                    gateway_pb2.InvokeRequest(context=context, tool_name="create_thing", arguments_json=args)
                )
                confirmed = await stub.Confirm(
                    gateway_pb2.ConfirmRequest(context=context, token=invoked.confirmation.token)
                )
                actions.append(confirmed.action)
                await asyncio.sleep(0.5)  # the first write's second answer arrives meanwhile
    finally:
        downstream.server.close()
    # bob's write reached the downstream and was answered: his outcome is his, never alice's second answer (a 4xx
    # would make his applied write FAILED; a 2xx would hand him her receipt for a write that may never have landed)
    assert [(a.state, a.receipt.resource_id) for a in actions] == [
        (common_pb2.ACTION_STATE_SUCCEEDED, "thing-1"),
        (common_pb2.ACTION_STATE_SUCCEEDED, "thing-2"),
    ]
    assert downstream.applied == 2


@pytest.mark.parametrize(
    "prepared",
    [
        b'{"arguments": {"id": "a", "status": "s"}, "preview": {"title": "\\ud800", "target": "a", "impact": "s"}}',
        b'{"arguments": {"id": "a", "status": "\\ud800"}}',  # shown through the tool's preview template
    ],
    ids=["its-preview", "an-argument-the-preview-shows"],
)
async def test_a_prepare_answer_that_is_not_text_is_refused_with_a_reason_and_issues_no_card(
    raw: Raw, tmp_path: Any, prepared: bytes
) -> None:
    import uuid

    import grpc

    from countersign.testing.calls import ctx, error_info
    from countersign.testing.downstreams import sidecar_over
    from countersign.v1 import gateway_pb2, gateway_pb2_grpc

    # JSON may carry a lone surrogate (\ud800); a preview is a protobuf string, UTF-8 text: it was an INTERNAL
    shown = {"set_thing": {"preview": {"title": "Set", "target": "{id}", "impact": "to {status}"}}}
    raw.script = lambda s: answer(200, prepared)
    async with (
        sidecar_over(tmp_path, registry_doc(raw.url, **shown)) as sidecar,
        grpc.aio.insecure_channel(sidecar.address) as channel,
    ):
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await gateway_pb2_grpc.ToolGatewayServiceStub(channel).Invoke(
                gateway_pb2.InvokeRequest(
                    context=ctx(request_id=uuid.uuid4().hex),
                    tool_name="set_thing",
                    arguments_json=json.dumps({"id": "a", "status": "s"}),
                )
            )
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION, info.value
    assert error_info(info.value).reason == "PREPARED_ARGS_INVALID"
    assert [s.target for s in raw.seen] == ["/things/prepare"]


@pytest.mark.parametrize(
    ("answered", "state", "reason"),
    [
        ((409, b'{"reason": "OUT_OF_STOCK", "message": "\\ud800 gone"}'), "ACTION_STATE_FAILED", "OUT_OF_STOCK"),
        ((503, b'{"message": "\\udfff busy"}'), "ACTION_STATE_UNKNOWN", "DOWNSTREAM_503"),
        ((201, b'{"id": "\\ud800", "version": 1}'), "ACTION_STATE_UNKNOWN", "RECEIPT_INVALID"),
        ((201, b'{"id": "t_1", "version": 1, "note": "\\ud800"}'), "ACTION_STATE_SUCCEEDED", ""),
    ],
    ids=["a-refusal-says-it", "a-5xx-says-it", "in-the-receipt", "elsewhere-in-the-answer"],
)
async def test_a_lone_surrogate_in_a_writes_answer_is_recorded_as_its_outcome(
    raw: Raw, tmp_path: Any, answered: tuple[int, bytes], state: str, reason: str
) -> None:
    from countersign.testing.downstreams import sidecar_over
    from countersign.v1 import common_pb2

    # JSON admits "\ud800"; a protobuf string (a message, a receipt) does not: Confirm answered INTERNAL and the
    # outcome was never recorded (the action stayed RUNNING, its claim held to the lease)
    async with sidecar_over(tmp_path, registry_doc(raw.url)) as sidecar:
        raw.script = lambda s: answer(answered[0], answered[1])
        _, action, got = await _confirm(sidecar)
    assert (common_pb2.ActionState.Name(action.state), action.error.reason) == (state, reason)
    assert (got.state, got.error.reason) == (action.state, action.error.reason), "recorded as answered"
    if b"message" in answered[1]:
        assert "\ufffd" in action.error.message, "the downstream's words, their lone surrogate replaced"
    assert len([s for s in raw.seen if s.method == "POST" and s.target == "/things"]) == 1


async def test_a_lone_surrogate_in_a_refused_prepare_or_a_read_is_answered_not_internal(
    raw: Raw, tmp_path: Any
) -> None:
    import uuid

    import grpc

    from countersign.testing.calls import ctx, error_info
    from countersign.testing.downstreams import sidecar_over
    from countersign.v1 import gateway_pb2, gateway_pb2_grpc

    async with (
        sidecar_over(tmp_path, registry_doc(raw.url)) as sidecar,
        grpc.aio.insecure_channel(sidecar.address) as channel,
    ):
        stub = gateway_pb2_grpc.ToolGatewayServiceStub(channel)
        raw.script = lambda s: answer(400, b'{"reason": "NO_SUCH_THING", "message": "\\ud800 unknown"}')
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.Invoke(
                gateway_pb2.InvokeRequest(
                    context=ctx(request_id=uuid.uuid4().hex),
                    tool_name="set_thing",
                    arguments_json=json.dumps({"id": "a", "status": "s"}),
                )
            )
        assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION, info.value
        assert error_info(info.value).reason == "NO_SUCH_THING"
        assert info.value.details() == "\ufffd unknown"
        raw.script = lambda s: answer(200, b'{"items": ["\\ud800"]}')
        read = await stub.Invoke(
            gateway_pb2.InvokeRequest(context=ctx(request_id=uuid.uuid4().hex), tool_name="read_things")
        )
    assert json.loads(read.result.result_json) == {"items": ["\ud800"]}, "the answer as it came, still JSON"


async def test_a_write_that_never_got_a_connection_is_not_sent_and_its_card_is_ready_again(
    raw: Raw, tmp_path: Any
) -> None:
    import uuid

    import grpc

    from countersign.testing.calls import ctx, error_info
    from countersign.testing.downstreams import sidecar_over
    from countersign.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc

    # a slow downstream and more calls in flight than the pool has connections (128; --max-in-flight raised, as
    # its help says to for a slow downstream): the calls that waited for a connection past their deadline wrote
    # nothing, and were UNKNOWN all the same (to be fenced or reviewed by hand)
    raw.script = lambda s: [2.5, *answer(201, {"id": "t_slow", "version": 1})]

    async def confirm(stub: Any) -> tuple[str, str, int]:
        context = ctx(request_id=uuid.uuid4().hex)
        invoked = await stub.Invoke(
            gateway_pb2.InvokeRequest(context=context, tool_name="create_thing", arguments_json='{"title": "t"}')
        )
        card = invoked.confirmation
        try:
            action = (await stub.Confirm(gateway_pb2.ConfirmRequest(context=context, token=card.token))).action
            said = common_pb2.ActionState.Name(action.state)
        except grpc.aio.AioRpcError as exc:
            said = error_info(exc).reason
        got = await stub.GetAction(gateway_pb2.GetActionRequest(context=context, action_id=card.action_id))
        return card.action_id, said, got.action.state

    async with (
        sidecar_over(tmp_path, registry_doc(raw.url), max_in_flight=400) as sidecar,
        grpc.aio.insecure_channel(sidecar.address) as channel,
    ):
        stub = gateway_pb2_grpc.ToolGatewayServiceStub(channel)
        outcomes = await asyncio.gather(*(confirm(stub) for _ in range(300)))
    reached = {s.headers.get("idempotency-key", "").strip('"') for s in raw.seen if s.target == "/things"}
    unknown = {a for a, said, state in outcomes if said == "ACTION_STATE_UNKNOWN"}
    not_sent = {a for a, said, state in outcomes if said == "DOWNSTREAM_NOT_SENT"}
    assert unknown | not_sent == {a for a, _, _ in outcomes}, outcomes
    assert unknown <= reached, f"{len(unknown - reached)} actions UNKNOWN whose request never reached the downstream"
    assert not (not_sent & reached), "a request that was sent is never given back"
    assert all(state == common_pb2.ACTION_STATE_READY for a, _, state in outcomes if a in not_sent), "READY again"


@pytest.mark.parametrize(
    "body",
    [b'{"id": NaN, "version": 1}', b'{"id": "t_1", "version": Infinity}', b'{"id": "t_1", "version": -Infinity}'],
    ids=["nan-id", "infinite-version", "negative-infinite-version"],
)
async def test_an_answer_with_nan_or_infinity_is_not_json_and_never_a_receipt(
    raw: Raw, tmp_path: Any, body: bytes
) -> None:
    from countersign.testing.downstreams import sidecar_over
    from countersign.v1 import common_pb2

    # NaN and Infinity are not JSON (RFC 8259), though Python's json reads them: a 201 {"id": NaN} was SUCCEEDED
    # with the resource id "NaN". Such an answer is no receipt: UNKNOWN, reconciled by key, like any 2xx not JSON
    async with sidecar_over(tmp_path, registry_doc(raw.url)) as sidecar:
        raw.script = lambda s: answer(201, body)
        _, action, got = await _confirm(sidecar)
    assert (common_pb2.ActionState.Name(action.state), action.error.reason) == (
        "ACTION_STATE_UNKNOWN",
        "RECEIPT_INVALID",
    )
    assert "not JSON" in action.error.message, action.error.message
    assert not action.receipt.resource_id and (got.state, got.error.reason) == (action.state, action.error.reason)
    assert len([s for s in raw.seen if s.method == "POST" and s.target == "/things"]) == 1
