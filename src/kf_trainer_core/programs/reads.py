"""Reading TrainJobs, their pods and events, and training runtimes, as programs (see
:mod:`kf_trainer_core.k8s.calls`)."""

from __future__ import annotations

from typing import Any

from kf_trainer_core.cluster.status import Event, Failure, TrainJob, job_events, to_trainjob
from kf_trainer_core.cluster.stuck import backoff_limits, waiting_of, with_waiting
from kf_trainer_core.errors import TrainJobNotFoundError
from kf_trainer_core.fields import names
from kf_trainer_core.k8s.calls import Get, Program
from kf_trainer_core.k8s.errors import ApiError
from kf_trainer_core.k8s.paging import DEFAULT_PAGE_SIZE, list_all
from kf_trainer_core.k8s.resources import (
    CLUSTER_TRAINING_RUNTIMES,
    EVENTS,
    JOBSET_NAME_LABEL,
    JOBSETS,
    PODS,
    TRAINING_RUNTIMES,
    TRAINJOBS,
)
from kf_trainer_core.manifest.runtimes import RuntimeInfo
from kf_trainer_core.programs.informer import slim_trainjob


def pod_selector(job: str) -> str:
    return f"{JOBSET_NAME_LABEL}={job}"


def job_pods(namespace: str, name: str) -> Program[list[dict[str, Any]]]:
    """The pods of one job (selected by its JobSet label; paginated, as every list of
    the suite is, so that a job of thousands of pods is read in pages)."""
    listing = yield from list_all(PODS, namespace, label_selector=pod_selector(name))
    pods: list[dict[str, Any]] = listing["items"]
    return pods


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


def get_object(namespace: str, name: str) -> Program[dict[str, Any]]:
    """The TrainJob object, or :class:`TrainJobNotFoundError`."""
    names.require_job_name(name)
    try:
        obj: dict[str, Any] = yield Get(TRAINJOBS, namespace, name)
    except ApiError as err:
        if err.not_found:
            raise TrainJobNotFoundError(f"TrainJob {namespace}/{name} not found.") from None
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
    # Each job says whether it restarts or cannot start; a list reads no JobSets, so a
    # restart's attempt count has no total here (``get_job`` reads it).
    jobs = []
    for o in items:
        mine = by_job.get(str(o["metadata"]["name"]), [])
        jobs.append(with_waiting(to_trainjob(o, mine), o, mine))
    return jobs


def get_events(namespace: str, name: str) -> Program[list[Event]]:
    """Events of the TrainJob, its JobSet, Jobs and pods (one paginated list of the
    namespace's events; each page keeps only the job's)."""
    names.require_job_name(name)
    listing = yield from list_all(EVENTS, namespace, where=lambda ev: bool(job_events(name, [ev])))
    return job_events(name, listing["items"])


def explained(
    namespace: str,
    job: TrainJob,
    obj: dict[str, Any],
    pods: list[dict[str, Any]],
    refused: Failure | None = None,
) -> Program[TrainJob]:
    """``job`` with what holds it up (:attr:`TrainJob.waiting`, read by
    :func:`~kf_trainer_core.cluster.stuck.waiting_of` from ``obj`` and its pods, and
    ``refused``: the API server's refusal of its pods), the attempt count's total
    read from the JobSet of a restarting job (:func:`jobset_limits`)."""
    waiting = waiting_of(obj, pods, refused=refused)
    if waiting is not None and waiting.state == "Restarting":
        limits = yield from jobset_limits(namespace, obj)
        if limits:
            waiting = waiting_of(obj, pods, limits=limits, refused=refused)
    return job if waiting == job.waiting else job.model_copy(update={"waiting": waiting})


def jobset_limits(namespace: str, obj: dict[str, Any]) -> Program[dict[str, int]]:
    """The ``backoffLimit`` of each replicated job of TrainJob ``obj``'s JobSet
    (:func:`~kf_trainer_core.cluster.stuck.backoff_limits`); empty when the JobSet cannot
    be read (gone, an earlier job's of the same name, or ``get`` on ``jobsets`` not
    granted): the attempt count then has no total."""
    meta = obj.get("metadata") or {}
    try:
        jobset = yield Get(JOBSETS, namespace, str(meta.get("name")))
    except ApiError:
        return {}
    uid = meta.get("uid")
    refs = ((jobset or {}).get("metadata") or {}).get("ownerReferences") or []
    if uid and not any(isinstance(r, dict) and r.get("uid") == uid for r in refs):
        return {}
    return backoff_limits(jobset)
