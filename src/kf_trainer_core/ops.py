"""The client's operations, each written once as a program (see
:mod:`kf_trainer_core.k8s.calls`) that the sync and the async client both run."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kf_trainer_core import names
from kf_trainer_core.builder import (
    ATTEMPT_ANNOTATION,
    IDENTITY_ANNOTATION,
    SPEC_HASH_ANNOTATION,
    BuiltTrainJob,
)
from kf_trainer_core.errors import SpecConflictError, SpecError, SubmitError, TrainJobNotFoundError
from kf_trainer_core.function import progress_from_log, result_from_log
from kf_trainer_core.informer import slim_trainjob
from kf_trainer_core.k8s.calls import (
    CloseStream,
    Create,
    Delete,
    Emit,
    Get,
    OpenLogStream,
    Patch,
    Program,
    ReadLine,
    ReadLog,
    Sleep,
)
from kf_trainer_core.k8s.errors import ApiError
from kf_trainer_core.k8s.paging import DEFAULT_PAGE_SIZE, list_all
from kf_trainer_core.k8s.resources import (
    CLUSTER_TRAINING_RUNTIMES,
    EVENTS,
    JOBSET_NAME_LABEL,
    PODS,
    TRAINING_RUNTIMES,
    TRAINJOBS,
)
from kf_trainer_core.kueue import KueueProbe, QueueStatus, lookup
from kf_trainer_core.report import MARKER as PROGRESS_MARKER
from kf_trainer_core.runtimes import RuntimeInfo
from kf_trainer_core.selectors import identity_selector
from kf_trainer_core.status import (
    Event,
    Failure,
    JobState,
    TrainJob,
    failing_pod,
    failure_of,
    job_events,
    job_state,
    pod_recency,
    reports_in_log,
    result_from_pods,
    to_trainjob,
    with_trainer_status,
)
from kf_trainer_core.timeutil import parse_time

#: At most this many log lines are kept for an error message.
FAILURE_LOG_LINES = 40
#: Lines at the end of node-0's log searched for the result and the last progress (the
#: generated program prints both last).
PROGRESS_LOG_TAIL = 200


@dataclass(frozen=True)
class Submitted:
    """The outcome of an idempotent submit."""

    job: TrainJob
    created: bool
    #: The raw object as the API returned it.
    obj: dict[str, Any]

    def reuse_notice(self) -> str | None:
        """What to tell the user when the submit found a job that has already finished
        (a rerun under the same identity or name): its result is reused and nothing
        trains again, so its log is not replayed as if it did. ``None`` otherwise."""
        if self.created or not self.job.status.terminal:
            return None
        job = self.job
        return (
            f"[kf-trainer] reusing the finished job {job.namespace}/{job.name} "
            f"({job.status.value}); nothing trains again and its log is not replayed "
            f"(read it with: kf-trainer jobs logs {job.name} -n {job.namespace})"
        )


def pod_selector(job: str) -> str:
    return f"{JOBSET_NAME_LABEL}={job}"


def job_pods(namespace: str, name: str) -> Program[list[dict[str, Any]]]:
    """The pods of one job (selected by its JobSet label; paginated, as every list of
    the suite is, so that a job of thousands of pods is read in pages)."""
    listing = yield from list_all(PODS, namespace, label_selector=pod_selector(name))
    pods: list[dict[str, Any]] = listing["items"]
    return pods


# ------------------------------------------------------------------------ runtimes


def get_runtime(
    name: str, kind: str, namespace: str
) -> Program[tuple[RuntimeInfo, dict[str, Any]]]:
    """Read a runtime; a missing one is a clear error naming what exists."""
    if not isinstance(name, str) or not name.strip() or "/" in name:
        raise ValueError(
            f"runtime name {name!r} names no runtime. Fix: use a runtime's name, e.g. "
            "'torch-distributed' (list_runtimes() shows those installed)."
        )
    res = CLUSTER_TRAINING_RUNTIMES if kind == "ClusterTrainingRuntime" else TRAINING_RUNTIMES
    ns = None if res is CLUSTER_TRAINING_RUNTIMES else namespace
    try:
        obj = yield Get(res, ns, name)
    except ApiError as err:
        if not err.not_found:
            raise
        listing = yield from list_all(res, ns, slim=lambda o: (o.get("metadata") or {}).get("name"))
        known = sorted(str(n) for n in listing["items"])
        where = f" in namespace {namespace!r}" if ns else ""
        raise TrainJobNotFoundError(
            f"{kind} {name!r} does not exist{where}. Fix: use one of {known or 'none installed'}"
            " (kubectl get clustertrainingruntimes)."
        ) from None
    return RuntimeInfo.from_manifest(obj), obj


def list_runtimes(namespace: str) -> Program[list[RuntimeInfo]]:
    """Cluster runtimes and the namespace's own runtimes."""
    out = []
    cluster = yield from list_all(CLUSTER_TRAINING_RUNTIMES, None, slim=RuntimeInfo.from_manifest)
    out += cluster["items"]
    try:
        local = yield from list_all(TRAINING_RUNTIMES, namespace, slim=RuntimeInfo.from_manifest)
        out += local["items"]
    except ApiError as err:
        if not (err.forbidden or err.not_found):
            raise
    return out


