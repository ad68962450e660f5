"""redis-py imported the sidecar's way (countersign/store/driver_import.py: without the OpenTelemetry metrics SDK
at import) still records its own OTel metrics when a user turns them on, as it does imported plainly: against a
real redis-server, in fresh interpreters."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from countersign.testing import processes

RECORD = """
import asyncio, json, sys
if sys.argv[2] == "sidecar":
    import countersign.sidecar.app  # noqa: F401  # redis-py imported through the store, as the sidecar does
from opentelemetry import metrics
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
import redis.asyncio
from redis.observability import OTelConfig, get_observability_instance

reader = InMemoryMetricReader()
metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
get_observability_instance().init(OTelConfig())


async def main():
    client = redis.asyncio.Redis.from_url(sys.argv[1])
    await client.set("k", "v")
    await client.get("k")
    await client.aclose()


asyncio.run(main())
data = reader.get_metrics_data()
names = {m.name for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics}
print(json.dumps({"metrics_sdk_at_import": sys.argv[2], "names": sorted(names)}))
"""


def recorded(url: str, how: str) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-c", RECORD, url, how], capture_output=True, text=True, check=True, timeout=60
    )
    names: list[str] = json.loads(out.stdout)["names"]
    return names


def test_redis_py_records_the_same_otel_metrics_when_imported_without_the_metrics_sdk(tmp_path: Path) -> None:
    proc = processes.start_redis(tmp_path)
    try:
        plain = recorded(proc.info["url"], "plain")
        sidecar = recorded(proc.info["url"], "sidecar")
    finally:
        proc.stop()
    assert "db.client.connection.count" in plain
    assert sidecar == plain
