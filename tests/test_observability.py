"""Traces, metrics and logs (issue 5): spans in memory, a real scrape checked by promtool, no raw values."""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import subprocess
import urllib.request
import uuid
from collections.abc import AsyncIterator

import grpc
import pytest
from conftest import Stack, ctx
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from countersign.sidecar import app, settings
from countersign.sidecar.observability import tracing
from countersign.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc

MARKER = "MARKER-d41d8cd98f-秘密"
EXPORTER = InMemorySpanExporter()


def _provider() -> None:
    """The sidecar's tracer provider, with an in-memory exporter the test can read."""
    tracing.setup(force=True)
    provider = trace.get_tracer_provider()
    assert isinstance(provider, TracerProvider)
    if not getattr(provider, "_test_exporter", False):
        provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
        provider._test_exporter = True  # type: ignore[attr-defined]


@pytest.fixture
async def sidecar(stack: Stack, caplog: pytest.LogCaptureFixture) -> AsyncIterator[app.Sidecar]:
    """The sidecar in this process (so its spans are visible), on the stack's Redis and todo service."""
    _provider()
    caplog.set_level(logging.INFO)
    s = settings.Settings(registry=str(stack.registry), listen="127.0.0.1:0", redis_url=stack.redis.info["url"],
                          metrics_listen="127.0.0.1:0", keys_file=str(stack.keys), downstream_deadline=0.5,
                          lease=5.0).validate()
    running = await app.start(s)
    EXPORTER.clear()
    yield running
    await running.stop(grace=1)


async def _card(stub: gateway_pb2_grpc.ToolGatewayServiceStub, title: str = MARKER) -> gateway_pb2.ConfirmationCard:
    response = await stub.Invoke(gateway_pb2.InvokeRequest(context=ctx(request_id=uuid.uuid4().hex),
                                                           tool_name="create_todo",
                                                           arguments_json=json.dumps({"title": title})))
    return response.confirmation


def _scrape(sidecar: app.Sidecar) -> str:
    with urllib.request.urlopen(f"http://{sidecar.metrics_address}/metrics", timeout=10) as resp:
        return str(resp.read().decode())


def _value(scrape: str, name: str, **labels: str) -> float:
    total = 0.0
    for line in scrape.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


async def test_one_confirmed_write_shows_rpc_span_stages_in_order_and_the_downstream_trace(
        stack: Stack, sidecar: app.Sidecar) -> None:
    async with grpc.aio.insecure_channel(sidecar.address) as channel:
        stub = gateway_pb2_grpc.ToolGatewayServiceStub(channel)
        card = await _card(stub, "traced")
        EXPORTER.clear()
        await stub.Confirm(gateway_pb2.ConfirmRequest(context=ctx(), token=card.token))
    spans = EXPORTER.get_finished_spans()
    rpc = next(s for s in spans if s.name == "Confirm")
    assert rpc.kind == trace.SpanKind.SERVER
    assert rpc.attributes is not None and rpc.attributes["countersign.action_id"] == card.action_id
    assert rpc.attributes["countersign.tool"] == "create_todo" and rpc.attributes["countersign.outcome"] == "succeeded"
    children = sorted((s for s in spans if s.context.trace_id == rpc.context.trace_id and s is not rpc),
                      key=lambda s: s.start_time or 0)
    stages = [s.name for s in children if s.name.startswith("countersign.")]
    assert stages == ["countersign.claim", "countersign.policy", "countersign.execute", "countersign.settle"]
    client = next(s for s in children if s.kind == trace.SpanKind.CLIENT)
    sent = stack.todo.writes(card.action_id)[0]["headers"]["traceparent"]
    assert sent.split("-")[1] == format(rpc.context.trace_id, "032x")
    assert sent.split("-")[2] == format(client.context.span_id, "016x")


async def test_a_trace_the_caller_did_not_sample_records_no_span_but_still_reaches_the_downstream(
        stack: Stack, sidecar: app.Sidecar) -> None:
    trace_id = uuid.uuid4().hex
    async with grpc.aio.insecure_channel(sidecar.address) as channel:
        stub = gateway_pb2_grpc.ToolGatewayServiceStub(channel)
        card = await _card(stub, "not sampled")
        EXPORTER.clear()
        await stub.Confirm(gateway_pb2.ConfirmRequest(context=ctx(), token=card.token),
                           metadata=(("traceparent", f"00-{trace_id}-{'1' * 16}-00"),))
    assert [s.name for s in EXPORTER.get_finished_spans() if s.context.trace_id == int(trace_id, 16)] == []
    version, sent_trace, hop, flags = stack.todo.writes(card.action_id)[0]["headers"]["traceparent"].split("-")
    assert (version, sent_trace, flags) == ("00", trace_id, "00"), "the caller's trace, still not sampled"
    assert hop != "1" * 16, "a hop of the sidecar's own"


