"""The sync face of the async tasks: a synchronous Prefect task runs the same coroutine
as its async twin, on an event loop in a helper thread, and stays interruptible.

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
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from typing_extensions import ParamSpec

P = ParamSpec("P")
T = TypeVar("T")

#: How often the task's own thread wakes while its coroutine runs in the helper thread.
_SLICE_SECONDS = 0.5

_CURRENT: contextvars.ContextVar[InterruptibleRunner | None] = contextvars.ContextVar(
    "kf_trainer_prefect_runner", default=None
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

    def __init__(self) -> None:
        #: What interrupted the task's thread, once something did.
        self.cause: BaseException | None = None

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """The coroutine's result (or its exception), or the interruption."""
        loop = asyncio.new_event_loop()
        # Created here, the task copies this thread's context: the Prefect run, its
        # settings and logger are the coroutine's too, and so is this runner.
        token = _CURRENT.set(self)
        try:
            task = loop.create_task(coro)
        finally:
            _CURRENT.reset(token)
        done = threading.Event()
        helper = threading.Thread(
            target=_drive, args=(loop, task, done), name="kf-trainer-prefect", daemon=True
        )
        helper.start()
        shutdown = _runner_cancel_event()
        try:
            while not done.wait(_SLICE_SECONDS):
                if shutdown is not None and shutdown.is_set():
                    raise TaskRunnerShutdown("the flow's task runner is shutting down")
        except BaseException as exc:
            self.cause = exc
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
    runner = _CURRENT.get()
    if isinstance(exc, asyncio.CancelledError) and runner is not None and runner.cause:
        return runner.cause
    return exc


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
