"""How a :class:`~kf_trainer_airflow.operators.trainjob.TrainJobOperator` task ends: the
job's events and log tail in the task log, ``on_finish_action`` (the core's
:meth:`~kf_trainer_core.tasks.lifecycle.TaskJob.finish`), and the exception a failure
raises (one type per failure class, for retry policies).

Importing this module imports nothing of the Kubernetes clients (DAG files import the
operator, which imports this).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    from kf_trainer_airflow.operators.trainjob import TrainJobOperator
    from kf_trainer_core.tasks.lifecycle import SyncTaskJob

#: At most this many of a failed job's events go to the task log.
MAX_EVENTS = 50


async def _lines(lines: Any) -> list[str]:
    return [line async for line in lines]


def print_log_tail(op: TrainJobOperator, task: SyncTaskJob) -> None:
    """The last ``log_tail`` lines of the job's ``log_step``, into the task log."""
    name = str(op._job_name)
    try:
        lines = task.call(lambda c: _lines(c.get_job_logs(name, op.log_step, tail=op.log_tail)))
    except Exception as exc:  # the log is a courtesy: never fail the task for it
        op.log.warning("Could not read the log of %s: %s", op._where, exc)
        return
    if lines:
        op.log.info("Last %d log lines of %s, step %s:", len(lines), op._where, op.log_step)
        for line in lines:
            op.log.info("[%s] %s", op.log_step, line)


def fail_event(op: TrainJobOperator, event: Mapping[str, Any]) -> NoReturn:
    """A deferred wait's unsuccessful event (failed, timed out, deleted, an error): the
    log's tail when the trigger did not show the log, the job's events, then the
    failure. A timeout keeps the core's message (what holds the job up, the fix, what is
    left behind)."""
    from kf_trainer_airflow.failures import failed_exception

    status = event.get("status")
    message = str(event.get("message") or f"{op._where} ended with {status}")
    try:
        task = op._session()
    except Exception as exc:  # report the job's failure, not this one
        op.log.warning("Could not reach the backend for events and logs: %s", exc)
        raise failed_exception(
            message,
            job_name=op._job_name,
            namespace=op._job_namespace,
            failure=event.get("failure"),
            failure_class=event.get("failure_class"),
            fail_fast_on=op.fail_fast_on,
        ) from None
    if tail_at_resume(op, event):
        print_log_tail(op, task)
    fail_ended(op, task, event)


def fail_ended(op: TrainJobOperator, task: SyncTaskJob, event: Mapping[str, Any]) -> NoReturn:
    """A wait's bad ending (``failed``, ``timeout``, ``deleted``, ``error``: the
    trigger's event, or what the worker's wait raised, told alike): log the job's
    events, apply ``on_finish_action`` to a failed or timed out job and raise the
    failure. A timeout's message is kept as the core wrote it: what holds the job up,
    the fix of its class and what is left behind — the same words as the CLI's."""
    from kf_trainer_airflow.failures import failed_exception

    status = event.get("status")
    message = str(event.get("message") or f"{op._where} ended with {status}")
    failure = event.get("failure")
    log_events(op, task)
    if status in ("failed", "timeout"):
        # on_finish_action: only a finished job is deleted (a task that stopped waiting
        # leaves an unfinished one as it is).
        task.finish(succeeded=False)
    if failure and op.get_logs and op.log_tail and status != "timeout":
        # The task log already shows the job's log (streamed, or its tail after a
        # deferred wait) and events: the error says why once, without them again.
        from kf_trainer_core.tasks import Failure

        brief = Failure.model_validate({**failure, "log_tail": [], "events": []})
        message = f"{op._where} failed: {brief.describe()} (its log and events are above)"
    if not message.startswith("TrainJob "):
        message = f"TrainJob {message}"
    # A type per failure class (for retry policies); configuration fails fast.
    # `from None`: the core's error said the same; a chained traceback repeats it.
    raise failed_exception(
        message,
        job_name=op._job_name,
        namespace=op._job_namespace,
        failure=failure,
        failure_class=event.get("failure_class"),
        fail_fast_on=getattr(op, "fail_fast_on", ("configuration",)),
    ) from None


def tail_at_resume(op: TrainJobOperator, event: Mapping[str, Any]) -> bool:
    """Whether a resumed deferred task prints the log's tail: asked for, and not shown
    while the task was deferred (the trigger says whether it followed the log)."""
    return bool(op.get_logs and op.log_tail) and not event.get("log_followed")


def log_events(op: TrainJobOperator, task: SyncTaskJob) -> None:
    """The job's events (its JobSet's, Jobs' and pods' too), oldest first: what
    ``kubectl describe`` would show, in the task log."""
    name = str(op._job_name)
    try:
        events = task.call(lambda c: c.get_job_events(name))
    except Exception as exc:  # the failure is reported either way
        op.log.warning("Could not read the events of %s: %s", op._where, exc)
        return
    if not events:
        return
    shown = events[-MAX_EVENTS:]
    op.log.error("Events of %s (%d of %d):", op._where, len(shown), len(events))
    for event in shown:
        stamp = event.event_time.isoformat() if event.event_time else "-"
        op.log.error("  %s %s", stamp, event.line())