# ---------------------------------------------------------------------------- jobs


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
        status = progress_from_log(lines)
        if status is not None:
            obj = with_trainer_status(obj, status)
    queue = (yield from lookup(namespace, obj, kueue)) if kueue is not None else None
    return to_trainjob(obj, pods, queue=queue)


def get_object(namespace: str, name: str) -> Program[dict[str, Any]]:
    """The TrainJob object, or :class:`TrainJobNotFoundError`."""
    names.require_job_name(name)
    try:
        obj: dict[str, Any] = yield Get(TRAINJOBS, namespace, name)
    except ApiError as err:
        if err.not_found:
            raise TrainJobNotFoundError(f"TrainJob {namespace}/{name} not found") from None
        raise
    return obj


def list_jobs(
    namespace: str, label_selector: str | None = None, page_size: int | None = DEFAULT_PAGE_SIZE
) -> Program[list[TrainJob]]:
    """Jobs of a namespace, with steps: one paginated list of the jobs (each page
    slimmed before the next: programs are not kept) and one of their pods."""
    listing = yield from list_all(
        TRAINJOBS, namespace, label_selector=label_selector, page_size=page_size, slim=slim_trainjob
    )
    items = listing["items"]
    if not items:
        return []
    pods = yield from list_all(
        PODS, namespace, label_selector=JOBSET_NAME_LABEL, page_size=page_size
    )
    by_job: dict[str, list[dict[str, Any]]] = {}
    for pod in pods["items"]:
        by_job.setdefault(
            ((pod.get("metadata") or {}).get("labels") or {}).get(JOBSET_NAME_LABEL, ""), []
        ).append(pod)
    return [to_trainjob(o, by_job.get(str(o["metadata"]["name"]), [])) for o in items]


def submit(namespace: str, built: BuiltTrainJob) -> Program[Submitted]:
    """Create the TrainJob once.

    A 409 for a job carrying the same spec hash is adoption (a retried task finds the
    job its crashed predecessor created); the same name with another spec is a
    :class:`SpecConflictError`; a job being deleted is waited out, then created anew.
    """
    manifest = built.manifest
    for _ in range(60):
        try:
            obj = yield Create(TRAINJOBS, namespace, manifest)
            return Submitted(to_trainjob(obj), True, obj)
        except ApiError as err:
            if err.invalid or err.code == 400:
                causes = "; ".join(err.causes()) or err.message
                raise SubmitError(
                    f"the API server rejected TrainJob {built.name!r}: {causes}"
                ) from None
            if not err.conflict:
                raise
        try:
            existing = yield Get(TRAINJOBS, namespace, built.name)
        except ApiError as err:
            if err.not_found:
                continue  # deleted in between: create again
            raise
        meta = existing.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            yield Sleep(1.0)
            continue
        theirs = (meta.get("annotations") or {}).get(SPEC_HASH_ANNOTATION)
        if theirs != built.spec_hash:
            raise SpecConflictError(
                f"TrainJob {namespace}/{built.name} already exists with a different spec "
                f"(spec hash {str(theirs)[:12]}, ours {built.spec_hash[:12]}). Fix: choose another "
                "name, or delete the old job if it may be replaced."
            )
        return Submitted(to_trainjob(existing), False, existing)
    raise SubmitError(f"TrainJob {namespace}/{built.name} kept being deleted and recreated")


