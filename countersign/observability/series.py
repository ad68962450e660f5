"""Labelled counters and histograms in plain Python, exposed through prometheus_client's collector API.

prometheus_client's children keep each value behind a lock of its own: a histogram observation takes two locked
increments (the sum, one bucket) after a linear walk over the buckets, a counter increment one, and ``labels()``
str()s every value and takes the metric's lock. A Confirm makes ~9 observations and a few increments (measured in
instructions: bench/telemetry_points.py, notes/lean-meter2.md). Here a child is a few Python attributes: a float,
or a list of bucket counts found by bisection.

What a scrape sees is what prometheus_client's own Counter and Histogram would give: the same family names and
types, label names in the declared order, the same ``_total`` / ``_bucket{le}`` / ``_count`` / ``_sum`` /
``_created`` samples in the same order (``collect()`` yields the library's ``Metric`` objects; its exposition
formats them). ``tests/unit/test_series.py`` compares the text byte for byte with the library's.

Threads: the sidecar updates its series from the event loop's thread only (every path, the store's observer and
the admission gate run there); a scrape reads them from the metrics server's thread. Each value is one Python
object, read and replaced whole under the GIL; a scrape taken during an observation may see the bucket counted
and the sum not yet (prometheus_client's separate locks allow the same).
"""

from __future__ import annotations

import bisect
import math
import os
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

# the _created samples, unless PROMETHEUS_DISABLE_CREATED_SERIES says no (read once at import, as the library does)
_USE_CREATED = os.environ.get("PROMETHEUS_DISABLE_CREATED_SERIES", "False").lower() not in ("true", "1", "t")


class _Series(Collector):
    """A labelled family: its children by label values, each made once (``str()`` of each value, as the library)."""

    _type = ""

    def __init__(
        self, name: str, documentation: str, labelnames: Sequence[str], registry: CollectorRegistry | None
    ) -> None:
        if not labelnames:
            raise ValueError("a series has labels; use prometheus_client for an unlabelled metric")
        self._name = name
        self._documentation = documentation
        self._labelnames = tuple(labelnames)
        self._children: dict[tuple[Any, ...], Any] = {}
        self._lock = threading.Lock()
        if registry is not None:
            registry.register(self)

    def labels(self, *values: Any) -> Any:
        """The child of these label values (``str`` or ``StrEnum``: equal keys, one child)."""
        child = self._children.get(values)
        if child is None:
            child = self._new(values)
        return child

    def _new(self, values: tuple[Any, ...]) -> Any:
        if len(values) != len(self._labelnames):
            raise ValueError("Incorrect label count")
        labels = tuple(str(v) for v in values)
        with self._lock:
            child = self._children.get(labels)
            if child is None:
                child = self._child(labels)
                self._children[labels] = child
            self._children[values] = child  # the values as given find it too (a StrEnum hashes as its str)
        return child

    def _child(self, labels: tuple[str, ...]) -> Any:
        raise NotImplementedError

    def _series(self) -> list[tuple[dict[str, str], Any]]:
        """Each child once, with its labels, in the order the children were made."""
        with self._lock:
            children = list(self._children.values())
        seen: set[int] = set()
        out = []
        for child in children:
            if id(child) not in seen:
                seen.add(id(child))
                out.append((dict(zip(self._labelnames, child.labels, strict=True)), child))
        return out

    def describe(self) -> Iterable[Metric]:
        return [Metric(self._name, self._documentation, self._type)]


class CounterChild:
    __slots__ = ("created", "labels", "value")

    def __init__(self, labels: tuple[str, ...]) -> None:
        self.labels = labels
        self.value = 0.0
        self.created = time.time()

    def inc(self, amount: float = 1) -> None:
        if amount < 0:
            raise ValueError("Counters can only be incremented by non-negative amounts.")
        self.value += amount


class CounterSeries(_Series):
    """prometheus_client's labelled ``Counter``: ``name_total`` (and ``name_created``) per label set."""

    _type = "counter"

    def __init__(
        self, name: str, documentation: str, labelnames: Sequence[str], registry: CollectorRegistry | None = None
    ) -> None:
        super().__init__(name.removesuffix("_total"), documentation, labelnames, registry)

    def _child(self, labels: tuple[str, ...]) -> CounterChild:
        return CounterChild(labels)

    def collect(self) -> Iterable[Metric]:
        metric = Metric(self._name, self._documentation, self._type)
        total, created = self._name + "_total", self._name + "_created"
        for labels, child in self._series():
            metric.add_sample(total, labels, child.value)
            if _USE_CREATED:
                metric.add_sample(created, labels, child.created)
        return [metric]


class HistogramChild:
    __slots__ = ("_bounds", "counts", "created", "labels", "sum")

    def __init__(self, labels: tuple[str, ...], bounds: tuple[float, ...]) -> None:
        self.labels = labels
        self._bounds = bounds  # ascending, +Inf last
        self.counts = [0] * len(bounds)  # per bucket, not cumulative
        self.sum = 0.0
        self.created = time.time()

    def observe(self, amount: float) -> None:
        """The first bucket whose bound is >= amount (the library's ``amount <= bound``), found by bisection."""
        self.sum += amount
        if amount == amount:  # a NaN counts in no bucket (as the library's comparisons)
            self.counts[bisect.bisect_left(self._bounds, amount)] += 1


class HistogramSeries(_Series):
    """prometheus_client's labelled ``Histogram``: ``_bucket{le}`` cumulative, ``_count``, ``_sum``, ``_created``."""

    _type = "histogram"

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        registry: CollectorRegistry | None = None,
        *,
        buckets: Sequence[float],
    ) -> None:
        if "le" in labelnames:
            raise ValueError("Invalid label metric name: le")
        bounds = [float(b) for b in buckets]
        if bounds != sorted(bounds):
            raise ValueError("Buckets not in sorted order")
        if not bounds or bounds[-1] != math.inf:
            bounds.append(math.inf)
        if len(bounds) < 2:
            raise ValueError("Must have at least two buckets")
        self._bounds = tuple(bounds)
        self._le = tuple(str(floatToGoString(b)) for b in bounds)  # type: ignore[no-untyped-call]
        super().__init__(name, documentation, labelnames, registry)

    def _child(self, labels: tuple[str, ...]) -> HistogramChild:
        return HistogramChild(labels, self._bounds)

    def collect(self) -> Iterable[Metric]:
        metric = Metric(self._name, self._documentation, self._type)
        name = self._name
        bucket, count, total, created = name + "_bucket", name + "_count", name + "_sum", name + "_created"
        for labels, child in self._series():
            counts, value = list(child.counts), child.sum  # one reading of each
            acc = 0.0
            for le, n in zip(self._le, counts, strict=True):
                acc += n
                metric.add_sample(bucket, {**labels, "le": le}, acc)
            metric.add_sample(count, labels, acc)
            if self._bounds[0] >= 0:
                metric.add_sample(total, labels, value)
            if _USE_CREATED:
                metric.add_sample(created, labels, child.created)
        return [metric]
