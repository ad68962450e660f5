"""Prometheus metrics (DESIGN §10): the one place that turns domain events into series.

Labels are bounded: tool names come from the registry (anything else is "other"), reasons and
results are stable upper/lower-snake words. Never an action id, token or user id.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from countersign.sidecar.observability import tracing

# Sub-millisecond decisions up to multi-second downstream calls.
BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
           2.5, 5.0, 10.0)


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


class Metrics:
    def __init__(self, tools: frozenset[str] = frozenset(), *, enabled: bool = True) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.tools = tools
        self.enabled = enabled
        r = self.registry
        self.invocations = Counter("countersign_invocations", "Invoke calls by tool, kind and decision",
                                   ["tool", "kind", "decision"], registry=r)
        self.claims = Counter("countersign_claims", "Confirm claims by result", ["tool", "result"], registry=r)
        self.replay_hits = Counter("countersign_replay_hits", "Duplicates answered from a stored outcome",
                                   ["tool", "source"], registry=r)
        self.executions = Counter("countersign_executions", "Downstream executions by outcome",
                                  ["tool", "outcome"], registry=r)
        self.refusals = Counter("countersign_refusals", "Requests refused, by reason", ["rpc", "reason"],
                                registry=r)
        self.fail_closed = Counter("countersign_fail_closed", "Requests refused because the store was "
                                   "unavailable", ["rpc"], registry=r)
        self.reconciliations = Counter("countersign_reconciliations", "Reconciliation attempts by result",
                                       ["tool", "result"], registry=r)
        self.compensations = Counter("countersign_compensations", "Compensations by result", ["tool", "result"],
                                     registry=r)
        self.audit_write_failures = Counter("countersign_audit_write_failures", "Audit events that could not "
                                            "be written (counted, never raised)", registry=r)
        self.guard = Counter("countersign_reply_guard", "Reply guard verdicts", ["verdict"], registry=r)
        self.settle_retries = Counter("countersign_settle_retries", "Settles retried in the background",
                                      ["result"], registry=r)
        self.stage = Histogram("countersign_stage_duration_seconds", "Time spent per pipeline stage",
                               ["stage"], buckets=BUCKETS, registry=r)
        self.downstream = Histogram("countersign_downstream_duration_seconds", "Downstream call latency",
                                    ["tool", "adapter"], buckets=BUCKETS, registry=r)
        self.actions = Gauge("countersign_actions", "Actions seen in a state by this sidecar's last "
                             "reconciler scan", ["state"], registry=r)

        for tool in (*sorted(tools), "other"):   # series exist from the start, so the first event counts
            for outcome in ("succeeded", "failed", "unknown"):
                self.executions.labels(tool, outcome)
            self.replay_hits.labels(tool, "confirm")
        for rpc in ("Invoke", "Confirm", "Reject", "GetAction", "Compensate", "Reconcile"):
            self.fail_closed.labels(rpc)
        for state in ("running", "unknown", "lease_lapsed", "needs_manual_review"):
            self.actions.labels(state)
        for verdict in ("passed", "replaced", "flagged"):  # flagged: passed, in a language without a lexicon
            self.guard.labels(verdict)
        if not enabled:
            off: Any = _Off()
            for name, value in list(vars(self).items()):
                if isinstance(value, (Counter, Gauge, Histogram)):
                    setattr(self, name, off)

    def tool(self, name: str) -> str:
        return name if name in self.tools else "other"

    @contextmanager
    def timed(self, stage: str, *, span: bool = True) -> Iterator[None]:
        """One stage of the path: a child span and a latency observation, from one place."""
        if not self.enabled:
            yield
            return
        start = time.perf_counter()
        try:
            if span and tracing.recording:
                with tracing.stage_span(stage):
                    yield
            else:
                yield
        finally:
            self.stage.labels(stage).observe(time.perf_counter() - start)
