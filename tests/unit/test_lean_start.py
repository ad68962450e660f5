"""What a sidecar loads before it serves (issue 17): the reply guard, the tracing SDK, JOSE, the MCP SDK (and
pydantic, starlette, uvicorn under it) and cryptography's X.509 only when used."""

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
