"""Reconciliation of UNKNOWN actions against the real todo service, with real faults (issue 4, part)."""

from __future__ import annotations

import asyncio
import multiprocessing
import re
import time
import urllib.request
import uuid

import grpc

from countersign.testing.calls import ctx
from countersign.testing.faults import Cutter
from countersign.testing.stack import Stack, changed_registry, quiet, registry_with
from countersign.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc


def turn() -> str:
    return uuid.uuid4().hex


def reconcile(stub: gateway_pb2_grpc.ToolGatewayServiceStub, action_id: str) -> common_pb2.Action:
    return stub.Reconcile(gateway_pb2.ReconcileRequest(context=ctx(), action_id=action_id)).action


def test_commit_then_hang_is_reconciled_to_succeeded_with_the_real_resource_id(stack: Stack) -> None:
    sidecar = stack.start_sidecar(flags=["--downstream-deadline", "500ms", "--reconcile-interval", "1h"])
    try:
        stub = stack.stub(sidecar.info["grpc"])
        card = stack.card(stub, request_id=turn(), title="提交后挂起再对账")
        stack.todo.fault(path="/todos", method="POST", mode="hang_after_commit", seconds=1.0, times=1)
        assert (
            stub.Confirm(gateway_pb2.ConfirmRequest(context=ctx(), token=card.token)).action.state
            == common_pb2.ACTION_STATE_UNKNOWN
        )
        action = reconcile(stub, card.action_id)
        assert action.state == common_pb2.ACTION_STATE_SUCCEEDED
        todo = stack.todo.get(f"/todos/by-key/{card.action_id}")
        assert action.receipt.resource_id == todo["id"] and action.receipt.summary.startswith("待办")
        writes = stack.todo.writes(card.action_id)
        lookups = [e for e in stack.todo.requests(card.action_id) if "/by-key/" in e["path"]]
        assert (len(writes), len(lookups)) == (1, 1), "one write and one lookup"
        replay = stub.Confirm(gateway_pb2.ConfirmRequest(context=ctx(), token=card.token)).action
        assert replay.replayed and replay.receipt == action.receipt
    finally:
        stack.todo.clear_faults()
        sidecar.stop()


def test_a_request_that_never_arrived_is_fenced_to_failed_not_applied_and_refused_later(stack: Stack) -> None:
    cutter = Cutter()
    sidecar = stack.start_sidecar(
        registry=registry_with(stack, execute_url=cutter.url), flags=["--reconcile-interval", "1h"]
    )
    try:
        stub = stack.stub(sidecar.info["grpc"])
        card = stack.card(stub, request_id=turn(), title="从未到达")
        first = stub.Confirm(gateway_pb2.ConfirmRequest(context=ctx(), token=card.token)).action
        assert first.state == common_pb2.ACTION_STATE_UNKNOWN and cutter.cut == 1
        action = reconcile(stub, card.action_id)
        assert action.state == common_pb2.ACTION_STATE_FAILED and action.error.reason == "NOT_APPLIED"
        # the original request, arriving late, is refused by the fence
        late = stack.todo.post("/todos", {"title": "从未到达"}, key=card.action_id)
        assert late["reason"] == "KEY_FENCED"
        assert stack.todo.get(f"/todos/by-key/{card.action_id}")["reason"] in ("KEY_FENCED", "KEY_NOT_FOUND")
    finally:
        sidecar.stop()
        cutter.close()


def test_a_plain_lookup_that_finds_nothing_stays_unknown_then_needs_manual_review(fresh_stack: Stack) -> None:
    stack = quiet(fresh_stack)
    cutter = Cutter()
    sidecar = stack.start_sidecar(
        registry=registry_with(stack, execute_url=cutter.url, fence=False),
        flags=["--reconcile-interval", "1h", "--reconcile-window", "1500ms"],
    )
    try:
        stub = stack.stub(sidecar.info["grpc"])
        card = stack.card(stub, request_id=turn(), title="查无此键")
        stub.Confirm(gateway_pb2.ConfirmRequest(context=ctx(), token=card.token))
        assert reconcile(stub, card.action_id).state == common_pb2.ACTION_STATE_UNKNOWN, "a miss proves nothing"
        # after the window (other sidecars' background reconcilers may take turns meanwhile)
        deadline = time.monotonic() + 10
        action = reconcile(stub, card.action_id)
        while action.state == common_pb2.ACTION_STATE_UNKNOWN and time.monotonic() < deadline:
            time.sleep(0.3)
            action = reconcile(stub, card.action_id)
        assert action.state == common_pb2.ACTION_STATE_NEEDS_MANUAL_REVIEW
        assert action.error.reason == "NOT_RESOLVED_IN_WINDOW"
        assert stack.todo.writes(card.action_id) == [], "never re-sent"
    finally:
        sidecar.stop()
        cutter.close()


