"""What became of a job, as programs: its view with steps and queue, a finished job's
result, and why a job failed."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from kf_trainer_core.base import untrusted
from kf_trainer_core.cluster import root_cause
from kf_trainer_core.cluster.kueue import KueueProbe, QueueStatus, lookup
from kf_trainer_core.cluster.results import (
    ResultMissing,
    carried,
    declined_in_log,
    expects_result,
    gone_pod,
    not_in_log,
    unreadable_log,
)
from kf_trainer_core.cluster.status import (
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
from kf_trainer_core.errors import TrainJobNotFoundError
from kf_trainer_core.fields import names
from kf_trainer_core.k8s.api import Api
from kf_trainer_core.k8s.errors import ApiError
from kf_trainer_core.programs.logs import (
    COURTESY_ATTEMPTS,
    PROGRESS_LOG_TAIL,
    _pod_for_step,
    _read_step_log,
)
from kf_trainer_core.programs.reads import explained, get_events, get_object, job_pods
from kf_trainer_core.spec.function import progress_from_log, result_from_log

#: At most this many log lines are kept for an error message.
FAILURE_LOG_LINES = 40
#: Log lines read of a failed step, for evidence: torchrun's own traceback and
#: summary take ~45 lines after the workers' errors, each worker's traceback ~15.
EVIDENCE_LOG_LINES = 300


async def get_job(
    api: Api,
    namespace: str,
    name: str,
    obj: dict[str, Any] | None = None,
    *,
    kueue: KueueProbe | None = None,
    log_progress: bool = False,
) -> TrainJob:
    """A job with its steps (one list of its pods); with a ``kueue`` probe, its queue
    status (only a job labelled for a Kueue queue costs more requests); with
    ``log_progress``, its progress read from node-0's log where no status server
    writes it (:func:`with_log_progress`; a log that cannot be read shows none)."""
    names.require_job_name(name)
    if obj is None:
        obj = await get_object(api, namespace, name)
    pods = await job_pods(api, namespace, name)
    has_status = bool((obj.get("status") or {}).get("trainerStatus"))
    if log_progress and not has_status and reports_in_log(obj):
        lines, _ = await _node0_log(api, namespace, pods)
        status = progress_from_log(lines or [], f"TrainJob {namespace}/{name}")
        if status is not None:
            obj = with_trainer_status(obj, status)
    queue = (await lookup(api, namespace, obj, kueue)) if kueue is not None else None
    return await explained(api, namespace, to_trainjob(obj, pods, queue=queue), obj, pods)


@dataclass(frozen=True)
class Outcome:
    """A finished job as read after it ended: its view, the function's return value
    (``None`` when it returned none or it could not be read), its pods, and why the
    result could not be read (``None`` when nothing is missing)."""

    job: TrainJob
    result: Any
    pods: list[dict[str, Any]]
    missing: ResultMissing | None = None


async def _node0_log(
    api: Api, namespace: str, pods: list[dict[str, Any]]
) -> tuple[list[str] | None, ApiError | None]:
    """node-0's last lines (none before its container started), or ``None`` and the
    error that kept them from being read.
    After the job its log is evidence only: its node may be gone or serve no logs, and
    that must never become the outcome of whoever reads the job."""
    try:
        lines = await _read_step_log(
            api, namespace, pods, "node-0", PROGRESS_LOG_TAIL, attempts=COURTESY_ATTEMPTS
        )
    except ApiError as err:
        return None, err
    return lines, None


async def outputs_of(
    api: Api,
    namespace: str,
    obj: dict[str, Any],
    *,
    kueue: KueueProbe | None = None,
    pods_of: Callable[[str], Awaitable[list[dict[str, Any]]]] | None = None,
) -> Outcome:
    """A finished job's view, the function's return value and its pods (and its queue
    status, with a ``kueue`` probe). Never raises for node-0's log: a result that
    cannot be read is :attr:`Outcome.missing` (see :mod:`kf_trainer_core.cluster.results`).
    ``pods_of`` reads the pods (a waits' shared
    :class:`~kf_trainer_core.programs.pod_batch.PodBatch`); else one list of the job's pods."""
    name = str(obj["metadata"]["name"])
    pods = await (pods_of or partial(job_pods, api, namespace))(name)
    queue = (
        (await lookup(api, namespace, obj, kueue, positions=False)) if kueue is not None else None
    )
    job = to_trainjob(obj, pods, queue=queue)
    found, value = result_from_pods(pods)
    # Too large for the termination message, or an MPI launcher: the result is in the
    # log; so is the last progress of a job that reported without a status server.
    need_result = not found and job.status == JobState.COMPLETE
    need_progress = job.progress is None and job.status.terminal and reports_in_log(obj)
    missing: ResultMissing | None = None
    if need_result or need_progress:
        lines, err = await _node0_log(api, namespace, pods)
        if need_result:
            if lines is not None:
                found, value = result_from_log(lines)
            if not found:
                node0 = _pod_for_step(pods, "node-0")
                expected = expects_result(obj, node0)
                if expected is None:  # a cached copy without the program: read it once
                    expected = await _runs_a_function(api, namespace, name)
                if expected:
                    missing = _why_missing(f"{namespace}/{name}", pods, lines, err)
        status = (
            progress_from_log(lines, f"TrainJob {namespace}/{name}")
            if need_progress and lines
            else None
        )
        if status is not None:
            job = to_trainjob(with_trainer_status(obj, status), pods, queue=queue)
    # What the job returned is read here once, and carried only within bounds.
    value, withheld = carried(f"{namespace}/{name}", value if found else None)
    return Outcome(job, value, pods, missing or withheld)


