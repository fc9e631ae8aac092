"""What a waiting thread or task sleeps on until an informer has news of what it waits
for (:class:`~kf_trainer_core.k8s.calls.Await`): a :class:`SyncWaker` for a thread, an
:class:`AsyncWaker` for a task."""

from __future__ import annotations

import asyncio
import threading


class SyncWaker:
    """Wakes a waiting thread when any of its subscriptions sees news."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._event.set()  # the first look needs no news

    def notify(self) -> None:
        self._event.set()

    def wait(self, timeout: float | None) -> bool:
        """Block until woken (``True``) or ``timeout`` passed."""
        fired = self._event.wait(timeout)
        self._event.clear()
        return fired


class AsyncWaker:
    """Wakes a waiting task when any of its subscriptions sees news. A wait is a future
    and a timer, no task (``asyncio.wait_for`` made and cancelled one per wait: half the
    work of 10,000 waits in one process, and a task's memory each)."""

    __slots__ = ("_fired", "_future")

    def __init__(self) -> None:
        self._fired = True  # the first look needs no news
        self._future: asyncio.Future[None] | None = None

    def notify(self) -> None:
        self._fired = True
        future = self._future
        if future is not None and not future.done():
            future.set_result(None)

    async def wait(self, timeout: float | None) -> bool:
        """Until notified (``True``, the news consumed) or ``timeout`` passed."""
        if not self._fired:
            loop = asyncio.get_running_loop()
            future = self._future = loop.create_future()
            timer = None if timeout is None else loop.call_later(timeout, _expire, future)
            try:
                await future
            finally:
                self._future = None
                if timer is not None:
                    timer.cancel()
            if not self._fired:
                return False
        self._fired = False
        return True


def _expire(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
