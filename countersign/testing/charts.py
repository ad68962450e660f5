"""The Helm chart rendered the way a test needs it, through helm-python-sdk (Helm's Go SDK over ctypes, no helm
binary). Its public ``Chart.render`` takes no API versions; the native ``helm_render`` it wraps accepts
``api_versions`` and ``kube_version`` in the same options JSON, so ``render`` passes them there (the equivalent
of ``helm template --api-versions ... --kube-version ...``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import helm_python as helm
import yaml
from helm_python import _native

from countersign.testing.processes import ROOT

CHART = ROOT / "helm" / "countersign"
BASE = {"redis": {"url": "redis://redis:6379/0"}, "keys": {"existingSecret": "countersign-keys"}}
STANDALONE = {**BASE, "example": {"enabled": True}}


def render(
    values: dict[str, Any] | None = None,
    *,
    chart: Path = CHART,
    api_versions: list[str] | None = None,
    kube_version: str | None = None,
) -> list[dict[str, Any]]:
    """Every object the chart renders for these values, as dicts."""
    opts: dict[str, Any] = {"name": "demo", "namespace": "agents"}
    if api_versions:
        opts["api_versions"] = api_versions
    if kube_version:
        opts["kube_version"] = f"v{kube_version}"
    with helm.Chart.load(chart) as loaded:
        out = json.loads(
            _native.call_string(
                "helm_render", loaded._raw(), None if values is None else json.dumps(values), json.dumps(opts)
            )
        )
    return [doc for text in out.values() for doc in yaml.safe_load_all(text) if doc]
