"""The one bridge from synchronous code to the suite's async code: a portal, one event
loop in a helper thread per process, where every synchronous call runs its coroutine.

``TrainerClient`` is :class:`~kf_trainer_core.client.AsyncTrainerClient` run through the
portal (its methods are one line each); a Prefect task's synchronous face and a KFP
component's main run their coroutine the same way. The portal's loop holds what sync
callers share: one connection per cluster, one watch per namespace.

Three things a plain ``asyncio.run`` would not do:

* **a caller that is itself inside an event loop** (a notebook, an async flow calling a
  sync function) works: the coroutine runs on the portal's loop, not the caller's;
* **a forked process** (Airflow's LocalExecutor forks its workers) gets a portal of its
  own on first use: the parent's thread does not exist in the child;
* **the caller stays interruptible**: orchestrators deliver a task's timeout as an
  exception raised in the task's thread at its next Python instruction (Ctrl-C and
  SIGTERM land in the main thread the same way). The caller waits in slices; when
  an interruption lands, the coroutine is *cancelled* — what cancels its async twin — and
  its clean-up learns the real reason from :func:`interruption_cause`; the caller waits
  for that clean-up, then re-raises.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import contextvars
import importlib
import os
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from typing import Any, TypeVar

__all__ = ["Portal", "cancelled_by", "interruption_cause", "portal"]

T = TypeVar("T")

#: How often a waiting caller (and a :func:`cancelled_by` watch) wakes at first.
SLICE_SECONDS = 0.5
#: The longest slice of a caller that has waited a while: an interruption lands within
#: it. Each wake costs a little CPU, and a process may hold hundreds of waiting threads
#: (measured: 500 idle sync waits in 0.5 s slices kept 3.6% of a core busy).
LONG_SLICE_SECONDS = 2.0


def _slices() -> Iterator[float]:
    """A waiting caller's slices: short for its first seconds, where a task's timeout
    or Ctrl-C most often lands, then growing to :data:`LONG_SLICE_SECONDS`."""
    length = SLICE_SECONDS
    while True:
        for _ in range(4):
            yield length
        length = min(length * 2, LONG_SLICE_SECONDS)


class _Cause:
    """What interrupted a coroutine from outside, once something did."""

    def __init__(self) -> None:
        self.cause: BaseException | None = None


_CAUSE: contextvars.ContextVar[_Cause | None] = contextvars.ContextVar(
    "kf_trainer_interruption_cause", default=None
)


class Portal:
    """An event loop running in a daemon thread of its own (see the module)."""

    def __init__(self, name: str = "kf-trainer-portal") -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(ready,), name=name, daemon=True)
        self.thread.start()
        ready.wait()

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(ready.set)
        try:
            self.loop.run_forever()
        finally:
            with contextlib.suppress(Exception):
                self.loop.close()

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the portal's loop and return its result (or raise its
        exception) in the calling thread, which stays interruptible (see the module)."""
        if threading.current_thread() is self.thread:
            coro.close()
            raise RuntimeError(
                "a synchronous call of kf-trainer-suite from inside its own event loop "
                "would wait for itself. Fix: await the AsyncTrainerClient instead."
            )
        interruption = _Cause()
        # The task runs in a copy of this thread's context (the orchestrator's run, its
        # settings) holding this call's interruption.
        token = _CAUSE.set(interruption)
        try:
            context = contextvars.copy_context()
        finally:
            _CAUSE.reset(token)
        started: concurrent.futures.Future[asyncio.Task[T]] = concurrent.futures.Future()
        done: concurrent.futures.Future[T] = concurrent.futures.Future()

        def start() -> None:
            task = self.loop.create_task(coro)
            task.add_done_callback(lambda t: _settle(t, done))
            started.set_result(task)

        self.loop.call_soon_threadsafe(start, context=context)
        try:
            # In slices: an interruption lands between them. (Not ``result(timeout)``
            # alone: its TimeoutError is the builtin one, which the call's own errors
            # may be too.)
            slices = _slices()
            while not done.done():
                concurrent.futures.wait([done], next(slices))
            return done.result()
        except BaseException as exc:
            if done.done():
                raise
            interruption.cause = interruption.cause or exc
            with contextlib.suppress(BaseException):
                task = started.result(SLICE_SECONDS * 4)
                self.loop.call_soon_threadsafe(task.cancel)
                # Its clean-up runs in the coroutine; a second interruption ends this.
                concurrent.futures.wait([done])
            raise

    def iterate(self, items: AsyncIterator[T]) -> Iterator[T]:
        """An async iterator's items, one call each (``close()`` closes it on the loop)."""
        try:
            while True:
                try:
                    yield self.call(_next(items))
                except StopAsyncIteration:
                    return
        finally:
            closing = getattr(items, "aclose", None)
            if closing is not None and self.loop.is_running():
                with contextlib.suppress(Exception):
                    self.call(closing())

    def stop(self) -> None:
        """Cancel what runs on the loop and stop it (at interpreter exit)."""
        if not self.loop.is_running():
            return

        async def shutdown() -> None:
            current = asyncio.current_task()
            tasks = [t for t in asyncio.all_tasks() if t is not current]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            # What their clean-up started (connections closing, shielded) may end.
            rest = [t for t in asyncio.all_tasks() if t is not current]
            if rest:
                await asyncio.wait(rest, timeout=1.0)
            for closer in _AT_STOP:  # what clients left open (a script never closed one)
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(closer(), 1.0)

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(shutdown(), self.loop).result(2.0)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(2.0)


async def _next(items: AsyncIterator[T]) -> T:
    return await items.__anext__()


def _settle(task: asyncio.Task[T], done: concurrent.futures.Future[T]) -> None:
    """Hand a finished task's outcome to the waiting caller."""
    if task.cancelled():
        done.set_exception(concurrent.futures.CancelledError("the call was cancelled"))
    elif (error := task.exception()) is not None:
        done.set_exception(error)
    else:
        done.set_result(task.result())


_PORTAL: Portal | None = None
#: Closers run on the portal's loop when it stops, after its tasks are cancelled.
_AT_STOP: list[Callable[[], Awaitable[None]]] = []


def on_stop(closer: Callable[[], Awaitable[None]]) -> None:
    """Run ``closer`` on the portal's loop when the portal stops (at interpreter exit):
    for what a layer above keeps open across calls (its connections)."""
    if closer not in _AT_STOP:
        _AT_STOP.append(closer)


_LOCK = threading.Lock()


def portal() -> Portal:
    """This process's portal, started on first use (again in a forked child)."""
    global _PORTAL
    current = _PORTAL
    if current is not None and current.pid == os.getpid() and current.thread.is_alive():
        return current
    with _LOCK:
        if _PORTAL is None or _PORTAL.pid != os.getpid() or not _PORTAL.thread.is_alive():
            _PORTAL = Portal()
        return _PORTAL


def _stop_at_exit() -> None:
    current = _PORTAL
    if current is not None and current.pid == os.getpid():
        current.stop()


# The portal stops when the main thread ends, before the interpreter's thread pools
# refuse new work (concurrent.futures stops them at the same point, registered
# earlier, so run later): stopped any later, its informers' last reconnects fail in
# aiohttp's executor calls and their connections are left unclosed. The hook is the
# one concurrent.futures itself uses; atexit stands in where it is missing.
# concurrent.futures loads its thread pools lazily: loaded here, they register first.
importlib.import_module("concurrent.futures.thread")
getattr(threading, "_register_atexit", atexit.register)(_stop_at_exit)


def interruption_cause(exc: BaseException) -> BaseException:
    """What really stopped a coroutine: a cancellation sent by the portal (or by
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