async def test_a_faulted_downstream_marks_the_span_unknown_and_counts_it(stack: Stack, sidecar: app.Sidecar) -> None:
    before = _value(_scrape(sidecar), "countersign_executions_total", outcome="unknown")
    async with grpc.aio.insecure_channel(sidecar.address) as channel:
        stub = gateway_pb2_grpc.ToolGatewayServiceStub(channel)
        card = await _card(stub, "hangs")
        stack.todo.fault(path="/todos", method="POST", mode="hang_after_commit", seconds=1.5, times=1)
        try:
            action = (await stub.Confirm(gateway_pb2.ConfirmRequest(context=ctx(), token=card.token))).action
        finally:
            stack.todo.clear_faults()
    assert action.state == common_pb2.ACTION_STATE_UNKNOWN
    rpc = next(s for s in EXPORTER.get_finished_spans() if s.name == "Confirm")
    assert rpc.attributes is not None and rpc.attributes["countersign.outcome"] == "unknown"
    assert _value(_scrape(sidecar), "countersign_executions_total", outcome="unknown") == before + 1


async def test_20_duplicate_confirms_raise_replay_hits_by_19(sidecar: app.Sidecar) -> None:
    async with grpc.aio.insecure_channel(sidecar.address) as channel:
        stub = gateway_pb2_grpc.ToolGatewayServiceStub(channel)
        card = await _card(stub, "twenty")
        before = _value(_scrape(sidecar), "countersign_replay_hits_total")
        for _ in range(20):
            await stub.Confirm(gateway_pb2.ConfirmRequest(context=ctx(), token=card.token, wait_ms=2000))
    assert _value(_scrape(sidecar), "countersign_replay_hits_total") == before + 19


async def test_a_mixed_run_scrapes_clean_and_no_export_holds_a_raw_value_token_or_user(
        stack: Stack, sidecar: app.Sidecar, caplog: pytest.LogCaptureFixture) -> None:
    async with grpc.aio.insecure_channel(sidecar.address) as channel:
        stub = gateway_pb2_grpc.ToolGatewayServiceStub(channel)
        card = await _card(stub)
        await stub.Confirm(gateway_pb2.ConfirmRequest(context=ctx(), token=card.token))
        await stub.Confirm(gateway_pb2.ConfirmRequest(context=ctx(), token=card.token))
        await stub.Invoke(gateway_pb2.InvokeRequest(context=ctx(), tool_name="delete_note", arguments_json="{}"))
        await stub.Invoke(gateway_pb2.InvokeRequest(context=ctx(), tool_name="list_todos", arguments_json="{}"))
        for bad in (json.dumps({"title": MARKER, "x": 1}), "{"):
            with pytest.raises(grpc.aio.AioRpcError):
                await stub.Invoke(gateway_pb2.InvokeRequest(context=ctx(), tool_name="create_todo",
                                                            arguments_json=bad))
        with pytest.raises(grpc.aio.AioRpcError):
            await stub.Confirm(gateway_pb2.ConfirmRequest(context=ctx(actor_id="mallory", subject_id="mallory"),
                                                          token=card.token))
    await asyncio.sleep(0.1)
    scrape = _scrape(sidecar)
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool is not installed (apt-get install prometheus; `make test` does it)")
    checked = subprocess.run([promtool, "check", "metrics"], input=scrape, capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    labels = " ".join(line.split("{", 1)[1].rsplit("}", 1)[0] for line in scrape.splitlines()
                      if "{" in line and not line.startswith("#"))
    spans = EXPORTER.get_finished_spans()
    exported = json.dumps([dict(s.attributes or {}) | {"name": s.name} for s in spans], ensure_ascii=False)
    logs = "\n".join(r.getMessage() for r in caplog.records)
    for where, text in (("metric labels", labels), ("spans", exported), ("logs", logs)):
        assert MARKER not in text, f"a raw argument value leaked into {where}"
        assert card.token not in text and card.token.rsplit(".", 1)[1] not in text, f"a token leaked into {where}"
        assert "alice" not in text and "mallory" not in text, f"a user id leaked into {where}"
    assert card.action_id not in labels, "an action id is a label"
    assert any(json.loads(m).get("event") == "decision" and json.loads(m).get("trace_id")
               for m in logs.splitlines() if m.startswith("{"))


async def test_health_and_reflection_are_not_traced(sidecar: app.Sidecar) -> None:
    from grpc_health.v1 import health_pb2, health_pb2_grpc
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    async with grpc.aio.insecure_channel(sidecar.address) as channel:
        EXPORTER.clear()
        await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""))
        stream = reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")]))
        async for _ in stream:
            break
        assert EXPORTER.get_finished_spans() == ()
        await gateway_pb2_grpc.ToolGatewayServiceStub(channel).Invoke(gateway_pb2.InvokeRequest(
            context=ctx(), tool_name="delete_note", arguments_json="{}"))
    assert [s.name for s in EXPORTER.get_finished_spans() if s.kind == trace.SpanKind.SERVER] == ["Invoke"]
