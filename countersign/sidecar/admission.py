"""Admission: shed a call with RESOURCE_EXHAUSTED once the sidecar already holds --max-in-flight calls.

"Holds" means every call gRPC has received and not yet answered, not only those running in a handler.
grpc.aio hands received calls to handlers one per event-loop turn, so when the sidecar is short of CPU the
backlog waits inside gRPC core, where no handler can count it: a limit on handlers alone never sheds, and
callers queue until their deadlines pass (measured: 64 callers, 4 handlers running, 60 calls waiting in
core). The server's channelz counters (calls started minus calls finished) do see that backlog. The gate
reads them while calls arrive: every `refresh` (20 ms) near the limit, up to every 50 ms far below it. Between
reads the gate subtracts the calls that left, so the bound is soft by the arrivals of one interval.

A shed call is answered before any work (no Redis, no span, nothing downstream) and carries a
google.rpc.RetryInfo so a client backs off instead of hammering.
"""

from __future__ import annotations

import importlib
import json
import logging
import time
from collections.abc import Callable
from typing import Any

import grpc
from grpc_health.v1 import health_pb2
from grpc_health.v1._async import HealthServicer

from countersign.sidecar.errors import ResourceExhausted

log = logging.getLogger("countersign.admission")

OpenCalls = Callable[[], int]
MAX_REFRESH = 0.05               # seconds between channelz reads at most, while calls arrive
RATE_WINDOW = 0.25               # seconds over which the rate of finished calls is measured
MIN_RETRY, MAX_RETRY = 0.02, 2.0  # bounds of the RetryInfo delay, seconds


class Gate:
    """Counts the calls in the sidecar and sheds beyond `limit` (health and reflection are not shed)."""

    def __init__(self, limit: int, open_calls: OpenCalls | None = None, *, refresh: float = 0.02,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.limit, self.in_flight = limit, 0
        self.open_calls, self.refresh, self.clock = open_calls, refresh, clock
        self.held = 0              # calls received by gRPC and not yet answered, as of the last read
        self.watches = 0           # Health.Watch streams: open for as long as a watcher likes; not load
        self._next_read = float("-inf")
        self._left = 0             # calls that finished or were shed since the last read
        self.rate = 0.0            # calls finished per second (smoothed over windows of RATE_WINDOW)
        self._window_at, self._window_done = clock(), 0

    def admit(self) -> None:
        """Take a slot for this call, or raise OVERLOADED. Pair every admit() with a release()."""
        now = self.clock()
        if now - self._window_at >= RATE_WINDOW:
            self.rate = 0.5 * self.rate + 0.5 * self._window_done / (now - self._window_at)
            self._window_at, self._window_done = now, 0
        if self.in_flight >= self.limit:
            self._shed(self.in_flight)
        if self.open_calls is not None:
            if now >= self._next_read:
                self._left = 0
                try:
                    self.held = self.open_calls() - self.watches
                except Exception:   # channelz is a diagnostics API: losing it must not stop the sidecar
                    log.exception("channelz read failed; admission falls back to counting handlers")
                    self.open_calls = None
                # far from the limit, the backlog cannot reach it soon: read again when, at twice the
                # rate calls finish, it could (a read costs 80-250 µs: every 5 ms it was 5 % of the CPU)
                room = self.limit - self.held
                wait = room / (2 * self.rate) if self.rate > 0 and room > 0 else 0.0
                self._next_read = now + min(MAX_REFRESH, max(self.refresh, wait))
            # calls held at the read, less those that left since (finished or shed); this one is among them
            if self.held - self._left > self.limit:
                self._shed(self.held - self._left)
        self.in_flight += 1

    @property
    def holding(self) -> int:
        """The calls held as admit() last counted them (the countersign_in_flight gauge reads this)."""
        if self.open_calls is None:
            return self.in_flight
        return max(self.in_flight, self.held - self._left)

    def release(self) -> None:
        self.in_flight -= 1
        self._left += 1
        self._window_done += 1

    def _shed(self, held: int) -> None:
        self._left += 1
        # come back when the backlog ahead would have been served: retrying sooner is shed again, and
        # each shed still costs the sidecar a gRPC call (about 0.3 ms of CPU, measured)
        drain = held / self.rate if self.rate > 0 else MIN_RETRY
        raise ResourceExhausted("OVERLOADED", f"{held} calls in the sidecar, more than {self.limit}; retry with "
                                "backoff", metadata={"limit": str(self.limit)},
                                retry_after=min(MAX_RETRY, max(MIN_RETRY, drain)))


def _cygrpc() -> Any:
    """gRPC core's channelz reads: the module grpcio-channelz's own servicer calls (a test pins it)."""
    return importlib.import_module("grpc._cython.cygrpc")


def channelz_open_calls(server_id: int) -> OpenCalls:
    """A reader of one gRPC server's calls started and not yet finished, from its channelz node."""
    cygrpc = _cygrpc()

    def read() -> int:
        data = json.loads(cygrpc.channelz_get_server(server_id))["server"]["data"]
        return int(data.get("callsStarted", 0)) - int(data.get("callsSucceeded", 0)) - int(data.get("callsFailed", 0))

    return read


def channelz_server_ids() -> set[int]:
    """Ids of every gRPC server in this process (channelz pages through them)."""
    cygrpc = _cygrpc()
    ids: set[int] = set()
    start = 0
    while True:
        page = json.loads(cygrpc.channelz_get_servers(start))
        for server in page.get("server", []):
            ids.add(int(server["ref"]["serverId"]))
        if page.get("end", True) or not page.get("server"):
            return ids
        start = max(ids) + 1


def new_server(options: list[tuple[str, int]]) -> tuple[grpc.aio.Server, OpenCalls | None]:
    """grpc.aio.server(options) and a reader of its open calls (None where channelz is unavailable)."""
    try:
        before = channelz_server_ids()
    except Exception:
        log.warning("channelz unavailable: --max-in-flight counts only calls running in a handler")
        return grpc.aio.server(options=options), None
    server = grpc.aio.server(options=options)
    new = channelz_server_ids() - before
    if len(new) != 1:
        log.warning("could not tell this server's channelz node apart (%d new): --max-in-flight counts only "
                    "calls running in a handler", len(new))
        return server, None
    return server, channelz_open_calls(new.pop())


class Health(HealthServicer):  # type: ignore[misc]  # grpc_health ships no types
    """The standard health service, telling the gate about Watch streams (held open by design, not load)."""

    def __init__(self, gate: Gate) -> None:
        super().__init__()
        self.gate = gate

    async def Watch(self, request: health_pb2.HealthCheckRequest, context: Any) -> None:
        self.gate.watches += 1
        try:
            await super().Watch(request, context)
        finally:
            self.gate.watches -= 1
