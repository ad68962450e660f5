"""Traces, metrics and logs (issue 5): spans in memory, a real scrape checked by promtool, no raw values."""

from __future__ import annotations

import asyncio
import http.server
import json
import logging
import os
import shutil
import socket
import subprocess
import threading
import urllib.request
import uuid
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path

import grpc
import pytest
import redis
from mcp.shared.exceptions import MCPError
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from countersign.observability import logs, tracing
from countersign.sidecar import app, settings
from countersign.testing import processes
from countersign.testing.calls import ctx, error_info
from countersign.testing.mcp_front import Elicitations, client
from countersign.testing.stack import Stack
from countersign.v1 import common_pb2, continuation_pb2, continuation_pb2_grpc, gateway_pb2, gateway_pb2_grpc

MARKER = "MARKER-d41d8cd98f-秘密"
EXPORTER = InMemorySpanExporter()


def _provider() -> None:
    """The sidecar's tracer provider, with an in-memory exporter the test can read."""
    tracing.setup(force=True)
    logs.stamp_trace_ids()
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
    s = settings.Settings(
        registry=str(stack.registry),
        listen="127.0.0.1:0",
        redis_url=stack.redis.info["url"],
        metrics_listen="127.0.0.1:0",
        keys_file=str(stack.keys),
        downstream_deadline=0.5,
        lease=5.0,
    ).validate()
    running = await app.start(s)
    EXPORTER.clear()
    yield running
    await running.stop(grace=1)


async def _card(stub: gateway_pb2_grpc.ToolGatewayServiceStub, title: str = MARKER) -> gateway_pb2.ConfirmationCard:
    response = await stub.Invoke(
        gateway_pb2.InvokeRequest(
            context=ctx(request_id=uuid.uuid4().hex),
            tool_name="create_todo",
            arguments_json=json.dumps({"title": title}),
        )
    )
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
    stack: Stack, sidecar: app.Sidecar
) -> None:
    async with grpc.aio.insecure_channel(sidecar.address) as channel:
        stub = gateway_pb2_grpc.ToolGatewayServiceStub(channel)
        card = await _card(stub, "traced")
        EXPORTER.clear()
        await stub.Confirm(gateway_pb2.ConfirmRequest(context=ctx(), token=card.token))
    spans = EXPORTER.get_finished_spans()
    rpc = next(s for s in spans if s.name == "countersign.v1.ToolGatewayService/Confirm")
    assert rpc.kind == trace.SpanKind.SERVER
    assert rpc.attributes is not None and rpc.attributes["countersign.action_id"] == card.action_id
    assert rpc.attributes["countersign.tool"] == "create_todo" and rpc.attributes["countersign.outcome"] == "succeeded"
    children = sorted(
        (s for s in spans if s.context.trace_id == rpc.context.trace_id and s is not rpc),
        key=lambda s: s.start_time or 0,
    )
    stages = [s.name for s in children if s.name.startswith("countersign.")]
    assert stages == ["countersign.claim", "countersign.policy", "countersign.settle"]
    client = next(s for s in children if s.kind == trace.SpanKind.CLIENT)
    assert [s.name for s in children if not s.name.startswith("countersign.")] == ["POST /todos"]
    sent = stack.todo.writes(card.action_id)[0]["headers"]["traceparent"]
    assert sent.split("-")[1] == format(rpc.context.trace_id, "032x")
    assert sent.split("-")[2] == format(client.context.span_id, "016x")


