"""A task's progress pushes beside its wait (``tasks.jobs.with_updates``): a push in
flight when the wait ends finishes, never cancelled. Cancelled while it waits for a
pooled connection, an httpx request can leak that connection for good (httpcore 1.0.9,
encode/httpcore#1093); a hundred Prefect tasks whose waits ended together once left
Prefect's client with none, and every task's last artifact waited forever."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from kf_trainer_core.tasks.jobs import with_updates


async def test_a_push_in_flight_when_the_wait_ends_finishes() -> None:
    pushing, release = asyncio.Event(), asyncio.Event()
    pushed: list[str] = []

    async def flush() -> None:
        pushing.set()
        await release.wait()  # the request, waiting for a connection of the pool
        pushed.append("progress")

    async def start(on_update: Any) -> str:
        on_update(object())
        await pushing.wait()
        return "outputs"

    task = asyncio.ensure_future(with_updates(start, lambda _job: True, flush))
    await pushing.wait()
    await asyncio.sleep(0.05)
    assert not task.done()  # the wait ended, its push is still on its way
    release.set()
    assert await task == "outputs"
    assert pushed == ["progress"]


async def test_no_push_after_the_wait_ended() -> None:
    calls: list[int] = []

    async def flush() -> None:
        calls.append(1)

    async def start(on_update: Any) -> str:
        return "outputs"

    assert await with_updates(start, lambda _job: True, flush) == "outputs"
    assert calls == []


async def test_a_cancelled_task_leaves_its_push_to_finish() -> None:
    pushing, release = asyncio.Event(), asyncio.Event()
    pushed: list[str] = []

    async def flush() -> None:
        pushing.set()
        await release.wait()
        pushed.append("progress")

    async def start(on_update: Any) -> str:
        on_update(object())
        await asyncio.Event().wait()  # a wait that never ends: the task is cancelled
        return "never"

    task = asyncio.ensure_future(with_updates(start, lambda _job: True, flush))
    await pushing.wait()
    task.cancel()
    await asyncio.sleep(0.05)
    task.cancel()  # a second cancellation while the push is still in flight
    release.set()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    await asyncio.sleep(0.05)
    assert pushed == ["progress"]
