"""Prometheus metrics (docs/design.md §10): the one place that turns domain events into series.

Labels are bounded: tool names come from the registry (anything else is "other"), reasons are the
sidecar's own (the Reason enum; anything else, such as a downstream's free-text reason passed on to a caller,
is "OTHER"), results are stable lower-snake words. Never an action id, token or user id.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from types import TracebackType
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge

from countersign.observability import tracing
from countersign.observability.series import CounterSeries, HistogramSeries
from countersign.reasons import Reason, label

# The reason label's values: every Reason of the sidecar's own (countersign/reasons.py), and OTHER for anything
# else, such as a downstream's refusal passed on to the caller: a downstream cannot grow the number of series.
REASONS = frozenset(Reason)

# Sub-millisecond decisions up to multi-second downstream calls.
BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

# The label values created at start (see Metrics._zero_series); the code paths that count them are
# pipeline.py (claims), compensate.py, reconcile.py and server.py (refusals by RPC).
RPCS = (
    "Invoke",
    "Confirm",
    "Reject",
    "GetAction",
    "Compensate",
    "Reconcile",
    "CreateGrant",
    "ListGrants",
    "RevokeGrant",
    "OpenContinuation",
    "ClaimContinuation",
    "SettleContinuation",
    "ReleaseContinuation",
    "CheckReply",
)
PRECREATED_REASONS = (Reason.OVERLOADED, Reason.STORE_UNAVAILABLE)  # refusals an alert matches, created for every RPC
CLAIM_RESULTS = ("won", "running", "replayed", "tampered")
REFUSED_CLAIMS = ("expired", "forbidden", "role", "approval_required", "approval_invalid")
COMPENSATION_RESULTS = ("proposed", "compensated", "failed", "unknown")  # proposed: the inverse's card issued
EXECUTION_OUTCOMES = ("succeeded", "failed", "unknown", "not_sent")  # not_sent: the card was given back
RECONCILE_RESULTS = ("succeeded", "failed", "not_applied", "still_unknown", "manual_review", "key_not_listed")
ACTION_STATES = ("running", "unknown", "lease_lapsed", "needs_manual_review", "tool_not_in_registry")


class _Off:
    """Stands in for every metric when telemetry is off (for measuring what telemetry costs)."""

    def labels(self, *_: str) -> _Off:
        return self

    def inc(self, amount: float = 1) -> None:
        pass

    def observe(self, amount: float) -> None:
        pass

    def set(self, value: float) -> None:
        pass

    def set_function(self, f: Callable[[], float]) -> None:
        pass


class _Children:
    """A labelled metric whose children are found in a dict of its own, keyed by the label values as given.

    prometheus_client's ``labels()`` converts every value with ``str()``, checks their number and takes a lock on
    every call; the path calls it a dozen times per Confirm with values that repeat (measured in instructions:
    bench/telemetry.py --instructions, notes/lean-meter.md). The first call of a label set goes to ``labels()``;
    later ones are one dict lookup. Values are ``str`` or ``StrEnum`` (whose ``str()`` is its value, so equal
    keys name the same child). Everything else (collect, remove, ...) is the metric's own.
    """

    __slots__ = ("_children", "_metric")

    def __init__(self, metric: Any) -> None:
        self._metric = metric
        self._children: dict[tuple[str, ...], Any] = {}

    def labels(self, *values: str) -> Any:
        child = self._children.get(values)
        if child is None:  # a race makes the same child twice through the locked labels(): harmless
            child = self._children[values] = self._metric.labels(*values)
        return child

    def __getattr__(self, name: str) -> Any:
        return getattr(self._metric, name)


class _NotTimed:
    """timed() with telemetry off: nothing at all (one shared instance; it keeps no state)."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, *_: object) -> None:
        return None


_NOT_TIMED = _NotTimed()


_clock = time.perf_counter


