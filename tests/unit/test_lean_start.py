"""What a sidecar loads before it serves (issue 17): the reply guard, the tracing SDK, JOSE, the MCP SDK (and
pydantic, starlette, uvicorn under it) and cryptography's X.509 only when used; the OpenTelemetry metrics SDK,
which redis-py 8 would import for a type (countersign/store/driver_import.py), not at all."""

from __future__ import annotations

import asyncio
import subprocess
import sys

from countersign.guard import ReplyGuard
from countersign.reply.guard_loader import GuardLoader

LAZY = (
    "countersign.guard.verdict",
    "countersign.guard.lexicon",
    "opentelemetry.sdk.trace",
    "jwt",
    # the MCP front door and the approval inbox (--mcp-listen, --approval-inbox-listen, mcp-stdio): ~30 MB, 0.6 s
    "mcp",
    "mcp_types",
    "pydantic",
    "starlette",
    "uvicorn",
    "countersign.sidecar.mcp_front",
    "countersign.sidecar.mcp_http",
    "countersign.sidecar.approval_inbox",
    # a client certificate's names are read only when --tls-allowed-peers is given
    "cryptography.x509",
    # redis-py 8 imports it for an annotation; the sidecar's own metrics are Prometheus (~2 MB, 70-100 ms)
    "opentelemetry.sdk.metrics",
)
PROBE = f"import sys, countersign.sidecar.app; print(sorted(m for m in {LAZY!r} if m in sys.modules))"


def test_the_serving_code_imports_no_part_it_does_not_use_at_start() -> None:
    # a fresh interpreter: this test process has imported the guard already
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]", out.stdout


async def test_the_guard_is_built_once_for_every_caller_that_waits() -> None:
    loader = GuardLoader()
    guards = await asyncio.gather(*(loader.get() for _ in range(5)))
    assert all(g is guards[0] for g in guards)
    assert isinstance(guards[0], ReplyGuard)
    assert guards[0].check("I've deleted your account.", "en", []).replaced
    assert await loader.get() is guards[0]


async def test_a_guard_built_at_start_is_handed_out_as_is() -> None:
    built = ReplyGuard.load(unsupported="replace")
    assert await GuardLoader.ready(built).get() is built


AFTER = """
import sys
import countersign.sidecar.app
from countersign.store.driver_import import _ProvidersFinder
import redis.observability.providers as providers
from opentelemetry.sdk.metrics import MeterProvider
print(any(isinstance(f, _ProvidersFinder) for f in sys.meta_path), type(providers.__loader__).__name__,
      MeterProvider.__module__)
"""


def test_the_metrics_sdk_still_imports_for_whoever_asks_after_redis_py_has_loaded() -> None:
    # the block lasts while redis-py's providers module runs: the finder is gone and that module has its own loader
    out = subprocess.run([sys.executable, "-c", AFTER], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.split() == ["False", "SourceFileLoader", "opentelemetry.sdk.metrics._internal"], out.stdout