def test_no_lookup_configured_goes_to_manual_review(fresh_stack: Stack) -> None:
    stack = quiet(fresh_stack)
    cutter = Cutter()
    sidecar = stack.start_sidecar(
        registry=registry_with(stack, execute_url=cutter.url, fence=False, lookup=False),
        flags=["--reconcile-interval", "1h"],
    )
    try:
        stub = stack.stub(sidecar.info["grpc"])
        card = stack.card(stub, request_id=turn(), title="无法查询")
        stub.Confirm(gateway_pb2.ConfirmRequest(context=ctx(), token=card.token))
        action = reconcile(stub, card.action_id)
        assert (action.state, action.error.reason) == (common_pb2.ACTION_STATE_NEEDS_MANUAL_REVIEW, "NO_LOOKUP")
        again = stub.Confirm(gateway_pb2.ConfirmRequest(context=ctx(), token=card.token)).action
        assert again.state == common_pb2.ACTION_STATE_NEEDS_MANUAL_REVIEW and again.replayed
    finally:
        sidecar.stop()
        cutter.close()


def test_kill9_mid_call_is_resolved_by_another_sidecars_background_reconciler(fresh_stack: Stack) -> None:
    stack = fresh_stack
    flags = ["--lease", "2500ms", "--downstream-deadline", "2s", "--reconcile-interval", "300ms"]
    victim = stack.start_sidecar(flags=flags)
    survivor = stack.start_sidecar(flags=flags)
    try:
        card = stack.card(stack.stub(victim.info["grpc"]), request_id=turn(), title="被杀")
        stack.todo.fault(path="/todos", method="POST", mode="hang_before_commit", seconds=1.0, times=1)
        channel = grpc.insecure_channel(victim.info["grpc"])
        call = gateway_pb2_grpc.ToolGatewayServiceStub(channel).Confirm.future(
            gateway_pb2.ConfirmRequest(context=ctx(), token=card.token), timeout=10
        )
        deadline = time.monotonic() + 5
        while not stack.todo.writes(card.action_id) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(stack.todo.writes(card.action_id)) == 1, "the downstream holds the request"
        victim.kill9()
        assert call.exception() is not None
        channel.close()
        stub = stack.stub(survivor.info["grpc"])
        deadline = time.monotonic() + 15
        state = None
        while time.monotonic() < deadline:
            state = stub.GetAction(gateway_pb2.GetActionRequest(context=ctx(), action_id=card.action_id)).action
            if state.state == common_pb2.ACTION_STATE_SUCCEEDED:
                break
            time.sleep(0.2)
        assert state is not None and state.state == common_pb2.ACTION_STATE_SUCCEEDED, state
        assert len(stack.todo.writes(card.action_id)) == 1, "no second write"
    finally:
        survivor.stop()