class _Timed:
    """One stage of the path: a latency observation, and a child span when the trace is recorded.

    A class rather than a generator-based context manager: made once per use (stages overlap across concurrent
    calls), cheaper to enter and leave than @contextmanager's generator.
    """

    __slots__ = ("_child", "_name", "_span", "_start")

    def __init__(self, child: Any, name: str, span: bool) -> None:
        self._child = child
        self._name = name
        self._span: Any = span  # True: make a span if the trace is recorded; then the span's context manager

    def __enter__(self) -> None:
        self._start = _clock()
        if self._span:
            if tracing.recording and tracing.recorded.get() is not None:  # a child span when the trace is recorded
                self._span = tracing.stage_span(self._name)
                self._span.__enter__()
            else:
                self._span = None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        try:
            if self._span:
                self._span.__exit__(kind, exc, tb)
        finally:
            self._child.observe(_clock() - self._start)


class Metrics:
    def __init__(
        self, tools: frozenset[str] = frozenset(), *, enabled: bool = True, reads: frozenset[str] = frozenset()
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._stages: dict[str, Any] = {}  # timed()'s children by stage name
        self.tools = tools
        self.enabled = enabled
        r = self.registry
        self.invocations = CounterSeries(
            "countersign_invocations",
            "Invoke calls by tool, kind and decision",
            ["tool", "kind", "decision"],
            registry=r,
        )
        self.claims = CounterSeries("countersign_claims", "Confirm claims by result", ["tool", "result"], registry=r)
        self.replay_hits = CounterSeries(
            "countersign_replay_hits", "Duplicates answered from a stored outcome", ["tool", "source"], registry=r
        )
        self.executions = CounterSeries(
            "countersign_executions", "Downstream executions by outcome", ["tool", "outcome"], registry=r
        )
        self.refusals = CounterSeries(
            "countersign_refusals", "Requests refused, by reason", ["rpc", "reason"], registry=r
        )
        self.fail_closed = CounterSeries(
            "countersign_fail_closed", "Requests refused because the store was unavailable", ["rpc"], registry=r
        )
        self.reconciliations = CounterSeries(
            "countersign_reconciliations", "Reconciliation attempts by result", ["tool", "result"], registry=r
        )
        self.compensations = CounterSeries(
            "countersign_compensations", "Compensations by result", ["tool", "result"], registry=r
        )
        self.audit_write_failures = Counter(
            "countersign_audit_write_failures",
            "Audit events that could not be written (counted, never raised)",
            registry=r,
        )
        self.guard = CounterSeries("countersign_reply_guard", "Reply guard verdicts", ["verdict"], registry=r)
        self.settle_retries = CounterSeries(
            "countersign_settle_retries", "Settles retried in the background", ["result"], registry=r
        )
        self.stage = HistogramSeries(
            "countersign_stage_duration_seconds",
            "Time spent per pipeline stage",
            ["stage"],
            buckets=BUCKETS,
            registry=r,
        )
        self.downstream = HistogramSeries(
            "countersign_downstream_duration_seconds",
            "Downstream call latency",
            ["tool", "adapter"],
            buckets=BUCKETS,
            registry=r,
        )
        self.actions = Gauge(
            "countersign_actions",
            "Actions seen in a state by this sidecar's last reconciler scan",
            ["state"],
            registry=r,
        )

        # ---- RED and USE (issue 16): every RPC by method and gRPC code, saturation against the limit, and the
        # Redis round trip of each script. Observed in one place each: the rpc wrapper, the gate, the store.
        self.rpc_duration = HistogramSeries(
            "countersign_rpc_server_duration_seconds",
            "gRPC calls handled, by method and status code (OTel rpc.server.duration): rate, errors and duration",
            ["method", "code"],
            buckets=BUCKETS,
            registry=r,
        )
        self.in_flight = Gauge(
            "countersign_in_flight",
            "Calls the sidecar holds now (running, or received and waiting inside gRPC), as admission counts them",
            registry=r,
        )
        self.max_in_flight = Gauge(
            "countersign_max_in_flight",
            "The configured --max-in-flight: beyond it calls are shed with RESOURCE_EXHAUSTED",
            registry=r,
        )
        self.redis = HistogramSeries(
            "countersign_redis_duration_seconds",
            "Redis round trips by script (failed ones included)",
            ["script"],
            buckets=BUCKETS,
            registry=r,
        )

        self._zero_series(tools, reads)
        off: Any = _Off()
        for name, value in list(vars(self).items()):
            if isinstance(value, (CounterSeries, HistogramSeries)):  # children in a dict of their own already
                if not enabled:
                    setattr(self, name, off)
            elif isinstance(value, (Counter, Gauge)):
                if not enabled:
                    setattr(self, name, off)
                elif value._labelnames:  # labelled: its children looked up in a dict of our own
                    setattr(self, name, _Children(value))

    def _zero_series(self, tools: frozenset[str], reads: frozenset[str]) -> None:
        """Create at 0 every labelled series an alert or a dashboard panel matches, per tool.

        A series that first appears with the first event has no earlier sample, so ``increase()`` over it
        is 0 and an alert on "any failure" never fires on a pod's first failure. Created at start, the
        series is scraped at 0 before the event, and the event is an increase.
        """
        for tool in (*sorted(tools), "other"):
            for outcome in EXECUTION_OUTCOMES:
                self.executions.labels(tool, outcome)
            for source in ("confirm", "invoke"):
                self.replay_hits.labels(tool, source)
            for result in CLAIM_RESULTS:
                self.claims.labels(tool, result)
            for result in COMPENSATION_RESULTS:
                self.compensations.labels(tool, result)
            for result in RECONCILE_RESULTS:
                self.reconciliations.labels(tool, result)
            kind, decisions = (
                ("read", ("succeeded", "failed", "unknown"))
                if tool in reads
                else ("write", ("card", "same_card", "replay", "grant"))  # grant: run under a standing grant
            )
            for decision in decisions:
                self.invocations.labels(tool, kind, decision)
        for result in REFUSED_CLAIMS:  # refused before the tool is known
            self.claims.labels("other", result)
        self.reconciliations.labels("other", "tool_not_in_registry")  # a tool this registry lacks is "other"
        for rpc in RPCS:
            self.fail_closed.labels(rpc)
            for reason in PRECREATED_REASONS:
                self.refusals.labels(rpc, reason)
        for state in ACTION_STATES:
            self.actions.labels(state)
        for verdict in ("passed", "replaced", "flagged"):  # flagged: passed, in a language without a lexicon
            self.guard.labels(verdict)

    def watch_admission(self, holding: Callable[[], float], limit: int) -> None:
        """The in-flight gauge reads the gate when scraped: nothing is done per call."""
        self.in_flight.set_function(holding)
        self.max_in_flight.set(limit)

    def redis_observer(self) -> Callable[[str, float], None] | None:
        """What the store calls after each script's round trip (None when telemetry is off: not even a clock)."""
        if not self.enabled:
            return None
        children: dict[str, Any] = {}

        def observe(script: str, seconds: float) -> None:
            child = children.get(script)
            if child is None:
                child = children[script] = self.redis.labels(script)
            child.observe(seconds)

        return observe

    def tool(self, name: str) -> str:
        return name if name in self.tools else "other"

    @staticmethod
    def reason(reason: str) -> str:
        """A reason as a label value: one of the sidecar's own, else OTHER."""
        return label(reason)

    def timed(self, stage: str, *, span: bool = True) -> _Timed | _NotTimed:
        """One stage of the path: a child span (when the trace is recorded) and a latency observation."""
        if not self.enabled:
            return _NOT_TIMED
        child = self._stages.get(stage)
        if child is None:
            child = self._stages[stage] = self.stage.labels(stage)
        return _Timed(child, stage, span)