def attempt_of(obj: Mapping[str, Any]) -> int:
    """The attempt number the builder wrote on a job (``0`` for the first attempt,
    which carries no annotation)."""
    value = ((obj.get("metadata") or {}).get("annotations") or {}).get(ATTEMPT_ANNOTATION)
    try:
        return max(0, int(str(value))) if value is not None else 0
    except ValueError:
        return 0


def jobs_for_identity(namespace: str, identity: str) -> Program[list[dict[str, Any]]]:
    """All TrainJobs submitted for an orchestrator identity, by attempt number.

    The label holds a digest of the identity; the annotation the identity itself, which
    is checked so that another identity's jobs are never taken for ours."""
    listing = yield from list_all(TRAINJOBS, namespace, label_selector=identity_selector(identity))
    items: list[dict[str, Any]] = [
        o
        for o in listing["items"]
        if ((o.get("metadata") or {}).get("annotations") or {}).get(IDENTITY_ANNOTATION)
        in (None, identity)
    ]
    return sorted(items, key=lambda o: (attempt_of(o), str(o["metadata"].get("name"))))


def choose_attempt(existing: list[dict[str, Any]], fresh_after_failure: bool) -> int:
    """The attempt a submit for an identity goes to, given the identity's jobs.

    The attempt annotation is the truth, not creation times (one-second resolution: an
    attempt that failed within a second of its successor's creation could pass for
    the newest) nor the number of jobs (a deleted old attempt made a retry adopt a
    failed one). So:

    * a live attempt (not finished, not being deleted) is adopted — there is exactly
      one live job per identity, however many retries run;
    * otherwise the highest attempt decides: failed (and ``fresh_after_failure``)
      means a fresh attempt numbered one higher; complete (or failed without
      ``fresh_after_failure``) is adopted, its result kept; one being deleted is
      submitted again under its number once it is gone.
    """
    if not existing:
        return 0
    live = [
        o
        for o in existing
        if not job_state(o).terminal and not (o.get("metadata") or {}).get("deletionTimestamp")
    ]
    if live:
        return max(attempt_of(o) for o in live)
    newest = max(existing, key=attempt_of)
    if fresh_after_failure and job_state(newest) is JobState.FAILED:
        return attempt_of(newest) + 1
    return attempt_of(newest)


def delete(namespace: str, name: str, propagation: str = "Foreground") -> Program[bool]:
    """Delete the TrainJob (the Trainer and Kubernetes remove its JobSet and pods);
    ``False`` if it was already gone."""
    names.require_job_name(name)
    try:
        yield Delete(TRAINJOBS, namespace, name, propagation=propagation)
    except ApiError as err:
        if err.not_found:
            return False
        raise
    return True


def set_suspended(namespace: str, name: str, suspended: bool) -> Program[TrainJob]:
    """Suspend (pods are removed, the job kept) or resume a job."""
    names.require_job_name(name)
    try:
        obj = yield Patch(TRAINJOBS, namespace, name, {"spec": {"suspend": suspended}})
    except ApiError as err:
        if err.not_found:
            raise TrainJobNotFoundError(f"TrainJob {namespace}/{name} not found") from None
        raise
    return to_trainjob(obj)


def cancel(namespace: str, name: str, action: str) -> Program[bool]:
    """Stop a job by ``action``: ``delete``, ``suspend`` (kept, resumable) or ``keep``
    (leave it running). ``True`` if something was done."""
    names.require_job_name(name)
    if action == "keep":
        return False
    if action == "suspend":
        try:
            yield from set_suspended(namespace, name, True)
        except TrainJobNotFoundError:
            return False
        return True
    if action != "delete":
        raise ValueError(f"unknown cancel action {action!r}. Fix: use delete, suspend or keep.")
    return (yield from delete(namespace, name))


