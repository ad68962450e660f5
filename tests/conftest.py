"""Fixtures of every tier: the test stack (real redis-server, the example todo service, the sidecar as a process).

The helpers themselves live in ``countersign.testing`` (imported by the tests and the benchmarks alike). A fixture
that starts redis-server says so when it is missing; the unit tier starts none.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from aiohttp import web

from countersign.testing.downstreams import Raw
from countersign.testing.stack import Stack, start_stack


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """Redis, the todo service and one sidecar, shared by the tests of a module."""
    yield from start_stack(tmp_path_factory.mktemp("stack"))


@pytest.fixture
def fresh_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A stack of its own, for tests that break things (kill, stop Redis)."""
    yield from start_stack(tmp_path_factory.mktemp("fresh"), ["--lease", "3s", "--downstream-deadline", "1s"])


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    return tmp_path


@pytest.fixture
async def raw() -> AsyncIterator[Raw]:
    """A downstream on loopback that answers as the test scripts it, and records what reached it."""
    server = await Raw().start()
    yield server
    await server.stop()


@pytest.fixture
async def elsewhere() -> AsyncIterator[tuple[str, list[str]]]:
    """Another real server, where a redirect points: it records every request and answers 200 with an id."""
    seen: list[str] = []

    async def any_request(request: web.Request) -> web.Response:
        seen.append(f"{request.method} {request.path_qs} {request.headers.get('Idempotency-Key', '')}")
        return web.json_response({"id": "elsewhere", "version": 1, "arguments": {}})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", any_request)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    yield f"http://127.0.0.1:{runner.addresses[0][1]}", seen
    await runner.cleanup()
