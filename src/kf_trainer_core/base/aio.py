"""Structured concurrency for the suite's async code, on every Python it supports:
a deadline scope (``asyncio.timeout`` from 3.11, ``async_timeout`` before) and a scope of
child tasks that never outlive the block that started them (``asyncio.TaskGroup`` from
3.11; written here so that 3.10 has it too).

Every wait of the suite is a deadline around a loop that awaits news; what runs beside it
(a log follower, a queue tracker) is a child of a :class:`TaskScope`. No operation does
its own timer arithmetic.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from typing import Any, TypeVar

T = TypeVar("T")

__all__ = ["TaskScope", "deadline"]


@asynccontextmanager
async def deadline(seconds: float | None) -> AsyncIterator[None]:
    """The block is cancelled ``seconds`` from now and raises :class:`TimeoutError`
    (``None``: no deadline). Nested scopes each keep their own."""
    if seconds is None:
        yield
        return
    if sys.version_info >= (3, 11):
        async with asyncio.timeout(max(0.0, seconds)):
            yield
    else:  # pragma: no cover - Python 3.10
        import async_timeout  # aiohttp's own dependency there

        async with async_timeout.timeout(max(0.0, seconds)):
            yield


class TaskScope:
    """Children that end with the block: on leaving it, those still running are
    cancelled and awaited. A child that fails is handed to ``on_error`` (or logged by
    the loop when there is none); it does not fail its siblings — children here are
    helpers (a log follower, a reader of progress), not the work itself."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    async def __aenter__(self) -> TaskScope:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.cancel_all()

    def start(self, coro: Coroutine[Any, Any, T], name: str | None = None) -> asyncio.Task[T]:
        """Run ``coro`` beside the block; its task (to await or cancel)."""
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def cancel_all(self) -> None:
        """Cancel the children still running and wait for their clean-up."""
        pending = [t for t in self._tasks if not t.done()]
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)

    @staticmethod
    async def drain(task: asyncio.Task[Any], seconds: float) -> None:
        """Give ``task`` up to ``seconds`` to end by itself, then cancel it."""
        try:
            await asyncio.wait_for(asyncio.shield(task), seconds)
        except (asyncio.TimeoutError, Exception):
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
