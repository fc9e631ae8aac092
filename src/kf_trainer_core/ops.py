"""The client's operations, each written once as a program (see
:mod:`kf_trainer_core.k8s.calls`) that the sync and the async client both run."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kf_trainer_core import names
from kf_trainer_core.builder import SPEC_HASH_ANNOTATION, BuiltTrainJob
from kf_trainer_core.errors import KFTrainerError, SpecError
from kf_trainer_core.function import result_from_log
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
    result_from_pods,
    to_trainjob,
)
from kf_trainer_core.timeutil import parse_time

#: At most this many log lines are kept for an error message.
FAILURE_LOG_LINES = 40


class TrainJobNotFoundError(KFTrainerError, LookupError):
    """No TrainJob of that name in the namespace."""


class SpecConflictError(KFTrainerError):
    """A TrainJob of the same name exists with a different spec: adopting it would run
    something other than what was asked."""


class SubmitError(KFTrainerError):
    """The API refused the TrainJob (its message names the fields)."""


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


def get_job(namespace: str, name: str, obj: dict[str, Any] | None = None) -> Program[TrainJob]:
    """A job with its steps (one list of its pods)."""
    if obj is None:
        obj = yield from get_object(namespace, name)
    pods = yield from job_pods(namespace, name)
    return to_trainjob(obj, pods)


def get_object(namespace: str, name: str) -> Program[dict[str, Any]]:
    """The TrainJob object, or :class:`TrainJobNotFoundError`."""
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


def jobs_for_identity(namespace: str, identity: str) -> Program[list[dict[str, Any]]]:
    """All TrainJobs labelled with an orchestrator identity, oldest first."""
    listing = yield from list_all(TRAINJOBS, namespace, label_selector=identity_selector(identity))
    items: list[dict[str, Any]] = listing["items"]
    return sorted(
        items, key=lambda o: str((o.get("metadata") or {}).get("creationTimestamp") or "")
    )


def delete(namespace: str, name: str, propagation: str = "Foreground") -> Program[bool]:
    """Delete the TrainJob (the Trainer and Kubernetes remove its JobSet and pods);
    ``False`` if it was already gone."""
    try:
        yield Delete(TRAINJOBS, namespace, name, propagation=propagation)
    except ApiError as err:
        if err.not_found:
            return False
        raise
    return True


def set_suspended(namespace: str, name: str, suspended: bool) -> Program[TrainJob]:
    """Suspend (pods are removed, the job kept) or resume a job."""
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
    return max(
        matching, key=lambda p: str((p.get("metadata") or {}).get("creationTimestamp") or "")
    )


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
    pods = yield from job_pods(namespace, name)
    pod = _pod_for_step(pods, step)
    container = _container_for(step)
    if pod is None and pods and strict:
        yield from _refuse_missing_step(namespace, name, step, pods)
    if pod is None or not _started(pod, container):
        return []
    try:
        text = yield ReadLog(namespace, str(pod["metadata"]["name"]), container, tail_lines=tail)
    except ApiError as err:
        if err.code in (400, 404):  # not started yet, or gone
            return []
        raise
    return str(text).splitlines()


def follow_logs(
    namespace: str,
    name: str,
    step: str = "node-0",
    *,
    tail: int | None = 1000,
    poll_interval: float = 1.0,
    start_timeout: float | None = None,
) -> Program[None]:
    """Emit a step's log lines as they are written, until its container ends.

    Waits for a pending pod instead of returning nothing; after a dropped stream it
    reconnects from the last line's timestamp and skips lines already emitted; replays
    at most ``tail`` lines of history on the first connect.
    """
    import time

    container = _container_for(step)
    cursor: str | None = None  # timestamp of the last emitted line
    seen_at_cursor = 0  # lines emitted with exactly that timestamp
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
            cursor, seen_at_cursor = None, 0  # a new pod (restart): its log starts over
        pod_name = current
        try:
            stream = yield OpenLogStream(
                namespace,
                current,
                container,
                since_time=cursor,
                tail_lines=tail if cursor is None else None,
                timestamps=True,
            )
        except ApiError as err:
            if err.code in (400, 404):
                yield Sleep(poll_interval)
                continue
            raise
        dropped = False
        skip_before = parse_time(cursor) if cursor else None
        skipped_at_cursor = 0
        try:
            while True:
                raw = yield ReadLine(stream)
                if raw is None:
                    break
                stamp, text = _split_timestamp(raw.decode("utf-8", errors="replace").rstrip("\r"))
                if stamp is not None and skip_before is not None:
                    when = parse_time(stamp)
                    if when < skip_before:
                        continue
                    if stamp == cursor and skipped_at_cursor < seen_at_cursor:
                        skipped_at_cursor += 1
                        continue
                if stamp is not None:
                    if stamp == cursor:
                        seen_at_cursor += 1
                    else:
                        cursor, seen_at_cursor = stamp, 1
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
            return
        _ = time  # keep the import local: programs stay importable without side effects
        yield Sleep(0.2 if not dropped else poll_interval)


# ------------------------------------------------------------------- results/failure


def outputs_of(
    namespace: str, obj: dict[str, Any]
) -> Program[tuple[TrainJob, Any, list[dict[str, Any]]]]:
    """A finished job's view, the function's return value and its pods."""
    name = str(obj["metadata"]["name"])
    pods = yield from job_pods(namespace, name)
    job = to_trainjob(obj, pods)
    found, value = result_from_pods(pods)
    if not found and job.status == JobState.COMPLETE:
        # Too large for the termination message, or an MPI launcher: read the log.
        lines = yield from read_logs(namespace, name, "node-0", tail=200)
        found, value = result_from_log(lines)
    return job, value if found else None, pods


def explain_failure(
    namespace: str, obj: dict[str, Any], pods: list[dict[str, Any]] | None = None
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
    return failure_of(obj, pods, events, tail[-FAILURE_LOG_LINES:])


def explain(namespace: str, name: str) -> Program[Failure]:
    """:func:`explain_failure` of the job called ``name`` as it is now."""
    obj = yield from get_object(namespace, name)
    return (yield from explain_failure(namespace, obj))


def json_dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)
