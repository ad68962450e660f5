"""redis-py imported without the OpenTelemetry *metrics* SDK (issue 17: a sidecar's start-up and memory).

redis-py 8 (``redis/observability/providers.py``, reached from ``import redis`` through its parsers and maintenance
notifications) runs ``from opentelemetry.sdk.metrics import MeterProvider`` at import, inside ``try/except
ImportError``, for a type annotation and an ``OTEL_AVAILABLE`` flag that no other module of redis-py reads. The SDK
is installed (tracing needs its trace half), so every sidecar loaded the metrics half too: ~2 MB resident and
70-100 ms of CPU at start on the shared 2-core machine (notes/lean-start2.md). The sidecar never turns redis-py's
OTel metrics on (its Redis metrics are Prometheus histograms: ``Metrics.redis_observer``).

Importing this module (``countersign/store/__init__.py`` does, before any module of the package imports
redis-py) calls ``without_metrics_sdk``, which puts a finder on ``sys.meta_path`` for that one module. While the
module runs, the metrics SDK reads as not installed (``None`` in ``sys.modules``: redis-py takes its own "SDK
absent" branch); then the block is lifted, the finder removes itself, and the module keeps its ordinary loader.
Nothing else changes: a later ``import opentelemetry.sdk.metrics`` works as usual (the OTLP span exporters import
it when spans are exported), and redis-py's observability, if someone turns it on, looks the MeterProvider up when
enabled and records what it records when imported plainly (tests/store/test_driver_import.py, against a real
redis-server). If redis-py or the SDK is already imported, or a later redis-py moves the import, this does nothing.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from types import ModuleType

PROVIDERS = "redis.observability.providers"
METRICS_SDK = "opentelemetry.sdk.metrics"


class _WithoutMetricsSdk(importlib.abc.Loader):
    """Runs the module with the metrics SDK reading as absent, then hands the module its own loader back."""

    def __init__(self, loader: importlib.abc.Loader) -> None:
        self._loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader
        module.__loader__ = self._loader
        if METRICS_SDK in sys.modules:  # someone loaded it already: nothing left to save
            self._loader.exec_module(module)
            return
        sys.modules[METRICS_SDK] = None  # type: ignore[assignment]  # the import system's "not installed"
        try:
            self._loader.exec_module(module)
        finally:
            if METRICS_SDK in sys.modules and sys.modules[METRICS_SDK] is None:
                del sys.modules[METRICS_SDK]


class _ProvidersFinder(importlib.abc.MetaPathFinder):
    """Finds redis-py's providers module once, through the ordinary path finder, and wraps its loader."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != PROVIDERS:
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is not None and spec.loader is not None:
            spec.loader = _WithoutMetricsSdk(spec.loader)
        return spec


def without_metrics_sdk() -> None:
    """Arm the finder, unless redis-py's providers module or the metrics SDK is already imported (or it is armed)."""
    if PROVIDERS in sys.modules or METRICS_SDK in sys.modules:
        return
    if any(isinstance(finder, _ProvidersFinder) for finder in sys.meta_path):
        return
    sys.meta_path.insert(0, _ProvidersFinder())


without_metrics_sdk()
