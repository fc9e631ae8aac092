"""A synchronous face for a coroutine that stays interruptible: how an orchestrator's
synchronous task runs the same coroutine as its async twin.

Why not one long blocking wait (``asyncio.run`` or an orchestrator's own helper):
orchestrators deliver a synchronous task's timeout as an exception raised in the task's
thread at its next Python instruction (Ctrl-C and SIGTERM land in the main thread the
same way). So the task's thread waits here in short slices while the coroutine runs on
an event loop in a helper thread; when an interruption lands in the task's thread, the
coroutine is *cancelled* — exactly what cancels the async twin — and the coroutine's
clean-up, written once for both faces, learns the real reason from
:func:`interruption_cause`. The task's thread waits for that clean-up before it
re-raises: no helper is ever left behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import threading
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any, TypeVar

from typing_extensions import ParamSpec

__all__ = ["InterruptibleRunner", "cancelled_by", "interruption_cause", "sync_face"]

P = ParamSpec("P")
T = TypeVar("T")

#: How often the task's own thread (and a :func:`cancelled_by` watch) wakes.
SLICE_SECONDS = 0.5


class _Cause:
    """What interrupted a coroutine from outside, once something did."""

    def __init__(self) -> None:
        self.cause: BaseException | None = None


_CAUSE: contextvars.ContextVar[_Cause | None] = contextvars.ContextVar(
    "kf_trainer_interruption_cause", default=None
)


class InterruptibleRunner:
    """Runs coroutines to their end on an event loop in a helper thread (named
    ``thread_name``), while the calling thread stays interruptible; an interruption
    cancels the coroutine, waits for its clean-up, and is re-raised in the caller.

    Used as is, each :meth:`run` has a loop of its own. Used as a context manager, the
    runner holds one loop for the block, so that what a synchronous task keeps for its
    life (its one async client, a shared watch) serves each of its calls; leaving the
    block cancels what is left running on it and closes it.
    """

    def __init__(self, thread_name: str = "kf-trainer-sync") -> None:
        self.thread_name = thread_name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._helper: threading.Thread | None = None

    def __enter__(self) -> InterruptibleRunner:
        if self._loop is None:
            loop = asyncio.new_event_loop()
            started = threading.Event()
            self._helper = threading.Thread(
                target=_serve, args=(loop, started), name=self.thread_name, daemon=True
            )
            self._helper.start()
            started.wait()
            self._loop = loop
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """End the held loop (a runner used without ``with`` holds none)."""
        loop, helper = self._loop, self._helper
        self._loop = self._helper = None
        if loop is None or helper is None:
            return
        # RuntimeError: the loop stopped in the meantime, there is nothing to end.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(loop.stop)
        helper.join()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """The coroutine's result (or its exception), or the interruption."""
        if self._loop is None:
            with InterruptibleRunner(self.thread_name) as once:
                return once.run(coro)
        loop = self._loop
        # The task is made with a copy of this thread's context: the orchestrator's
        # run, its settings and logger are the coroutine's too, and so is this run's
        # interruption.
        interruption = _Cause()
        context = contextvars.copy_context()
        context.run(_CAUSE.set, interruption)
        done = threading.Event()
        made: list[asyncio.Task[T]] = []

        def start() -> None:
            task = loop.create_task(coro)
            task.add_done_callback(lambda _: done.set())
            made.append(task)

        loop.call_soon_threadsafe(start, context=context)
        try:
            while not done.wait(SLICE_SECONDS):
                pass
        except BaseException as exc:
            interruption.cause = interruption.cause or exc
            # RuntimeError: the loop closed in the meantime, there is nothing to cancel.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(lambda: made and made[0].cancel())
            # The clean-up runs in the coroutine; a second interruption ends this wait.
            while not done.wait(SLICE_SECONDS):
                pass
            raise
        return made[0].result()


def _serve(loop: asyncio.AbstractEventLoop, started: threading.Event) -> None:
    """The helper thread: the loop runs until the runner closes it; then what was left
    running on it (a pump, a log follower) ends, cancelled."""
    try:
        asyncio.set_event_loop(loop)
        loop.call_soon(started.set)
        loop.run_forever()
        leftovers = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for leftover in leftovers:
            leftover.cancel()
        if leftovers:
            loop.run_until_complete(asyncio.gather(*leftovers, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.run_until_complete(loop.shutdown_default_executor())
    finally:
        asyncio.set_event_loop(None)
        loop.close()
        started.set()


def interruption_cause(exc: BaseException) -> BaseException:
    """What really stopped the coroutine: a cancellation sent by the sync face (or by
    :func:`cancelled_by`) stands for the interruption behind it (a timeout, SIGTERM,
    Ctrl-C, a runner's shutdown)."""
    holder = _CAUSE.get()
    if isinstance(exc, asyncio.CancelledError) and holder is not None and holder.cause:
        return holder.cause
    return exc


@contextlib.asynccontextmanager
async def cancelled_by(event: threading.Event | None, cause: BaseException) -> AsyncIterator[None]:
    """Cancel the block's coroutine when ``event`` is set (from any thread), and raise
    ``cause`` for it once the block's clean-up has run; no event, no watch."""
    current = asyncio.current_task()
    if event is None or current is None:
        yield
        return
    outer = _CAUSE.get()
    holder = outer if outer is not None else _Cause()
    token = _CAUSE.set(holder) if outer is None else None

    async def watch() -> None:
        while not event.is_set():
            await asyncio.sleep(SLICE_SECONDS)
        if holder.cause is None:
            holder.cause = cause
            current.cancel()

    watcher = asyncio.ensure_future(watch())
    try:
        yield
    except asyncio.CancelledError:
        if holder.cause is not cause:
            raise
        # The cancellation was ours: it ends here, as ``cause`` (Python 3.11+ counts
        # cancellations; 3.10 does not).
        uncancel = getattr(current, "uncancel", None)
        if uncancel is not None:
            uncancel()
        raise cause from None
    finally:
        watcher.cancel()
        if token is not None:
            _CAUSE.reset(token)


def sync_face(
    fn: Callable[P, Coroutine[Any, Any, T]], name: str, thread_name: str = "kf-trainer-sync"
) -> Callable[P, T]:
    """A synchronous function named ``name`` that runs ``fn``'s coroutine with an
    :class:`InterruptibleRunner` (its signature and docstring are ``fn``'s)."""

    @functools.wraps(fn)
    def face(*args: P.args, **kwargs: P.kwargs) -> T:
        return InterruptibleRunner(thread_name).run(fn(*args, **kwargs))

    # Orchestrators tell tasks apart by qualified name: faces must not share one.
    face.__name__ = face.__qualname__ = name
    return face
