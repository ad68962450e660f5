"""Prometheus metrics (DESIGN §10): the one place that turns domain events into series.

Labels are bounded: tool names come from the registry (anything else is "other"), reasons and
results are stable upper/lower-snake words. Never an action id, token or user id.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from countersign.sidecar.observability import tracing

# Sub-millisecond decisions up to multi-second downstream calls.
BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
           2.5, 5.0, 10.0)


class Metrics:
    def __init__(self, tools: frozenset[str] = frozenset()) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.tools = tools
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
        self.guard = Counter("countersign_reply_guard", "Reply guard verdicts", ["verdict"], registry=r)
        self.settle_retries = Counter("countersign_settle_retries", "Settles retried in the background",
                                      ["result"], registry=r)
        self.stage = Histogram("countersign_stage_duration_seconds", "Time spent per pipeline stage",
                               ["stage"], buckets=BUCKETS, registry=r)
        self.downstream = Histogram("countersign_downstream_duration_seconds", "Downstream call latency",
                                    ["tool", "adapter"], buckets=BUCKETS, registry=r)
        self.actions = Gauge("countersign_actions", "Actions seen in a state by this sidecar's last "
                             "reconciler scan", ["state"], registry=r)

    def tool(self, name: str) -> str:
        return name if name in self.tools else "other"

    @contextmanager
    def timed(self, stage: str) -> Iterator[None]:
        """One stage of the path: a child span and a latency observation, from one place."""
        start = time.perf_counter()
        try:
            with tracing.stage_span(stage):
                yield
        finally:
            self.stage.labels(stage).observe(time.perf_counter() - start)
