"""What a waiting task sleeps on until something has news of what it waits for (an
informer, the read of a batch it is queued for, a timer of its own)."""

from __future__ import annotations

import asyncio


class Waker:
    """Wakes one waiting task. A wait is a future and a timer, no task
    (``asyncio.wait_for`` makes and cancels one per wait: half the work of 10,000 waits
    in one process, and a task's memory each). Created fired (``fired``), the first
    look needs no news."""

    __slots__ = ("_fired", "_future")

    def __init__(self, fired: bool = True) -> None:
        self._fired = fired
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