async def test_a_trace_the_caller_did_not_sample_records_no_span_but_still_reaches_the_downstream(
    stack: Stack, sidecar: app.Sidecar
) -> None:
    trace_id = uuid.uuid4().hex
    async with grpc.aio.insecure_channel(sidecar.address) as channel:
        stub = gateway_pb2_grpc.ToolGatewayServiceStub(channel)
        card = await _card(stub, "not sampled")
        EXPORTER.clear()
        await stub.Confirm(
            gateway_pb2.ConfirmRequest(context=ctx(), token=card.token),
            metadata=(("traceparent", f"00-{trace_id}-{'1' * 16}-00"),),
        )
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
    rpc = next(s for s in EXPORTER.get_finished_spans() if s.name == "countersign.v1.ToolGatewayService/Confirm")
    assert rpc.attributes is not None and rpc.attributes["countersign.outcome"] == "unknown"
    assert rpc.status.status_code == trace.StatusCode.UNSET, "an UNKNOWN outcome is an answer, not a server fault"
    client = next(s for s in EXPORTER.get_finished_spans() if s.kind == trace.SpanKind.CLIENT)
    assert client.status.status_code == trace.StatusCode.ERROR and client.attributes is not None
    assert client.attributes["error.type"] == "DOWNSTREAM_TIMEOUT"
    assert "http.response.status_code" not in client.attributes, "no answer came back"
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
    stack: Stack, sidecar: app.Sidecar, caplog: pytest.LogCaptureFixture
) -> None:
    async with grpc.aio.insecure_channel(sidecar.address) as channel:
        stub = gateway_pb2_grpc.ToolGatewayServiceStub(channel)
        card = await _card(stub)
        await stub.Confirm(gateway_pb2.ConfirmRequest(context=ctx(), token=card.token))
        await stub.Confirm(gateway_pb2.ConfirmRequest(context=ctx(), token=card.token))
        await stub.Invoke(gateway_pb2.InvokeRequest(context=ctx(), tool_name="delete_note", arguments_json="{}"))
        await stub.Invoke(gateway_pb2.InvokeRequest(context=ctx(), tool_name="list_todos", arguments_json="{}"))
        for bad in (json.dumps({"title": MARKER, "x": 1}), "{"):
            with pytest.raises(grpc.aio.AioRpcError):
                await stub.Invoke(gateway_pb2.InvokeRequest(context=ctx(), tool_name="create_todo", arguments_json=bad))
        with pytest.raises(grpc.aio.AioRpcError):
            await stub.Confirm(
                gateway_pb2.ConfirmRequest(context=ctx(actor_id="mallory", subject_id="mallory"), token=card.token)
            )
    await asyncio.sleep(0.1)
    scrape = _scrape(sidecar)
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool is not installed (apt-get install prometheus; `make test` does it)")
    checked = subprocess.run([promtool, "check", "metrics"], input=scrape, capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    labels = " ".join(
        line.split("{", 1)[1].rsplit("}", 1)[0]
        for line in scrape.splitlines()
        if "{" in line and not line.startswith("#")
    )
    spans = EXPORTER.get_finished_spans()
    exported = json.dumps([dict(s.attributes or {}) | {"name": s.name} for s in spans], ensure_ascii=False)
    formatter = logs.JsonLines()
    lines = [formatter.format(r) for r in caplog.records]
    logs_text = "\n".join(lines)
    for where, text in (("metric labels", labels), ("spans", exported), ("logs", logs_text)):
        assert MARKER not in text, f"a raw argument value leaked into {where}"
        assert card.token not in text and card.token.rsplit(".", 1)[1] not in text, f"a token leaked into {where}"
        assert "alice" not in text and "mallory" not in text, f"a user id leaked into {where}"
    assert card.action_id not in labels, "an action id is a label"
    decisions = [json.loads(line) for line in lines if json.loads(line).get("event") == "decision"]
    assert decisions and all(
        d["trace_id"] and d["span_id"] and d["level"] == "info" and d["timestamp"] for d in decisions
    ), decisions


async def test_health_and_reflection_are_not_traced(sidecar: app.Sidecar) -> None:
    from grpc_health.v1 import health_pb2, health_pb2_grpc
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    async with grpc.aio.insecure_channel(sidecar.address) as channel:
        EXPORTER.clear()
        await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""))
        stream = reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")])
        )
        async for _ in stream:
            break
        assert EXPORTER.get_finished_spans() == ()
        await gateway_pb2_grpc.ToolGatewayServiceStub(channel).Invoke(
            gateway_pb2.InvokeRequest(context=ctx(), tool_name="delete_note", arguments_json="{}")
        )
    assert [s.name for s in EXPORTER.get_finished_spans() if s.kind == trace.SpanKind.SERVER] == [
        "countersign.v1.ToolGatewayService/Invoke"
    ]


# ---- OpenTelemetry by the conventions (issue 16) ------------------------------------------------------------

GATEWAY = "countersign.v1.ToolGatewayService"