def stop_unfinished(
    namespace: str,
    action: str,
    *,
    name: str | None = None,
    identity: str | None = None,
    label_selector: str | None = None,
) -> Program[list[str]]:
    """Apply ``action`` to the unfinished jobs picked by ``name``, by an orchestrator
    ``identity`` (every attempt it submitted) or by ``label_selector``; return the names
    acted on. Finished jobs and jobs already being deleted are left alone: a finished
    job keeps its result for a retried task to collect."""
    # Checked before the first request: cancel() would only catch a bad action once it
    # met an unfinished job.
    if action not in ("delete", "suspend", "keep"):
        raise ValueError(f"unknown action {action!r}. Fix: use delete, suspend or keep.")
    if name is None and identity is None and label_selector is None:
        raise ValueError(
            "stop_unfinished() picks no job. Fix: pass a name, an identity or a label selector."
        )
    # Each way of picking must pick something narrower than "every job": an empty name
    # or selector would select the whole namespace.
    if name is not None:
        names.require_job_name(name)
    if identity is not None and not identity.strip("/ "):
        raise ValueError(
            f"stop_unfinished(identity={identity!r}) names no identity. Fix: pass the "
            "identity the job was submitted with, e.g. (dag_id, task_id, run_id)."
        )
    if label_selector is not None and not label_selector.strip():
        raise ValueError(
            "stop_unfinished(label_selector='') would select every TrainJob of the "
            "namespace. Fix: pass a selector naming a label, e.g. 'team=a'."
        )
    if action == "keep":
        return []
    if name is not None:
        try:
            objs = [(yield from get_object(namespace, name))]
        except TrainJobNotFoundError:
            return []
    else:
        # The label holds a digest of the identity, the annotation the identity itself.
        wanted = identity_selector(identity) if identity is not None else None
        selector = ",".join(s for s in (label_selector, wanted) if s)
        listing = yield from list_all(
            TRAINJOBS, namespace, label_selector=selector, slim=slim_trainjob
        )
        objs = listing["items"]
    done = []
    for obj in objs:
        job = to_trainjob(obj)
        if identity is not None and job.identity not in (None, identity):
            continue
        if job.status.terminal or job.deleting:
            continue
        if (yield from cancel(namespace, job.name, action)):
            done.append(job.name)
    return done


def get_events(namespace: str, name: str) -> Program[list[Event]]:
    """Events of the TrainJob, its JobSet, Jobs and pods (one paginated list of the
    namespace's events; each page keeps only the job's)."""
    names.require_job_name(name)
    listing = yield from list_all(EVENTS, namespace, where=lambda ev: bool(job_events(name, [ev])))
    return job_events(name, listing["items"])


# ---------------------------------------------------------------------------- logs


def _container_for(step: str) -> str:
    return step if step in (names.DATASET_INITIALIZER, names.MODEL_INITIALIZER) else names.NODE


def _pod_for_step(pods: list[dict[str, Any]], step: str) -> dict[str, Any] | None:
    from kf_trainer_core.status import _is_mpi, step_name

    mpi = _is_mpi(pods)
    matching = [p for p in pods if step_name(p, mpi) == step]
    if not matching:
        return None
    return max(matching, key=pod_recency)


def _started(pod: Mapping[str, Any], container: str) -> bool:
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        if cs.get("name") == container:
            state = cs.get("state") or {}
            return "running" in state or "terminated" in state
    return (pod.get("status") or {}).get("phase") in ("Running", "Succeeded", "Failed")


def _split_timestamp(line: str) -> tuple[str | None, str]:
    stamp, sep, text = line.partition(" ")
    if sep and len(stamp) >= 20 and stamp[4:5] == "-" and stamp[10:11] == "T":
        return stamp, text
    return None, line


def _refuse_missing_step(
    namespace: str, name: str, step: str, pods: list[dict[str, Any]]
) -> Program[None]:
    """A finished job has all the pods it will have: asking for a step it never ran is
    a mistake to name (with the steps it has), not an empty log."""
    from kf_trainer_core.status import _is_mpi, step_name

    obj = yield Get(TRAINJOBS, namespace, name)
    if not job_state(obj).terminal:
        return None  # the step may not have started yet
    mpi = _is_mpi(pods)
    have = sorted({s for s in (step_name(p, mpi) for p in pods) if s})
    raise SpecError.single(
        "step",
        f"TrainJob {name} has no step {step!r}; its steps are {', '.join(have)}.",
        "ask for one of those.",
        title="Invalid arguments",
    )


