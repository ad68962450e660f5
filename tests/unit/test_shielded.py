"""path.settle.shielded: a won claim's work runs to its end whatever happens to the caller (the executor's shield,
one hop cheaper than asyncio.shield(spawn(...)))."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from countersign.path.settle import shielded


async def test_the_caller_gets_the_works_result_and_the_task_is_let_go() -> None:
    tasks: set[asyncio.Task[Any]] = set()

    async def work() -> str:
        await asyncio.sleep(0.01)
        return "settled"

    assert await shielded(tasks, work()) == "settled"
    await asyncio.sleep(0)
    assert not tasks


async def test_a_cancelled_caller_does_not_cancel_the_work() -> None:
    tasks: set[asyncio.Task[Any]] = set()
    reached: list[str] = []

    async def work() -> str:
        await asyncio.sleep(0.05)  # the downstream call
        reached.append("settled")  # the settle after it
        return "settled"

    caller = asyncio.ensure_future(shielded(tasks, work()))
    await asyncio.sleep(0.01)
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert reached == [] and len(tasks) == 1  # still running
    await asyncio.gather(*tasks)
    assert reached == ["settled"]


async def test_the_works_error_is_the_callers_and_a_gone_callers_error_is_not_left_unretrieved() -> None:
    tasks: set[asyncio.Task[Any]] = set()

    async def failing(delay: float) -> None:
        await asyncio.sleep(delay)
        raise LookupError("store away")

    with pytest.raises(LookupError):
        await shielded(tasks, failing(0.0))
    caller = asyncio.ensure_future(shielded(tasks, failing(0.02)))
    await asyncio.sleep(0.005)
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    (task,) = tasks
    await asyncio.wait({task})
    assert task.exception() is None  # handed over (or dropped with its caller), never "never retrieved"


async def test_work_cancelled_at_shutdown_cancels_the_callers_wait() -> None:
    tasks: set[asyncio.Task[Any]] = set()
    caller = asyncio.ensure_future(shielded(tasks, asyncio.sleep(10)))
    await asyncio.sleep(0.01)
    for task in tasks:
        task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