def _server_spans() -> list[ReadableSpan]:
    return [s for s in EXPORTER.get_finished_spans() if s.kind == trace.SpanKind.SERVER]


def _assert_rpc_conventions(span: ReadableSpan) -> grpc.StatusCode:
    """The rpc.* attributes of one server span, and its status by the gRPC server rule; returns its code."""
    attrs = dict(span.attributes or {})
    service, method = span.name.split("/")
    assert (attrs["rpc.system"], attrs["rpc.service"], attrs["rpc.method"]) == ("grpc", service, method), span.name
    assert service.startswith("countersign.v1.") and service.endswith("Service")
    code = next(c for c in grpc.StatusCode if c.value[0] == attrs["rpc.grpc.status_code"])
    want = trace.StatusCode.ERROR if code in tracing.SERVER_FAULTS else trace.StatusCode.UNSET
    assert span.status.status_code == want, f"{span.name} {code.name}: {span.status}"
    return code


async def _rpc_error(call: Awaitable[object]) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call
    return info.value


async def test_every_server_span_is_named_and_attributed_by_the_rpc_conventions_and_only_faults_are_errors(
    stack: Stack, sidecar: app.Sidecar
) -> None:
    async with grpc.aio.insecure_channel(sidecar.address) as channel:
        stub = gateway_pb2_grpc.ToolGatewayServiceStub(channel)
        conts = continuation_pb2_grpc.ContinuationServiceStub(channel)
        card = await _card(stub, "conventions")
        tampered = await _card(stub, "tampered")
        pending = (
            await conts.OpenContinuation(
                continuation_pb2.OpenContinuationRequest(
                    context=ctx(),
                    action_id=tampered.action_id,
                    snapshot=continuation_pb2.ContinuationSnapshot(question="q"),
                )
            )
        ).continuation
        EXPORTER.clear()
        await stub.Confirm(gateway_pb2.ConfirmRequest(context=ctx(), token=card.token))
        await stub.Invoke(gateway_pb2.InvokeRequest(context=ctx(), tool_name="list_todos", arguments_json="{}"))
        refusals = {
            grpc.StatusCode.INVALID_ARGUMENT: stub.Invoke(
                gateway_pb2.InvokeRequest(
                    context=ctx(), tool_name="create_todo", arguments_json='{"title": "x", "owner": "mallory"}'
                )
            ),
            grpc.StatusCode.NOT_FOUND: stub.GetAction(
                gateway_pb2.GetActionRequest(context=ctx(), action_id=uuid.uuid4().hex)
            ),
            grpc.StatusCode.PERMISSION_DENIED: stub.Confirm(
                gateway_pb2.ConfirmRequest(context=ctx(actor_id="mallory", subject_id="mallory"), token=card.token)
            ),
            grpc.StatusCode.FAILED_PRECONDITION: conts.ClaimContinuation(
                continuation_pb2.ClaimContinuationRequest(context=ctx(), token=pending.token)
            ),
        }
        for code, call in refusals.items():
            assert (await _rpc_error(call)).code() == code
        r = redis.Redis(unix_socket_path=stack.redis.info["socket"])
        key = f"cs:{{{tampered.action_id}}}:card"
        r.hset(key, "body", (r.hget(key, "body") or b"").replace(b"tampered", b"edited!!"))
        r.close()
        fault = await _rpc_error(stub.Confirm(gateway_pb2.ConfirmRequest(context=ctx(), token=tampered.token)))
        assert fault.code() == grpc.StatusCode.DATA_LOSS
    codes = {span.name: [] for span in _server_spans()}  # type: dict[str, list[grpc.StatusCode]]
    for span in _server_spans():
        codes[span.name].append(_assert_rpc_conventions(span))
    assert sorted(codes[f"{GATEWAY}/Confirm"], key=lambda c: c.value[0]) == [
        grpc.StatusCode.OK,
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.DATA_LOSS,
    ]
    assert sorted(codes[f"{GATEWAY}/Invoke"], key=lambda c: c.value[0]) == [
        grpc.StatusCode.OK,
        grpc.StatusCode.INVALID_ARGUMENT,
    ]
    assert codes[f"{GATEWAY}/GetAction"] == [grpc.StatusCode.NOT_FOUND]
    assert codes["countersign.v1.ContinuationService/ClaimContinuation"] == [grpc.StatusCode.FAILED_PRECONDITION]
    errors = [s for s in _server_spans() if s.status.status_code == trace.StatusCode.ERROR]
    assert [(s.name, (s.attributes or {})["countersign.reason"]) for s in errors] == [
        (f"{GATEWAY}/Confirm", "CONFIRMATION_TAMPERED")
    ]