async def _runs_a_function(api: Api, namespace: str, name: str) -> bool:
    """Whether the job (read in full) runs a training function; a job that cannot be
    read now is assumed to (saying a result is missing is the safe side)."""
    try:
        full = await get_object(api, namespace, name)
    except (TrainJobNotFoundError, ApiError):
        return True
    return bool(expects_result(full, None))


def _why_missing(
    job: str, pods: list[dict[str, Any]], lines: list[str] | None, err: ApiError | None
) -> ResultMissing | None:
    pod = _pod_for_step(pods, "node-0")
    if pod is None:
        return gone_pod(job, None)
    pod_name = str(pod["metadata"]["name"])
    if err is not None:
        return unreadable_log(job, pod_name, err)
    if lines is not None and declined_in_log(lines):
        return None  # the function's return value was not JSON and it asked for none
    return not_in_log(job, pod_name)


async def explain_failure(
    api: Api,
    namespace: str,
    obj: dict[str, Any],
    pods: list[dict[str, Any]] | None = None,
    *,
    queue: QueueStatus | None = None,
) -> Failure:
    """Everything that says why a job failed: condition, failing pod and container,
    warning events, and the last lines of the failing step's log."""
    name = str(obj["metadata"]["name"])
    if pods is None:
        pods = await job_pods(api, namespace, name)
    events = await get_events(api, namespace, name, pods, obj)
    found = failing_pod(pods)
    step = found[0] if found else "node-0"
    # Evidence only: a node that serves no log is not waited out (see ReadLog).
    logs = {step: (await _evidence_log(api, namespace, pods, step))}
    # A distributed job's first failed node may say only that a peer went away: the
    # other nodes' logs then say which failed first (a few reads at most) — a running
    # one's too, as the cause may still be ending (cluster/root_cause.py).
    if root_cause.needs_more_logs(logs[step], step):
        others = [s for s, _ in root_cause.suspect_nodes(pods) if s != step]
        for other in others[: root_cause.LOG_READS - 1]:
            logs[other] = await _evidence_log(api, namespace, pods, other)
    first = root_cause.root_cause_node(pods, logs)
    tail = logs.get(first or step) or logs[step]
    return failure_of(obj, pods, events, tail, queue=queue, first=first, shown=FAILURE_LOG_LINES)


async def _evidence_log(
    api: Api, namespace: str, pods: list[dict[str, Any]], step: str
) -> list[str]:
    """The end of one step's log, as evidence of its failure (the lines a person does
    not read left out); empty when it cannot be read."""
    try:
        lines = await _read_step_log(
            api, namespace, pods, step, EVIDENCE_LOG_LINES, attempts=COURTESY_ATTEMPTS
        )
    except ApiError:
        return []
    return untrusted.shown_lines(lines)


async def explain(
    api: Api, namespace: str, name: str, *, kueue: KueueProbe | None = None
) -> Failure:
    """:func:`explain_failure` of the job called ``name`` as it is now (its Kueue
    evictions count as evidence, with a ``kueue`` probe)."""
    names.require_job_name(name)
    obj = await get_object(api, namespace, name)
    queue = (
        (await lookup(api, namespace, obj, kueue, positions=False)) if kueue is not None else None
    )
    return await explain_failure(api, namespace, obj, queue=queue)
