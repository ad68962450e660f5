"""The plain-Python series (observability/series.py) scrape as prometheus_client's own Counter and Histogram would:
the same bytes in the text format and in OpenMetrics, for the sidecar's whole registry, once the _created
timestamps (the clock at each child's making) are set aside."""

from __future__ import annotations

import math
import re

import prometheus_client
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.openmetrics import exposition as openmetrics

from countersign.observability import metrics, series
from countersign.reasons import Reason

CREATED = re.compile(rb"^(\w+_created(?:\{[^}]*\})?) \S+$", re.MULTILINE)


def _text(registry: CollectorRegistry) -> tuple[bytes, bytes]:
    """Both expositions, with each _created value replaced by a placeholder (its line kept)."""
    return (
        CREATED.sub(rb"\1 T", generate_latest(registry)),
        CREATED.sub(rb"\1 T", openmetrics.generate_latest(registry)),
    )


def _exercise(m: metrics.Metrics) -> None:
    """What a mixed run does to the series: every kind of label value, every bucket, its bounds, past the last."""
    m.claims.labels("create_todo", "won").inc()
    m.claims.labels(m.tool("nope"), "won").inc(2.5)
    m.refusals.labels("Confirm", Reason.OVERLOADED).inc()  # a StrEnum and its value: one series
    m.refusals.labels("Confirm", "OVERLOADED").inc()
    m.refusals.labels("Invoke", Reason.REQUEST_INVALID).inc()  # a series first made by a call
    for i, bound in enumerate(metrics.BUCKETS):
        m.stage.labels("claim").observe(bound)  # on a bound: that bucket (le is "less or equal")
        m.stage.labels("settle").observe(bound * 1.5)
        m.rpc_duration.labels("Confirm", "OK").observe(bound / (i + 2))
    m.stage.labels("claim").observe(0.0)
    m.stage.labels("claim").observe(60.0)  # past the last bound: +Inf only
    m.downstream.labels("create_todo", "http").observe(0.0123)
    m.redis.labels("claim").observe(0.0004)
    m.guard.labels("passed").inc()
    m.actions.labels("running").set(3)
    m.audit_write_failures.inc()


def _library_metrics(monkeypatch: pytest.MonkeyPatch) -> metrics.Metrics:
    """The same Metrics built on prometheus_client's own classes: the reference."""
    with monkeypatch.context() as patch:
        patch.setattr(metrics, "CounterSeries", prometheus_client.Counter)
        patch.setattr(metrics, "HistogramSeries", prometheus_client.Histogram)
        built = metrics.Metrics(frozenset({"create_todo", "delete_todo"}), reads=frozenset({"list_todos"}))
    assert isinstance(built.stage, prometheus_client.Histogram)
    return built


def test_the_sidecars_registry_scrapes_byte_for_byte_as_prometheus_clients(monkeypatch: pytest.MonkeyPatch) -> None:
    library = _library_metrics(monkeypatch)
    ours = metrics.Metrics(frozenset({"create_todo", "delete_todo"}), reads=frozenset({"list_todos"}))
    assert isinstance(ours.stage, series.HistogramSeries) and isinstance(ours.claims, series.CounterSeries)
    assert _text(ours.registry) == _text(library.registry)  # the zeroed series, before any event
    _exercise(library)
    _exercise(ours)
    text, om = _text(ours.registry)
    assert (text, om) == _text(library.registry)
    assert b'countersign_stage_duration_seconds_bucket{le="0.0001",stage="claim"} 2.0' in text  # 0.0 and 0.0001
    assert b'countersign_refusals_total{reason="OVERLOADED",rpc="Confirm"} 2.0' in text
    assert _text(ours.registry) == _text(library.registry)  # a scrape changes nothing


def test_created_is_the_time_the_series_was_made() -> None:
    registry = CollectorRegistry()
    counter = series.CounterSeries("c", "help", ["a"], registry=registry)
    counter.labels("x").inc()
    created = registry.get_sample_value("c_created", {"a": "x"})
    assert created is not None and created == pytest.approx(counter.labels("x").created)
    assert registry.get_sample_value("c_total", {"a": "x"}) == 1.0


def test_a_series_refuses_what_the_library_refuses() -> None:
    registry = CollectorRegistry()
    counter = series.CounterSeries("c", "help", ["a", "b"], registry=registry)
    with pytest.raises(ValueError, match="label count"):
        counter.labels("x")
    with pytest.raises(ValueError, match="non-negative"):
        counter.labels("x", "y").inc(-1)
    with pytest.raises(ValueError, match="Duplicated timeseries"):  # the registry checks the names as for its own
        series.CounterSeries("c", "again", ["a"], registry=registry)
    with pytest.raises(ValueError, match="sorted"):
        series.HistogramSeries("h", "help", ["a"], registry=registry, buckets=(1.0, 0.5))
    with pytest.raises(ValueError, match="le"):
        series.HistogramSeries("h2", "help", ["le"], registry=registry, buckets=(1.0,))


def test_an_observation_lands_in_the_bucket_the_library_picks() -> None:
    bounds = (0.001, 0.01, 0.1)
    ours = series.HistogramSeries("h", "help", ["a"], registry=None, buckets=bounds).labels("x")
    library = prometheus_client.Histogram("h", "help", ["a"], registry=None, buckets=bounds).labels("x")
    values = [0.0, -1.0, 0.0005, 0.001, 0.0010000001, 0.01, 0.05, 0.1, 0.1000001, 7.0, math.inf, math.nan]
    for value in values:
        ours.observe(value)
        library.observe(value)
    got = [s.value for s in library._child_samples() if s.name == "_bucket"]  # the library's own reading
    acc, mine = 0.0, []
    for n in ours.counts:
        acc += n
        mine.append(acc)
    assert mine == got
    assert math.isnan(ours.sum)