def read_logs(
    namespace: str,
    name: str,
    step: str = "node-0",
    tail: int | None = None,
    *,
    strict: bool = False,
) -> Program[list[str]]:
    """The log of one step now (empty if its pod has not started). ``strict``: a
    finished job without that step is a :class:`SpecError` naming its steps."""
    names.require_job_name(name)
    pods = yield from job_pods(namespace, name)
    if strict and pods and _pod_for_step(pods, step) is None:
        yield from _refuse_missing_step(namespace, name, step, pods)
    return (yield from _read_step_log(namespace, pods, step, tail))


def _read_step_log(
    namespace: str, pods: list[dict[str, Any]], step: str, tail: int | None
) -> Program[list[str]]:
    pod = _pod_for_step(pods, step)
    container = _container_for(step)
    if pod is None or not _started(pod, container):
        return []
    try:
        text = yield ReadLog(namespace, str(pod["metadata"]["name"]), container, tail_lines=tail)
    except ApiError as err:
        if err.code in (400, 404):  # not started yet, or gone
            return []
        raise
    return str(text).splitlines()


class _LogCursor:
    """Where a log follow is: the node's timestamp of the last line emitted and how
    many emitted lines carry exactly that timestamp. A resumed read (from that
    timestamp: ``sinceTime`` is inclusive, and some kubelets round it down to the
    second) starts with lines already emitted; :meth:`accept` drops those and keeps
    every line after them, so nothing is repeated or lost."""

    def __init__(self) -> None:
        self.stamp: str | None = None
        self.seen = 0
        self._floor: Any = None
        self._pass_stamp: str | None = None
        self._pass_seen = 0
        self._skipped = 0

    def reset(self) -> None:
        """A new container instance: its log starts over."""
        self.__init__()  # type: ignore[misc]

    def start_pass(self) -> None:
        """A read from :attr:`stamp` begins."""
        self._floor = parse_time(self.stamp) if self.stamp else None
        self._pass_stamp, self._pass_seen, self._skipped = self.stamp, self.seen, 0

    def accept(self, line: str) -> str | None:
        """The line's text if it is new, else ``None``."""
        stamp, text = _split_timestamp(line)
        if stamp is not None and self._floor is not None:
            if parse_time(stamp) < self._floor:
                return None
            if stamp == self._pass_stamp and self._skipped < self._pass_seen:
                self._skipped += 1
                return None
        if stamp is not None:
            if stamp == self.stamp:
                self.seen += 1
            else:
                self.stamp, self.seen = stamp, 1
        return text

    def shown(self, line: str, hide_progress: bool) -> str | None:
        """The line's text if it is new and to be shown, else ``None``."""
        text = self.accept(line.rstrip("\r"))
        return None if text is None or (hide_progress and PROGRESS_MARKER in text) else text

    def resume(self, tail: int | None) -> dict[str, Any]:
        """Where a read starts: after the last line emitted, else ``tail`` lines back."""
        return {
            "since_time": self.stamp,
            "tail_lines": tail if self.stamp is None else None,
            "timestamps": True,
        }


