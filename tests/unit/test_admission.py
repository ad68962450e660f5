"""Admission (issue 7, overload): calls that wait inside gRPC count against --max-in-flight.

grpc.aio hands a received call to a handler one per event-loop turn. When the loop is short of CPU the
backlog waits in gRPC core, where a count of running handlers never sees it. These tests build that
backlog for real (a handler that holds the loop, as CPU-bound work does) and check that the gate sheds it.
"""

from __future__ import annotations

import asyncio
import threading
import time

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2

from countersign.errors import ResourceExhausted
from countersign.sidecar.admission import Gate, new_server
from countersign.sidecar.server import rich_status
from countersign.testing.calls import error_info

METHOD = "/test.Busy/Work"


def _serve_busy(
    gate_of: list[Gate],
    use_channelz: bool,
    ready: threading.Event,
    stop: threading.Event,
    port: list[int],
    hold_s: float,
    limit: int,
) -> None:
    """A real gRPC server whose one method holds the event loop for hold_s (CPU-bound work does that)."""

    async def main() -> None:
        server, open_calls = new_server([])
        assert open_calls is not None, "channelz must be readable: admission depends on it"
        gate = Gate(limit, open_calls if use_channelz else None, refresh=0.0)
        gate_of.append(gate)

        async def work(request: bytes, context: grpc.aio.ServicerContext) -> bytes:  # type: ignore[type-arg]
            caller = dict(context.invocation_metadata() or ()).get("caller", "")
            try:
                lane = gate.admit(("t", str(caller)))
            except ResourceExhausted as shed:
                await context.abort_with_status(rich_status(shed))  # type: ignore[attr-defined]  # grpc.aio stubs lag
            try:
                time.sleep(hold_s)  # the point: a loop with no time to accept calls
                return b"done"
            finally:
                gate.release(lane)

        handler = grpc.unary_unary_rpc_method_handler(work)
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("test.Busy", {"Work": handler}),))
        port.append(server.add_insecure_port("127.0.0.1:0"))
        await server.start()
        ready.set()
        await asyncio.get_running_loop().run_in_executor(None, stop.wait)
        await server.stop(0)

    asyncio.run(main())


def _flood(
    use_channelz: bool, calls: int = 12, limit: int = 2, hold_s: float = 0.15, callers: list[str] | None = None
) -> list[str]:
    gates: list[Gate] = []
    ready, stop, port = threading.Event(), threading.Event(), []
    thread = threading.Thread(target=_serve_busy, args=(gates, use_channelz, ready, stop, port, hold_s, limit))
    thread.start()
    try:
        assert ready.wait(10)
        with grpc.insecure_channel(f"127.0.0.1:{port[0]}") as channel:
            grpc.channel_ready_future(channel).result(timeout=10)
            work = channel.unary_unary(METHOD)
            futures = [work.future(b"", timeout=30, metadata=(("caller", c),)) for c in (callers or ["a"] * calls)]
            outcomes = []
            for f in futures:
                try:
                    f.result()
                    outcomes.append("served")
                except grpc.RpcError as exc:
                    assert exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, exc
                    assert error_info(exc).reason == "OVERLOADED"
                    outcomes.append("shed")
        assert gates[0].in_flight == 0, "every admitted call released its slot"
        return outcomes
    finally:
        stop.set()
        thread.join(10)


class Clock:
    """A clock the test moves (the only fake here: a user never runs one)."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_gate_sheds_exactly_the_calls_beyond_the_limit_and_says_how_long_the_backlog_takes() -> None:
    clock, held = Clock(), [6]
    gate = Gate(2, lambda: held[0], refresh=0.02, clock=clock)
    outcomes = []
    for _ in range(6):  # six calls held at the read; each leaves (shed, or served at once)
        try:
            gate.admit()
            gate.release()
            outcomes.append("served")
        except ResourceExhausted:
            outcomes.append("shed")
    assert outcomes.count("shed") == 4 and outcomes[-2:] == ["served", "served"]
    clock.now += 0.3  # a rate window passes: 2 finished in 0.3 s
    held[0] = 12
    with pytest.raises(ResourceExhausted) as shed:
        gate.admit()
    assert shed.value.reason == "OVERLOADED" and shed.value.metadata == {"limit": "2"}
    assert shed.value.retry_after == pytest.approx(min(2.0, 12 / gate.rate))
    assert gate.in_flight == 0


def test_a_full_gate_sheds_the_lane_over_its_share_and_admits_the_others() -> None:
    """Caller A holds every slot and more calls of A wait inside gRPC; B's calls (and A's own quick ones) are
    admitted, A's next slow call is shed, and once B holds its share B is shed too."""
    clock, held = Clock(), [0]
    gate = Gate(4, lambda: held[0], refresh=0.02, clock=clock)
    a, b = ("t", "a"), ("t", "b")
    lanes = [gate.admit(a) for _ in range(4)]  # A fills the gate
    held[0], clock.now = 12, clock.now + 0.03  # and 8 more of A's calls wait inside gRPC
    with pytest.raises(ResourceExhausted) as shed:
        gate.admit(a)
    assert "more than its share" in shed.value.message
    mine = gate.admit(b)  # B: nothing held, so under its share of 4 / 2
    status = gate.admit(a, quick=True)  # A's status call has a lane of its own
    assert gate.in_flight == 6
    with pytest.raises(ResourceExhausted):  # B's second: 2 calls > 4 / 3 lanes
        gate.admit(b)
    for lane in (*lanes, status):
        gate.release(lane)
    assert gate.in_flight == 1 and gate.lanes == {mine: 1}


def test_calls_waiting_inside_grpc_are_counted_and_shed() -> None:
    outcomes = _flood(use_channelz=True)
    # the first call holds the loop; the other 11 wait in gRPC core meanwhile, and the gate sees them
    assert outcomes.count("shed") >= 8, outcomes
    assert 1 <= outcomes.count("served") <= 4, outcomes


def test_another_callers_call_behind_that_backlog_is_served() -> None:
    """Caller A's eleven calls wait inside gRPC behind a busy loop, B's one call among them (sixth). The gate sheds
    A's backlog as before, and serves B's call: A's backlog is A's, not B's. (With one caller, the sixth call is
    shed: see the test above.)"""
    outcomes = _flood(use_channelz=True, callers=["a"] * 5 + ["b"] + ["a"] * 6)
    assert outcomes[5] == "served", outcomes
    assert (outcomes[:5] + outcomes[6:]).count("shed") >= 7, outcomes


def test_a_count_of_running_handlers_alone_never_sees_that_backlog() -> None:
    """Why the gate reads channelz: without it the same flood is queued, every caller waiting its turn."""
    outcomes = _flood(use_channelz=False)
    assert outcomes == ["served"] * 12


def test_a_retry_delay_over_a_second_is_a_valid_duration() -> None:
    shed = ResourceExhausted("OVERLOADED", "busy", retry_after=1.5)
    details = rich_status(shed).trailing_metadata[0][1]
    parsed = status_pb2.Status.FromString(details)
    info = error_details_pb2.RetryInfo()
    assert any(d.Unpack(info) for d in parsed.details)
    assert (info.retry_delay.seconds, info.retry_delay.nanos) == (1, 500_000_000)


# -- fairness (issue 11, item 16): one caller's slow calls never starve another caller ------------------------