async def test_a_downstream_that_is_down_is_an_error_span_and_its_message_names_the_url(
    stack: Stack, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    """UNAVAILABLE is a server fault (ERROR); the caller and the log learn which tool and which address."""
    _provider()
    caplog.set_level(logging.INFO)
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"
    registry = processes.write_registry(tmp_path, f"http://{dead}")
    down = await app.start(
        settings.Settings(
            registry=str(registry),
            listen="127.0.0.1:0",
            redis_url=stack.redis.info["url"],
            metrics_listen="",
            keys_file=str(stack.keys),
            downstream_deadline=0.5,
            lease=5.0,
        ).validate()
    )
    try:
        EXPORTER.clear()
        async with grpc.aio.insecure_channel(down.address) as channel:
            err = await _rpc_error(
                gateway_pb2_grpc.ToolGatewayServiceStub(channel).Invoke(
                    gateway_pb2.InvokeRequest(context=ctx(), tool_name="create_todo", arguments_json='{"title": "x"}')
                )
            )
    finally:
        await down.stop(grace=1)
    assert err.code() == grpc.StatusCode.UNAVAILABLE and error_info(err).reason == "DOWNSTREAM_UNAVAILABLE"
    assert "create_todo" in (err.details() or "") and dead in (err.details() or ""), err.details()
    (span,) = _server_spans()
    assert _assert_rpc_conventions(span) == grpc.StatusCode.UNAVAILABLE
    assert span.status.status_code == trace.StatusCode.ERROR
    lines = [json.loads(logs.JsonLines().format(r)) for r in caplog.records]
    refused = [line for line in lines if line.get("event") == "refused"]
    assert refused and refused[-1]["reason"] == "DOWNSTREAM_UNAVAILABLE"
    assert dead in json.dumps(lines) and "create_todo" in json.dumps(refused[-1]), lines


async def test_the_downstream_call_is_a_client_span_with_the_http_conventions(
    stack: Stack, sidecar: app.Sidecar
) -> None:
    async with grpc.aio.insecure_channel(sidecar.address) as channel:
        stub = gateway_pb2_grpc.ToolGatewayServiceStub(channel)
        card = await _card(stub, "client span")
        EXPORTER.clear()
        await stub.Confirm(gateway_pb2.ConfirmRequest(context=ctx(), token=card.token))
    (client,) = [s for s in EXPORTER.get_finished_spans() if s.kind == trace.SpanKind.CLIENT]
    port = int(stack.todo.url.rsplit(":", 1)[1])
    assert client.name == "POST /todos"
    assert dict(client.attributes or {}) | {"countersign.outcome": "-"} == {
        "http.request.method": "POST",
        "server.address": "127.0.0.1",
        "server.port": port,
        "url.full": f"http://127.0.0.1:{port}/todos",
        "url.template": "/todos",
        "http.response.status_code": 201,
        "countersign.tool": "create_todo",
        "countersign.adapter": "http",
        "countersign.outcome": "-",
    }
    assert client.status.status_code == trace.StatusCode.UNSET


def test_urls_in_spans_and_messages_keep_no_credentials_query_or_argument_values() -> None:
    assert (
        tracing.safe_url("https://user:pw@api.example:8443/v1/todos/{id}?token=s3cret#frag")
        == "https://api.example:8443/v1/todos/{id}"
    )
    assert tracing.safe_url("http://[::1]:8081/todos?status={status}") == "http://[::1]:8081/todos"
    attrs = tracing.downstream_attributes("http", "GET", "https://api.example/todos?key=s3cret")
    assert (attrs["server.address"], attrs["server.port"], attrs["url.full"]) == (
        "api.example",
        443,
        "https://api.example/todos",
    )
    grpc_attrs = tracing.downstream_attributes("grpc", "Execute", "todo-backend:9090")
    assert grpc_attrs == {
        "rpc.system": "grpc",
        "rpc.service": "countersign.v1.ToolBackendService",
        "rpc.method": "Execute",
        "server.address": "todo-backend",
        "server.port": 9090,
    }


def test_the_resource_takes_the_environment_over_its_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES"):
        monkeypatch.delenv(name, raising=False)
    plain = tracing.resource().attributes
    assert plain["service.name"] == "countersign" and plain["service.version"] == tracing.version() != "0+unknown"
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "service.name=from-attrs,k8s.pod.name=p-1,service.version=9")
    assert (tracing.resource().attributes["service.name"], tracing.resource().attributes["k8s.pod.name"]) == (
        "from-attrs",
        "p-1",
    )
    assert tracing.resource().attributes["service.version"] == "9", "the operator's word wins"
    monkeypatch.setenv("OTEL_SERVICE_NAME", "agent-a-countersign")
    assert tracing.resource().attributes["service.name"] == "agent-a-countersign", "OTEL_SERVICE_NAME wins over all"


