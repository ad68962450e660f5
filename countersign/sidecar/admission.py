"""Admission: shed a call with RESOURCE_EXHAUSTED once the sidecar already holds --max-in-flight calls.

"Holds" means every call gRPC has received and not yet answered, not only those running in a handler.
grpc.aio hands received calls to handlers one per event-loop turn, so when the sidecar is short of CPU the
backlog waits inside gRPC core, where no handler can count it: a limit on handlers alone never sheds, and
callers queue until their deadlines pass (measured: 64 callers, 4 handlers running, 60 calls waiting in
core). The server's channelz counters (calls started minus calls finished) do see that backlog. The gate
reads them while calls arrive: every `refresh` (20 ms) near the limit, up to every 50 ms far below it. Between
reads the gate subtracts the calls that left, so the bound is soft by the arrivals of one interval.

Fair shares. One caller must not starve the others: a caller that holds every slot with reads the downstream
answers slowly would otherwise get everyone else's calls shed, even a GetAction. So the gate sheds a call only
when the sidecar is full (more than the limit held) *and* the call's lane holds more than its share, limit / n
of the n lanes active now. A lane is one caller (tenant and actor of the CallContext, else the peer) and one kind
of call: quick calls (GetAction, Reject, continuations, CheckReply: Redis only, never a downstream) have their
own lane, so neither another caller's slow calls nor the caller's own can shed its status calls. What a lane
holds is its calls in a handler plus its part of the calls waiting inside gRPC, estimated from its part of the
recent arrivals (every call passes the gate, shed or not, so arrivals show who fills the backlog). With one lane
this is exactly the global limit. A lane under its share is admitted even when the sidecar is full, so the
sidecar may hold up to twice the limit for as long as over-share lanes drain; and with more lanes than slots
every share is under one call, so every call is shed while the sidecar is full, as without fair shares.

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

from countersign.errors import ResourceExhausted
from countersign.reasons import Reason

log = logging.getLogger("countersign.admission")

OpenCalls = Callable[[], int]
Lane = tuple[tuple[str, str], bool]  # ((tenant, actor) or ("", peer), quick)
MAX_REFRESH = 0.05  # seconds between channelz reads at most, while calls arrive
RATE_WINDOW = 0.25  # seconds over which the rate of finished calls is measured
MIN_RETRY, MAX_RETRY = 0.02, 2.0  # bounds of the RetryInfo delay, seconds
FORGET = 0.1  # a lane whose decayed arrivals fall below this (and holds nothing) is forgotten


class Gate:
    """Counts the calls in the sidecar and, beyond `limit`, sheds those of lanes over their fair share (health
    and reflection are not gated)."""

    def __init__(
        self,
        limit: int,
        open_calls: OpenCalls | None = None,
        *,
        refresh: float = 0.02,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limit, self.in_flight = limit, 0
        self.open_calls, self.refresh, self.clock = open_calls, refresh, clock
        self.held = 0  # calls received by gRPC and not yet answered, as of the last read
        self.watches = 0  # Health.Watch streams: open for as long as a watcher likes; not load
        self._next_read = float("-inf")
        self._left = 0  # calls that finished or were shed since the last read
        self.rate = 0.0  # calls finished per second (smoothed over windows of RATE_WINDOW)
        self._window_at, self._window_done = clock(), 0
        self.lanes: dict[Lane, int] = {}  # calls in a handler, per lane
        self.arrivals: dict[Lane, float] = {}  # calls that reached the gate, per lane, halved every window
        self._arrived = 0.0  # their sum

    def admit(self, caller: tuple[str, str] = ("", ""), quick: bool = False) -> Lane:
        """Take a slot for this call, or raise OVERLOADED. Pair every admit() with a release() of its lane."""
        now = self.clock()
        if now - self._window_at >= RATE_WINDOW:
            self._roll(now)
        lane = (caller, quick)
        before = self.arrivals.get(lane, 0.0)
        # this lane's part of the calls before this one (all of them, for the first call the gate sees)
        part = before / self._arrived if self._arrived else 1.0
        self.arrivals[lane] = before + 1.0
        self._arrived += 1.0
        held = self.in_flight + 1  # this call among them
        if self.open_calls is not None:
            if now >= self._next_read:
                self._left = 0
                try:
                    self.held = self.open_calls() - self.watches
                except Exception:  # channelz is a diagnostics API: losing it must not stop the sidecar
                    log.exception("channelz read failed; admission falls back to counting handlers")
                    self.open_calls = None
                # far from the limit, the backlog cannot reach it soon: read again when, at twice the
                # rate calls finish, it could (a read costs 80-250 µs: every 5 ms it was 5 % of the CPU)
                room = self.limit - self.held
                wait = room / (2 * self.rate) if self.rate > 0 and room > 0 else 0.0
                self._next_read = now + min(MAX_REFRESH, max(self.refresh, wait))
            # calls held at the read, less those that left since (finished or shed); this one is among them
            held = max(held, self.held - self._left)
        if held > self.limit:
            # full: shed this call if its lane holds more than its share: its calls in a handler, this one, and
            # its part of the others still waiting inside gRPC (judged by its part of the arrivals before)
            waiting = held - self.in_flight - 1
            load = self.lanes.get(lane, 0) + 1 + waiting * part
            share = self.limit / len(self.arrivals)
            if load > share:
                self._shed(held, share)
        self.in_flight += 1
        self.lanes[lane] = self.lanes.get(lane, 0) + 1
        return lane

    @property
    def holding(self) -> int:
        """The calls held as admit() last counted them (the countersign_in_flight gauge reads this)."""
        if self.open_calls is None:
            return self.in_flight
        return max(self.in_flight, self.held - self._left)

    def release(self, lane: Lane = (("", ""), False)) -> None:
        self.in_flight -= 1
        left = self.lanes.get(lane, 0) - 1
        if left > 0:
            self.lanes[lane] = left
        else:
            self.lanes.pop(lane, None)
        self._left += 1
        self._window_done += 1

    def _roll(self, now: float) -> None:
        """A rate window passed: measure the finish rate, let old arrivals fade, forget idle lanes."""
        self.rate = 0.5 * self.rate + 0.5 * self._window_done / (now - self._window_at)
        self._window_at, self._window_done = now, 0
        for lane, count in list(self.arrivals.items()):
            if count * 0.5 < FORGET and lane not in self.lanes:
                del self.arrivals[lane]
            else:
                self.arrivals[lane] = count * 0.5
        self._arrived = sum(self.arrivals.values())

    def _shed(self, held: int, share: float) -> None:
        self._left += 1
        # come back when the backlog ahead would have been served: retrying sooner is shed again, and
        # each shed still costs the sidecar a gRPC call (about 0.3 ms of CPU, measured)
        drain = held / self.rate if self.rate > 0 else MIN_RETRY
        raise ResourceExhausted(
            Reason.OVERLOADED,
            f"{held} calls in the sidecar, more than {self.limit}, and this "
            f"caller holds more than its share ({share:.1f} calls of {len(self.arrivals)} "
            "callers); retry with backoff",
            metadata={"limit": str(self.limit)},
            retry_after=min(MAX_RETRY, max(MIN_RETRY, drain)),
        )


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
        log.warning(
            "could not tell this server's channelz node apart (%d new): --max-in-flight counts only "
            "calls running in a handler",
            len(new),
        )
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
