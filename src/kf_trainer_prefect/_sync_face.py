"""How a task's coroutine is interrupted, the same way in both faces of the tasks.

The sync face: a synchronous Prefect task runs the same coroutine as its async twin,
on an event loop in a helper thread, and stays interruptible.

Why not Prefect's own ``run_coro_as_sync``: it blocks its caller in one long wait, and
Prefect delivers a synchronous task's timeout as an exception raised in the task's
thread at its next Python instruction (Ctrl-C and SIGTERM land in the main thread the
same way). So the task's thread waits here in short slices; when an interruption lands
in it, the coroutine is *cancelled* — exactly what cancels the async twin — and the
coroutine's clean-up, which is written once for both faces, learns the real reason
from :func:`interruption_cause`. The task's thread then waits for that clean-up before
it re-raises: no helper is ever left behind.
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

P = ParamSpec("P")
T = TypeVar("T")

#: How often the task's own thread wakes while its coroutine runs in the helper thread.
_SLICE_SECONDS = 0.5


class _Cause:
    """What interrupted a coroutine from outside, once something did."""

    def __init__(self) -> None:
        self.cause: BaseException | None = None


_CAUSE: contextvars.ContextVar[_Cause | None] = contextvars.ContextVar(
    "kf_trainer_prefect_cause", default=None
)


class TaskRunnerShutdown(BaseException):
    """The flow's task runner is shutting down (its flow run is being cancelled or has
    crashed) while this task waited in one of its worker threads.

    A ``BaseException``, like Prefect's own cancellation: the task does not fail, it
    stops; its job is stopped too only if the flow run is being cancelled.
    """


class InterruptibleRunner:
    """Runs one coroutine to its end on an event loop in a helper thread, while the
    calling (task) thread stays interruptible; an interruption cancels the coroutine,
    waits for its clean-up, and is re-raised in the task's thread."""

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """The coroutine's result (or its exception), or the interruption."""
        loop = asyncio.new_event_loop()
        # Created here, the task copies this thread's context: the Prefect run, its
        # settings and logger are the coroutine's too, and so is this runner.
        interruption = _Cause()
        token = _CAUSE.set(interruption)
        try:
            task = loop.create_task(coro)
        finally:
            _CAUSE.reset(token)
        done = threading.Event()
        helper = threading.Thread(
            target=_drive, args=(loop, task, done), name="kf-trainer-prefect", daemon=True
        )
        helper.start()
        try:
            while not done.wait(_SLICE_SECONDS):
                pass
        except BaseException as exc:
            interruption.cause = interruption.cause or exc
            # RuntimeError: the loop closed in the meantime, there is nothing to cancel.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(task.cancel)
            # The clean-up (stopping the job, the summary) runs in the coroutine; a
            # second interruption while it runs ends this wait.
            while not done.wait(_SLICE_SECONDS):
                pass
            raise
        return task.result()


def _drive(loop: asyncio.AbstractEventLoop, task: asyncio.Task[Any], done: threading.Event) -> None:
    try:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(asyncio.wait([task]))
        # What the coroutine left running (a pump, a log follower) ends with it.
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
        done.set()


def interruption_cause(exc: BaseException) -> BaseException:
    """What really stopped the coroutine: a cancellation sent by the sync face stands
    for the interruption that landed in the task's thread (a timeout, SIGTERM, Ctrl-C,
    the task runner's shutdown)."""
    holder = _CAUSE.get()
    if isinstance(exc, asyncio.CancelledError) and holder is not None and holder.cause:
        return holder.cause
    return exc


@contextlib.asynccontextmanager
async def runner_shutdown_cancels() -> AsyncIterator[None]:
    """Cancel the block's coroutine when the flow's task runner shuts down (its flow run
    is being cancelled or has crashed), and raise :class:`TaskRunnerShutdown` for it
    once the block's clean-up has run."""
    event = _runner_cancel_event()
    current = asyncio.current_task()
    if event is None or current is None:
        yield
        return
    outer = _CAUSE.get()
    holder = outer if outer is not None else _Cause()
    token = _CAUSE.set(holder) if outer is None else None
    shutdown = TaskRunnerShutdown("the flow's task runner is shutting down")

    async def watch() -> None:
        while not event.is_set():
            await asyncio.sleep(_SLICE_SECONDS)
        if holder.cause is None:
            holder.cause = shutdown
            current.cancel()

    watcher = asyncio.ensure_future(watch())
    try:
        yield
    except asyncio.CancelledError:
        if holder.cause is not shutdown:
            raise
        # The cancellation was ours: it ends here, as the shutdown (Python 3.11+ counts
        # cancellations; 3.10 does not).
        uncancel = getattr(current, "uncancel", None)
        if uncancel is not None:
            uncancel()
        raise shutdown from None
    finally:
        watcher.cancel()
        if token is not None:
            _CAUSE.reset(token)


def sync_face(fn: Callable[P, Coroutine[Any, Any, T]], name: str) -> Callable[P, T]:
    """A synchronous function named ``name`` that runs ``fn``'s coroutine with an
    :class:`InterruptibleRunner` (its signature and docstring are ``fn``'s)."""

    @functools.wraps(fn)
    def face(*args: P.args, **kwargs: P.kwargs) -> T:
        return InterruptibleRunner().run(fn(*args, **kwargs))

    # Prefect tells tasks apart by qualified name: the faces must not share one.
    face.__name__ = face.__qualname__ = name
    return face


def _runner_cancel_event() -> threading.Event | None:
    """The event a flow's thread-pool task runner sets for this task run when it shuts
    down (``cancel_all``): how a task in a worker thread learns that its flow run is
    going down. Prefect keeps these events privately, so this is best effort; the flow
    hooks (:mod:`kf_trainer_prefect.flows`) are the guarantee."""
    from prefect.context import FlowRunContext, TaskRunContext

    task_ctx = TaskRunContext.get()
    flow_ctx = FlowRunContext.get()
    if task_ctx is None or flow_ctx is None:
        return None
    events = getattr(flow_ctx.task_runner, "_cancel_events", None)
    event = events.get(task_ctx.task_run.id) if isinstance(events, dict) else None
    return event if isinstance(event, threading.Event) else None
