"""The metrics' fast paths keep what the library gave (lean, issue 17): a labelled metric's children are found in a
dict of its own, and timed() is a small class; the series scraped are the same."""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest

from countersign.observability import metrics
from countersign.reasons import Reason


def _sample(m: metrics.Metrics, name: str, **labels: str) -> float:
    value = m.registry.get_sample_value(name, labels)
    assert value is not None, f"no sample {name} {labels}"
    return value


def test_a_child_is_looked_up_once_and_counts_as_the_librarys_own() -> None:
    m = metrics.Metrics(frozenset({"create_todo"}))
    first = m.claims.labels("create_todo", "won")
    assert m.claims.labels("create_todo", "won") is first
    first.inc()
    m.claims.labels("create_todo", "won").inc(2)
    assert _sample(m, "countersign_claims_total", tool="create_todo", result="won") == 3
    # a StrEnum and its value are one series, as prometheus_client's str() makes them
    m.refusals.labels("Confirm", Reason.OVERLOADED).inc()
    m.refusals.labels("Confirm", "OVERLOADED").inc()
    assert _sample(m, "countersign_refusals_total", rpc="Confirm", reason="OVERLOADED") == 2
    with pytest.raises(ValueError, match="label count"):  # the library's checks still guard a new label set
        m.claims.labels("create_todo")


def test_timed_observes_each_stage_even_when_the_stage_raises() -> None:
    m = metrics.Metrics()
    with m.timed("claim"):
        pass
    with pytest.raises(RuntimeError), m.timed("claim"):
        raise RuntimeError("the stage failed")
    with m.timed("execute", span=False):
        pass
    assert _sample(m, "countersign_stage_duration_seconds_count", stage="claim") == 2
    assert _sample(m, "countersign_stage_duration_seconds_count", stage="execute") == 1


def test_with_telemetry_off_nothing_is_counted_and_timed_is_one_shared_no_op() -> None:
    m = metrics.Metrics(frozenset({"create_todo"}), enabled=False)
    assert m.timed("claim") is m.timed("settle")
    with m.timed("claim"):
        m.claims.labels("create_todo", "won").inc()
    assert b"countersign_stage_duration_seconds_count{" not in generate_latest(m.registry)
    assert m.registry.get_sample_value("countersign_claims_total", {"tool": "create_todo", "result": "won"}) == 0
