"""What became of a job, as programs: its view with steps and queue, a finished job's
result, and why a job failed."""

from __future__ import annotations

from typing import Any

from kf_trainer_core import names, untrusted
from kf_trainer_core.function import progress_from_log, result_from_log
from kf_trainer_core.k8s.calls import Program
from kf_trainer_core.k8s.errors import ApiError
from kf_trainer_core.kueue import KueueProbe, QueueStatus, lookup
from kf_trainer_core.programs.logs import PROGRESS_LOG_TAIL, _read_step_log, read_logs
from kf_trainer_core.programs.reads import get_events, get_object, job_pods
from kf_trainer_core.status import (
    Failure,
    JobState,
    TrainJob,
    failing_pod,
    failure_of,
    reports_in_log,
    result_from_pods,
    to_trainjob,
    with_trainer_status,
)

#: At most this many log lines are kept for an error message.
FAILURE_LOG_LINES = 40


def get_job(
    namespace: str,
    name: str,
    obj: dict[str, Any] | None = None,
    *,
    kueue: KueueProbe | None = None,
    log_progress: bool = False,
) -> Program[TrainJob]:
    """A job with its steps (one list of its pods); with a ``kueue`` probe, its queue
    status (only a job labelled for a Kueue queue costs more requests); with
    ``log_progress``, its progress read from node-0's log where no status server
    writes it (:func:`with_log_progress`)."""
    names.require_job_name(name)
    if obj is None:
        obj = yield from get_object(namespace, name)
    pods = yield from job_pods(namespace, name)
    has_status = bool((obj.get("status") or {}).get("trainerStatus"))
    if log_progress and not has_status and reports_in_log(obj):
        lines = yield from _read_step_log(namespace, pods, "node-0", PROGRESS_LOG_TAIL)
        status = progress_from_log(lines, f"TrainJob {namespace}/{name}")
        if status is not None:
            obj = with_trainer_status(obj, status)
    queue = (yield from lookup(namespace, obj, kueue)) if kueue is not None else None
    return to_trainjob(obj, pods, queue=queue)


def outputs_of(
    namespace: str, obj: dict[str, Any], *, kueue: KueueProbe | None = None
) -> Program[tuple[TrainJob, Any, list[dict[str, Any]]]]:
    """A finished job's view, the function's return value and its pods (and its queue
    status, with a ``kueue`` probe)."""
    name = str(obj["metadata"]["name"])
    pods = yield from job_pods(namespace, name)
    queue = (
        (yield from lookup(namespace, obj, kueue, positions=False)) if kueue is not None else None
    )
    job = to_trainjob(obj, pods, queue=queue)
    found, value = result_from_pods(pods)
    # Too large for the termination message, or an MPI launcher: the result is in the
    # log; so is the last progress of a job that reported without a status server.
    need_result = not found and job.status == JobState.COMPLETE
    need_progress = job.progress is None and job.status.terminal and reports_in_log(obj)
    if need_result or need_progress:
        lines = yield from _read_step_log(namespace, pods, "node-0", PROGRESS_LOG_TAIL)
        if need_result:
            found, value = result_from_log(lines)
        status = progress_from_log(lines, f"TrainJob {namespace}/{name}") if need_progress else None
        if status is not None:
            job = to_trainjob(with_trainer_status(obj, status), pods)
    return job, value if found else None, pods


def explain_failure(
    namespace: str,
    obj: dict[str, Any],
    pods: list[dict[str, Any]] | None = None,
    *,
    queue: QueueStatus | None = None,
) -> Program[Failure]:
    """Everything that says why a job failed: condition, failing pod and container,
    warning events, and the last lines of the failing step's log."""
    name = str(obj["metadata"]["name"])
    if pods is None:
        pods = yield from job_pods(namespace, name)
    events = yield from get_events(namespace, name)
    found = failing_pod(pods)
    tail: list[str] = []
    step = found[0] if found else "node-0"
    try:
        # A few more than shown: the progress and result lines among them are hidden.
        tail = yield from read_logs(namespace, name, step, tail=FAILURE_LOG_LINES + 10)
    except ApiError:
        tail = []
    shown = untrusted.shown_lines(tail)
    return failure_of(obj, pods, events, shown[-FAILURE_LOG_LINES:], queue=queue)


def explain(namespace: str, name: str, *, kueue: KueueProbe | None = None) -> Program[Failure]:
    """:func:`explain_failure` of the job called ``name`` as it is now (its Kueue
    evictions count as evidence, with a ``kueue`` probe)."""
    names.require_job_name(name)
    obj = yield from get_object(namespace, name)
    queue = (
        (yield from lookup(namespace, obj, kueue, positions=False)) if kueue is not None else None
    )
    return (yield from explain_failure(namespace, obj, queue=queue))
