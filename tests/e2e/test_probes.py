"""The metrics port's probes (issue 16, point 2): /healthz, /readyz and 404 elsewhere, against real parts.

A real sidecar process (or one in this process where the event loop itself is the fault), a real
redis-server paused with SIGSTOP for a Redis that stops answering, SIGTERM for the drain.
"""

from __future__ import annotations

import asyncio
import json
import signal
import threading
import time
import urllib.error
import urllib.request
import uuid
from typing import Any

import redis

from countersign.sidecar import app, settings
from countersign.testing.calls import ctx
from countersign.testing.stack import Stack
from countersign.v1 import common_pb2, gateway_pb2


def get(address: str, path: str, method: str = "GET") -> tuple[int, str]:
    """(status, body) of one request; a hang fails the test through the timeout."""
    request = urllib.request.Request(f"http://{address}{path}", method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def until(check: Any, seconds: float = 10.0) -> Any:
    deadline = time.monotonic() + seconds
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.05)


def test_the_metrics_port_serves_metrics_health_and_readiness_and_nothing_else(stack: Stack) -> None:
    metrics = stack.sidecar.info["metrics"]
    code, body = get(metrics, "/metrics")
    assert code == 200 and "countersign_executions_total" in body
    code, body = get(metrics, "/healthz")
    assert code == 200 and json.loads(body) == {"status": "alive", "grpc": "serving"}
    code, body = get(metrics, "/readyz")
    ready = json.loads(body)
    assert code == 200 and ready["status"] == "ready" and ready["redis"] == "ok" and ready["grpc"] == "serving"
    assert ready["registry"].startswith("loaded, policy_version ")
    for path in ("/", "/metricsx", "/healthz/extra", "/favicon.ico", "/debug"):
        code, body = get(metrics, path)
        assert code == 404 and "countersign_" not in body, path
    assert get(metrics, "/readyz", method="POST")[0] == 405


def test_readiness_fails_within_its_bound_while_redis_is_silent_and_liveness_does_not(fresh_stack: Stack) -> None:
    metrics = fresh_stack.sidecar.info["metrics"]
    fresh_stack.redis.pause()
    try:
        time.sleep(1.1)  # past the reuse of the last answer
        started = time.monotonic()
        code, body = get(metrics, "/readyz")
        waited = time.monotonic() - started
        assert code == 503, body
        answer = json.loads(body)
        assert answer["status"] == "not ready" and answer["grpc"] == "serving"
        assert answer["redis"].startswith(("no answer within", "unreachable")), answer
        assert "redis://" not in body, "never the URL: it may carry a password"
        assert waited < 9, "a silent Redis is an answer, not a hang"
        assert get(metrics, "/healthz")[0] == 200, "a Redis outage must not get the sidecar restarted"
    finally:
        fresh_stack.redis.resume()
    assert until(lambda: get(metrics, "/readyz")[0] == 200), "ready again once Redis answers"


def test_readiness_turns_503_while_draining_after_sigterm_and_liveness_stays_200(stack: Stack) -> None:
    sidecar = stack.start_sidecar(flags=["--grace", "5s"])
    metrics = sidecar.info["metrics"]
    stub = Stack.stub(stack, sidecar.info["grpc"])
    card = stack.card(stub, request_id=uuid.uuid4().hex, title="drain")
    stack.todo.fault(path="/todos", method="POST", mode="hang_before_commit", seconds=1.5, times=1)
    result: dict[str, Any] = {}

    def confirm() -> None:
        result["action"] = stub.Confirm(gateway_pb2.ConfirmRequest(context=ctx(), token=card.token), timeout=15).action

    thread = threading.Thread(target=confirm)
    thread.start()
    try:
        assert until(lambda: stack.todo.writes(card.action_id), 5)
        assert get(metrics, "/readyz")[0] == 200
        sidecar.popen.send_signal(signal.SIGTERM)
        draining = until(lambda: (lambda r: r if r[0] == 503 else None)(get(metrics, "/readyz")), 5)
        assert draining and json.loads(draining[1])["grpc"] == "draining"
        assert get(metrics, "/healthz")[0] == 200, "a draining sidecar is alive: the kubelet must not kill it"
    finally:
        thread.join(15)
        stack.todo.clear_faults()
    assert result["action"].state == common_pb2.ACTION_STATE_SUCCEEDED
    assert sidecar.popen.wait(15) == 0


def test_a_flood_of_readiness_probes_is_not_a_flood_of_redis_pings(stack: Stack) -> None:
    client = redis.Redis.from_url(stack.redis.info["url"])

    def pings() -> int:
        return int(client.info("commandstats").get("cmdstat_ping", {}).get("calls", 0))

    before = pings()
    for _ in range(50):
        assert get(stack.sidecar.info["metrics"], "/readyz")[0] == 200
    assert pings() - before < 10
    client.close()


async def test_a_wedged_event_loop_fails_liveness_instead_of_hanging_it(stack: Stack) -> None:
    """The loop itself is the fault here, so the sidecar runs in this process and the test blocks its loop."""
    s = settings.Settings(
        registry=str(stack.registry),
        listen="127.0.0.1:0",
        redis_url=stack.redis.info["url"],
        metrics_listen="127.0.0.1:0",
        keys_file=str(stack.keys),
    ).validate()
    running = await app.start(s)
    try:
        assert await asyncio.to_thread(get, running.metrics_address, "/healthz") == (
            200,
            json.dumps({"status": "alive", "grpc": "serving"}) + "\n",
        )
        answer: dict[str, Any] = {}

        def probe() -> None:
            answer["healthz"] = get(running.metrics_address, "/healthz")
            answer["readyz"] = get(running.metrics_address, "/readyz")

        thread = threading.Thread(target=probe)
        thread.start()
        time.sleep(4)  # a handler that blocks the loop, as a bug would
        thread.join(10)
        assert answer["healthz"][0] == 503 and json.loads(answer["healthz"][1])["status"] == "stuck"
        assert answer["readyz"][0] == 503
    finally:
        await running.stop(grace=1)