def follow_logs(
    namespace: str,
    name: str,
    step: str = "node-0",
    *,
    tail: int | None = 1000,
    poll_interval: float = 1.0,
    start_timeout: float | None = None,
    hide_progress: bool = False,
) -> Program[None]:
    """Emit a step's log lines as they are written, until its container ends
    (without the function's progress lines when ``hide_progress``: a waiter shows them
    as progress instead).

    Waits for a pending pod instead of returning nothing; after a dropped stream it
    resumes from the last line's own timestamp (the node's clock wrote it, so no clock
    of ours is compared with it) and skips lines already emitted; replays at most
    ``tail`` lines of history on the first connect. A stream that ends as the container
    ends is followed by one read of what came after its last line: a stream cut at
    that moment (an apiserver restart, a proxy timeout) would otherwise lose the end.
    """
    names.require_job_name(name)
    container = _container_for(step)
    cursor = _LogCursor()
    waited = 0.0
    pod_name: str | None = None
    while True:
        pods = yield from job_pods(namespace, name)
        pod = _pod_for_step(pods, step)
        if pod is None or not _started(pod, container):
            try:
                obj = yield Get(TRAINJOBS, namespace, name)
            except ApiError as err:
                if err.not_found:
                    return
                raise
            if job_state(obj).terminal and pod is None:
                return  # the job ended without this step ever running
            if pod is not None and failing_pod([pod]) is not None and not _started(pod, container):
                return  # stuck (image pull...): nothing will be written
            if start_timeout is not None and waited >= start_timeout:
                return
            yield Sleep(poll_interval)
            waited += poll_interval
            continue
        current = str(pod["metadata"]["name"])
        if pod_name is not None and current != pod_name:
            cursor.reset()  # a new pod (restart): its log starts over
        pod_name = current
        try:
            stream = yield OpenLogStream(namespace, current, container, **cursor.resume(tail))
        except ApiError as err:
            if err.code in (400, 404):
                yield Sleep(poll_interval)
                continue
            raise
        dropped = False
        cursor.start_pass()
        try:
            while True:
                raw = yield ReadLine(stream)
                if raw is None:
                    break
                text = cursor.shown(raw.decode("utf-8", errors="replace"), hide_progress)
                if text is not None:
                    yield Emit(text)
        except ApiError:
            dropped = True
        yield CloseStream(stream)
        # The stream ended: finished container, or a cut connection to resume.
        pods = yield from job_pods(namespace, name)
        pod = _pod_for_step(pods, step)
        if pod is None:
            return
        phase = (pod.get("status") or {}).get("phase")
        if (
            not dropped
            and phase in ("Succeeded", "Failed")
            and str(pod["metadata"]["name"]) == pod_name
        ):
            try:
                rest = yield ReadLog(namespace, pod_name, container, **cursor.resume(tail))
            except ApiError:
                return  # the pod went meanwhile: nothing more to read
            cursor.start_pass()
            for line in str(rest).splitlines():
                text = cursor.shown(line, hide_progress)
                if text is not None:
                    yield Emit(text)
            return
        yield Sleep(0.2 if not dropped else poll_interval)


# ------------------------------------------------------------------- results/failure


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
        status = progress_from_log(lines) if need_progress else None
        if status is not None:
            job = to_trainjob(with_trainer_status(obj, status), pods)
    return job, value if found else None, pods


def with_log_progress(namespace: str, obj: dict[str, Any]) -> Program[dict[str, Any]]:
    """``obj`` with the progress its function printed in node-0's log as
    ``status.trainerStatus``, where the cluster has no status server to write it.
    Unchanged when the job has a ``trainerStatus`` or does not report in its log.
    (Waits call it now and then; a job view that wants live progress can too.)"""
    if (obj.get("status") or {}).get("trainerStatus") or not reports_in_log(obj):
        return obj
    try:
        lines = yield from read_logs(namespace, str(obj["metadata"]["name"]), "node-0", 50)
    except ApiError:
        return obj  # progress is a courtesy: a log that cannot be read shows none
    status = progress_from_log(lines)
    return obj if status is None else with_trainer_status(obj, status)


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
        tail = yield from read_logs(namespace, name, step, tail=FAILURE_LOG_LINES)
    except ApiError:
        tail = []
    return failure_of(obj, pods, events, tail[-FAILURE_LOG_LINES:], queue=queue)


def explain(namespace: str, name: str, *, kueue: KueueProbe | None = None) -> Program[Failure]:
    """:func:`explain_failure` of the job called ``name`` as it is now (its Kueue
    evictions count as evidence, with a ``kueue`` probe)."""
    names.require_job_name(name)
    obj = yield from get_object(namespace, name)
    queue = (
        (yield from lookup(namespace, obj, kueue, positions=False)) if kueue is not None else None
    )
    return (yield from explain_failure(namespace, obj, queue=queue))


def json_dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)