@pytest.mark.parametrize(
    ("env", "want"),
    [
        ({}, []),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317"}, ["otlp_proto_grpc"]),
        (
            {
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces",
                "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            },
            ["otlp_proto_http"],
        ),
        (
            {
                "OTEL_TRACES_EXPORTER": "otlp",
                "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
                "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
            },
            ["otlp_proto_http"],
        ),
        ({"OTEL_TRACES_EXPORTER": "console"}, ["console"]),
        ({"OTEL_TRACES_EXPORTER": "console,otlp"}, ["console", "otlp_proto_grpc"]),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317"}, []),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "console"}, []),
    ],
)
def test_the_exporters_are_the_ones_the_environment_names(env: dict[str, str], want: list[str]) -> None:
    assert tracing.exporter_names(env) == want


def test_an_unsupported_otlp_protocol_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="http/json"):
        tracing.exporter_names({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"})


def _sidecar_process_confirm(
    stack: Stack, monkeypatch: pytest.MonkeyPatch, env: dict[str, str], title: str
) -> tuple[processes.Proc, str]:
    """A sidecar process started with these OTEL_* variables; one card confirmed through it. Returns the
    process (still running) and the action id."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    proc = stack.start_sidecar(flags=["--log-level", "info"])
    try:
        stub = stack.stub(proc.info["grpc"])
        card = stack.card(stub, title=title, request_id=uuid.uuid4().hex)
        stub.Confirm(gateway_pb2.ConfirmRequest(context=ctx(), token=card.token))
    except BaseException:
        proc.stop()
        raise
    return proc, card.action_id


def test_a_sidecar_process_prints_spans_with_otel_traces_exporter_console_and_logs_their_ids(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    proc, action_id = _sidecar_process_confirm(
        stack,
        monkeypatch,
        {
            "OTEL_TRACES_EXPORTER": "console",
            "OTEL_SERVICE_NAME": "agent-a-countersign",
            "OTEL_RESOURCE_ATTRIBUTES": "k8s.pod.name=agent-a-0,k8s.namespace.name=agents",
            "OTEL_BSP_SCHEDULE_DELAY": "50",
        },
        "console",
    )
    assert proc.stop() == 0
    assert proc.popen.stdout is not None
    os.set_blocking(proc.popen.stdout.fileno(), True)
    out = proc.popen.stdout.read().decode()
    spans = [json.loads(chunk) for chunk in _json_objects(out)]
    confirm = next(
        s
        for s in spans
        if s["name"] == f"{GATEWAY}/Confirm" and s["attributes"].get("countersign.action_id") == action_id
    )
    assert confirm["resource"]["attributes"]["service.name"] == "agent-a-countersign"
    assert confirm["resource"]["attributes"]["k8s.pod.name"] == "agent-a-0"
    assert confirm["resource"]["attributes"]["service.version"] == tracing.version()
    assert confirm["attributes"]["rpc.grpc.status_code"] == 0 and confirm["attributes"]["rpc.system"] == "grpc"
    lines = [json.loads(line) for line in proc.log().splitlines() if line.startswith("{")]
    assert all({"timestamp", "level", "logger"} <= line.keys() for line in lines), lines
    executed = next(
        line
        for line in lines
        if line.get("event") == "decision" and line["action_id"] == action_id and line["decision"] == "executed"
    )
    assert executed["trace_id"] == confirm["context"]["trace_id"].removeprefix("0x")
    assert executed["span_id"] == confirm["context"]["span_id"].removeprefix("0x")


def _json_objects(text: str) -> list[str]:
    """The top-level JSON objects in a stream of pretty-printed ones (the console exporter's output)."""
    decoder, found, at = json.JSONDecoder(), [], 0
    while (start := text.find("{", at)) != -1:
        _, end = decoder.raw_decode(text, start)
        found.append(text[start:end])
        at = end
    return found


def test_a_sidecar_process_exports_over_otlp_http_protobuf_when_the_protocol_says_so(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

    received: list[bytes] = []

    class Collector(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            if self.path == "/v1/traces":
                received.append(body)
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.end_headers()
            self.wfile.write(trace_service_pb2.ExportTraceServiceResponse().SerializeToString())

        def log_message(self, *_: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Collector)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        proc, action_id = _sidecar_process_confirm(
            stack,
            monkeypatch,
            {
                "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{server.server_address[1]}",
                "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
                "OTEL_BSP_SCHEDULE_DELAY": "50",
            },
            "otlp http",
        )
        assert proc.stop() == 0, "the batch is flushed at shutdown"
    finally:
        server.shutdown()
        server.server_close()
    names = []
    for body in received:
        request = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
        for resource_spans in request.resource_spans:
            service = {a.key: a.value.string_value for a in resource_spans.resource.attributes}["service.name"]
            for scope in resource_spans.scope_spans:
                names += [
                    (service, span.name)
                    for span in scope.spans
                    if any(
                        a.key == "countersign.action_id" and a.value.string_value == action_id for a in span.attributes
                    )
                ]
    assert ("countersign", f"{GATEWAY}/Confirm") in names, names


async def test_red_and_use_series_count_each_rpc_by_code_the_calls_held_and_each_redis_script(
    stack: Stack, sidecar: app.Sidecar
) -> None:
    scrape = _scrape(sidecar)
    assert f"countersign_max_in_flight {float(sidecar.settings.max_in_flight)}" in scrape
    count = "countersign_rpc_server_duration_seconds_count"
    before = {code: _value(scrape, count, method="Confirm", code=code) for code in ("OK", "PERMISSION_DENIED")}
    claims, settles = (
        _value(scrape, "countersign_redis_duration_seconds_count", script=script) for script in ("claim", "settle")
    )
    async with grpc.aio.insecure_channel(sidecar.address) as channel:
        stub = gateway_pb2_grpc.ToolGatewayServiceStub(channel)
        card = await _card(stub, "red")
        stack.todo.fault(path="/todos", method="POST", mode="hang_before_commit", seconds=1.0, times=1)
        try:
            running = asyncio.ensure_future(stub.Confirm(gateway_pb2.ConfirmRequest(context=ctx(), token=card.token)))
            held = 0.0
            for _ in range(50):  # while the downstream holds the call, the gauge counts it
                await asyncio.sleep(0.02)
                held = float(
                    next(
                        line.split()[1]
                        for line in (await asyncio.to_thread(_scrape, sidecar)).splitlines()
                        if line.startswith("countersign_in_flight ")
                    )
                )
                if held >= 1:
                    break
            assert held >= 1
            await running
        finally:
            stack.todo.clear_faults()
        await _rpc_error(
            stub.Confirm(
                gateway_pb2.ConfirmRequest(context=ctx(actor_id="mallory", subject_id="mallory"), token=card.token)
            )
        )
    scrape = _scrape(sidecar)
    assert _value(scrape, count, method="Confirm", code="OK") == before["OK"] + 1
    assert _value(scrape, count, method="Confirm", code="PERMISSION_DENIED") == before["PERMISSION_DENIED"] + 1
    assert _value(scrape, "countersign_rpc_server_duration_seconds_sum", method="Confirm", code="OK") >= 0.5, (
        "the Confirm that waited on the downstream until its deadline"
    )
    assert _value(scrape, "countersign_redis_duration_seconds_count", script="claim") == claims + 2
    assert _value(scrape, "countersign_redis_duration_seconds_count", script="settle") == settles + 1


# ---- the MCP front door's spans (by the MCP conventions, with the gRPC server spans' status rule) -----------------


@pytest.fixture
async def mcp_sidecar(stack: Stack) -> AsyncIterator[app.Sidecar]:
    """The sidecar in this process with its MCP endpoint (its spans are visible), on the stack's Redis and todo."""
    _provider()
    s = settings.Settings(
        registry=str(stack.registry),
        listen="127.0.0.1:0",
        redis_url=stack.redis.info["url"],
        metrics_listen="",
        keys_file=str(stack.keys),
        mcp_listen="127.0.0.1:0",
        downstream_deadline=0.5,
        lease=5.0,
    ).validate()
    running = await app.start(s)
    EXPORTER.clear()
    yield running
    await running.stop(grace=1)


def _mcp_url(sidecar: app.Sidecar) -> str:
    assert sidecar.doors is not None
    return sidecar.doors.addresses()["mcp"]


async def test_an_mcp_tools_call_is_a_server_span_continuing_the_hosts_trace_with_the_downstream_under_it(
    stack: Stack, mcp_sidecar: app.Sidecar
) -> None:
    title = "mcp traced " + uuid.uuid4().hex[:6]
    async with client(_mcp_url(mcp_sidecar), elicit=Elicitations("accept")) as c:
        await c.list_tools()
        result = await c.call_tool("create_todo", {"title": title}, meta={"io.countersign/turn": uuid.uuid4().hex})
    assert not result.is_error and result.structured_content["state"] == "SUCCEEDED", result
    action_id = result.structured_content["action"]["action_id"]
    spans = EXPORTER.get_finished_spans()
    servers = {s.name: s for s in _server_spans() if s.name.startswith("tools/")}
    assert set(servers) == {"tools/list", "tools/call create_todo"}, [s.name for s in _server_spans()]
    listed, call = servers["tools/list"], servers["tools/call create_todo"]
    assert (listed.attributes or {})["mcp.method.name"] == "tools/list"
    attrs = dict(call.attributes or {})
    assert attrs["mcp.method.name"] == "tools/call" and attrs["gen_ai.tool.name"] == "create_todo"
    assert attrs["gen_ai.operation.name"] == "execute_tool" and attrs["jsonrpc.request.id"]
    assert attrs["countersign.action_id"] == action_id and attrs["countersign.outcome"] == "succeeded"
    assert call.status.status_code == trace.StatusCode.UNSET
    # the host's trace (the SDK client sends its traceparent in params._meta) is continued
    host = next(s for s in spans if s.kind == trace.SpanKind.CLIENT and s.name == "MCP send tools/call create_todo")
    assert call.parent is not None and call.parent.span_id == host.context.span_id
    assert call.context.trace_id == host.context.trace_id
    # the path's stages and the downstream call are under the MCP span, and the downstream saw this trace
    (downstream,) = [s for s in spans if s.kind == trace.SpanKind.CLIENT and s.name == "POST /todos"]
    assert downstream.parent is not None and downstream.parent.span_id == call.context.span_id
    stages = {s.name for s in spans if s.parent is not None and s.parent.span_id == call.context.span_id}
    assert {"countersign.claim", "countersign.settle", "POST /todos"} <= stages, stages
    sent = stack.todo.writes(action_id)[0]["headers"]["traceparent"]
    assert sent.split("-")[1:3] == [format(call.context.trace_id, "032x"), format(downstream.context.span_id, "016x")]
    # the confirmation the server asked the host for during the call is in the same trace, under the call
    (asked,) = [s for s in spans if s.name == "MCP send elicitation/create"]
    assert asked.parent is not None and asked.parent.span_id == call.context.span_id


async def test_an_mcp_refusal_is_not_an_error_span_and_names_its_reason(mcp_sidecar: app.Sidecar) -> None:
    async with client(_mcp_url(mcp_sidecar)) as c:
        refused = await c.call_tool("create_todo", {"title": "x", "owner": "mallory"})
        with pytest.raises(MCPError) as unknown:  # a protocol fault in MCP's terms, the caller's all the same
            await c.call_tool("no_such_tool", {})
    assert refused.is_error and refused.structured_content["error"]["reason"] == "ARGS_INVALID", refused
    assert unknown.value.error.code == -32602
    (call,) = [s for s in _server_spans() if s.name == "tools/call create_todo"]
    assert (call.attributes or {})["countersign.reason"] == "ARGS_INVALID"
    assert call.status.status_code == trace.StatusCode.UNSET, "a refusal is the caller's business, as over gRPC"
    (missing,) = [s for s in _server_spans() if s.name == "tools/call no_such_tool"]
    attrs = dict(missing.attributes or {})
    assert (attrs["countersign.reason"], attrs["rpc.response.status_code"]) == ("TOOL_NOT_FOUND", "-32602")
    assert missing.status.status_code == trace.StatusCode.UNSET
    assert {s.name for s in _server_spans()} == {"tools/call create_todo", "tools/call no_such_tool"}, (
        "initialize and notifications are not traced, as gRPC health and reflection are not"
    )


async def test_an_mcp_call_whose_downstream_is_down_is_an_error_span(stack: Stack, tmp_path: Path) -> None:
    _provider()
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"
    down = await app.start(
        settings.Settings(
            registry=str(processes.write_registry(tmp_path, f"http://{dead}")),
            listen="127.0.0.1:0",
            redis_url=stack.redis.info["url"],
            metrics_listen="",
            keys_file=str(stack.keys),
            mcp_listen="127.0.0.1:0",
            downstream_deadline=0.5,
            lease=5.0,
        ).validate()
    )
    try:
        EXPORTER.clear()
        async with client(_mcp_url(down)) as c:
            failed = await c.call_tool("list_todos", {})
    finally:
        await down.stop(grace=1)
    assert failed.is_error and failed.structured_content["error"]["reason"] == "DOWNSTREAM_UNAVAILABLE", failed
    (call,) = [s for s in _server_spans() if s.name == "tools/call list_todos"]
    attrs = dict(call.attributes or {})
    assert call.status.status_code == trace.StatusCode.ERROR
    assert (attrs["countersign.reason"], attrs["error.type"]) == ("DOWNSTREAM_UNAVAILABLE", "UNAVAILABLE")


def test_a_sidecar_process_exports_over_otlp_grpc_what_a_collector_decodes(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The gRPC exporter's requests are encoded by observability/otlp.py: a real gRPC collector receives the
    Confirm's spans, parented and attributed as recorded."""
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

    received: list[trace_service_pb2.ExportTraceServiceRequest] = []

    class Collector(trace_service_pb2_grpc.TraceServiceServicer):
        def Export(self, request: trace_service_pb2.ExportTraceServiceRequest, context: object) -> object:
            received.append(request)
            return trace_service_pb2.ExportTraceServiceResponse()

    server = grpc.server(__import__("concurrent.futures").futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Collector(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        proc, action_id = _sidecar_process_confirm(
            stack,
            monkeypatch,
            {
                "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
                "OTEL_EXPORTER_OTLP_INSECURE": "true",
                "OTEL_BSP_SCHEDULE_DELAY": "50",
            },
            "otlp grpc",
        )
        assert proc.stop() == 0, "the batch is flushed at shutdown"
    finally:
        server.stop(0)
    spans = {}
    for request in received:
        for resource_spans in request.resource_spans:
            service = {a.key: a.value.string_value for a in resource_spans.resource.attributes}["service.name"]
            assert service == "countersign"
            for scope in resource_spans.scope_spans:
                spans.update({span.span_id: span for span in scope.spans})
    (confirm,) = [s for s in spans.values() if s.name == f"{GATEWAY}/Confirm"]
    attributes = {a.key: a.value for a in confirm.attributes}
    assert attributes["countersign.action_id"].string_value == action_id
    assert attributes["rpc.grpc.status_code"].int_value == 0 and attributes["countersign.replayed"].bool_value is False
    children = {s.name: s for s in spans.values() if s.trace_id == confirm.trace_id and s.parent_span_id}
    assert {"countersign.claim", "countersign.policy", "countersign.settle", "POST /todos"} <= set(children)
    assert all(children[n].parent_span_id == confirm.span_id for n in children if n.startswith("countersign."))
    client_span = {a.key: a.value for a in children["POST /todos"].attributes}
    assert client_span["http.response.status_code"].int_value == 201
    assert confirm.end_time_unix_nano > confirm.start_time_unix_nano > 0