def _reconcile_in_a_process(address: str, action_id: str, start_at: float, out: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    async def run() -> list[bytes]:
        async with grpc.aio.insecure_channel(address) as channel:
            stub = gateway_pb2_grpc.ToolGatewayServiceStub(channel)
            await asyncio.sleep(max(0.0, start_at - time.time()))
            answers = await asyncio.gather(
                *(stub.Reconcile(gateway_pb2.ReconcileRequest(context=ctx(), action_id=action_id)) for _ in range(10))
            )
            return [a.action.SerializeToString(deterministic=True) for a in answers]

    out.put(asyncio.run(run()))


def test_two_reconcilers_in_two_processes_record_one_outcome(stack: Stack) -> None:
    second = stack.start_sidecar(flags=["--reconcile-interval", "1h"])
    first = stack.start_sidecar(flags=["--downstream-deadline", "500ms", "--reconcile-interval", "1h"])
    try:
        card = stack.card(stack.stub(first.info["grpc"]), request_id=turn(), title="两个对账者")
        stack.todo.fault(path="/todos", method="POST", mode="hang_after_commit", seconds=0.8, times=1)
        stack.stub(first.info["grpc"]).Confirm(gateway_pb2.ConfirmRequest(context=ctx(), token=card.token))
        time.sleep(0.5)
        spawn = multiprocessing.get_context("spawn")
        queue: multiprocessing.Queue = spawn.Queue()  # type: ignore[type-arg]
        start_at = time.time() + 2.0
        procs = [
            spawn.Process(target=_reconcile_in_a_process, args=(a, card.action_id, start_at, queue))
            for a in (first.info["grpc"], second.info["grpc"])
        ]
        for p in procs:
            p.start()
        answers = [common_pb2.Action.FromString(raw) for _ in procs for raw in queue.get(timeout=60)]
        for p in procs:
            p.join(10)
        final = stack.stub().GetAction(gateway_pb2.GetActionRequest(context=ctx(), action_id=card.action_id)).action
        assert final.state == common_pb2.ACTION_STATE_SUCCEEDED
        settled = {
            a.receipt.SerializeToString(deterministic=True)
            for a in answers
            if a.state == common_pb2.ACTION_STATE_SUCCEEDED
        }
        assert settled == {final.receipt.SerializeToString(deterministic=True)}, "one outcome, no conflicts"
        assert {a.state for a in answers} <= {common_pb2.ACTION_STATE_SUCCEEDED, common_pb2.ACTION_STATE_UNKNOWN}
        assert len(stack.todo.writes(card.action_id)) == 1
    finally:
        stack.todo.clear_faults()
        first.stop()
        second.stop()


def test_a_reconciler_whose_registry_lacks_the_tool_leaves_the_action_alone_and_counts_it(fresh_stack: Stack) -> None:
    """A rolling registry change: one sidecar's registry no longer has create_todo. Its reconciler must not
    sweep another sidecar's UNKNOWN create_todo to manual review (it has no lookup for it): it leaves it for a
    sidecar that knows the tool, and counts it."""

    stack = quiet(fresh_stack)
    knows = stack.start_sidecar(flags=["--downstream-deadline", "300ms", "--reconcile-interval", "1h"])
    lacks = None
    try:
        lacks = stack.start_sidecar(
            registry=changed_registry(stack, "planned"), flags=["--reconcile-interval", "200ms"]
        )
        stub, other = stack.stub(knows.info["grpc"]), stack.stub(lacks.info["grpc"])
        card = stack.card(stub, request_id=turn(), title="滚动变更")
        stack.todo.fault(path="/todos", method="POST", mode="hang_after_commit", seconds=1.0, times=1)
        assert (
            stub.Confirm(gateway_pb2.ConfirmRequest(context=ctx(), token=card.token)).action.state
            == common_pb2.ACTION_STATE_UNKNOWN
        )
        time.sleep(2.5)  # a dozen passes of the other sidecar's background reconciler
        get = gateway_pb2.GetActionRequest(context=ctx(), action_id=card.action_id)
        assert stub.GetAction(get).action.state == common_pb2.ACTION_STATE_UNKNOWN, "not swept to manual review"
        assert reconcile(other, card.action_id).state == common_pb2.ACTION_STATE_UNKNOWN, "nor by its Reconcile"
        with urllib.request.urlopen(f"http://{lacks.info['metrics']}/metrics", timeout=5) as resp:
            scraped = resp.read().decode()
        counted = re.search(
            r'^countersign_reconciliations_total\{result="tool_not_in_registry",tool="other"\} '
            r"([0-9.]+)$",
            scraped,
            re.M,
        )
        assert counted and float(counted.group(1)) >= 1, "left alone, and counted"
        done = reconcile(stub, card.action_id)
        assert done.state == common_pb2.ACTION_STATE_SUCCEEDED, "the sidecar that knows the tool resolves it"
        assert len(stack.todo.writes(card.action_id)) == 1
    finally:
        if lacks is not None:
            lacks.stop()
        knows.stop()
