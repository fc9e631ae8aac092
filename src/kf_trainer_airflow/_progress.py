"""One line per change of a job's state or trainer progress, for the task log.

Used by the operator (waits in the worker) and the trigger (waits in the triggerer), so
both logs read the same. The watch delivers every new version of the job; most change
nothing a person cares about, so repeated lines are dropped.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kf_trainer_core.tasks import TrainJob


class ProgressReporter:
    """Callable for the core's ``callbacks=`` / ``on_update=``: logs ``where: state;
    42% done; about 2m 00s left; loss=0.41`` when something in it changed."""

    def __init__(self, log: logging.Logger | Any, where: str) -> None:
        self.log = log
        self.where = where
        self._last: tuple[Any, ...] | None = None

    def __call__(self, job: TrainJob) -> None:
        progress = job.progress
        # A job queued by Kueue: where it waits and why (not the elapsed time, which
        # changes on every read and would repeat the line).
        queue = job.queue.summary() if job.queue is not None and job.queue.waiting else []
        queue_key = (
            (job.queue.position, job.queue.pending_message, len(job.queue.evictions))
            if queue and job.queue is not None
            else None
        )
        # A step failing and being retried, a pod that cannot start: the core's one
        # explanation, as the CLI and the other orchestrators show it.
        state = job.waiting.line() if job.waiting is not None else job.status.value
        key = (
            state,
            progress.percentage if progress else None,
            tuple(sorted(progress.metrics.items())) if progress else (),
            queue_key,
        )
        if key == self._last:
            return
        self._last = key
        parts = [
            f"{self.where}: {state}",
            *queue,
            *job.progress_summary(),
        ]
        self.log.info("%s", "; ".join(parts))
