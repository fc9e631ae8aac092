"""How a task's coroutine is interrupted, the same way in both faces of the tasks: the
sync task runs its async twin's coroutine with the core's
:func:`~kf_trainer_core.tasks.sync_runner.sync_face` (which says why); here is what is
Prefect's: the thread-pool task runner's shutdown.
"""

from __future__ import annotations

import threading
from contextlib import AbstractAsyncContextManager

from kf_trainer_core.tasks import sync_runner

__all__ = ["TaskRunnerShutdown", "runner_shutdown_cancels"]


class TaskRunnerShutdown(BaseException):
    """The flow's task runner is shutting down (its flow run is being cancelled or has
    crashed) while this task waited in one of its worker threads.

    A ``BaseException``, like Prefect's own cancellation: the task does not fail, it
    stops; its job is stopped too only if the flow run is being cancelled.
    """


def runner_shutdown_cancels() -> AbstractAsyncContextManager[None]:
    """Cancel the block's coroutine when the flow's task runner shuts down, and raise
    :class:`TaskRunnerShutdown` for it once the block's clean-up has run."""
    shutdown = TaskRunnerShutdown("the flow's task runner is shutting down")
    return sync_runner.cancelled_by(_runner_cancel_event(), shutdown)


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
