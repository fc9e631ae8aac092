"""Reading TrainJobs, their pods and events, and training runtimes, as programs (see
:mod:`kf_trainer_core.k8s.calls`)."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from kf_trainer_core.base.errors import NamespaceNotFoundError, RuntimeNotFoundError
from kf_trainer_core.base.quoting import shown
from kf_trainer_core.cluster.events import job_events, steps_of
from kf_trainer_core.cluster.status import Event, Failure, TrainJob, to_trainjob
from kf_trainer_core.cluster.stuck import backoff_limits, waiting_of, with_waiting
from kf_trainer_core.errors import TrainJobNotFoundError
from kf_trainer_core.fields import names
from kf_trainer_core.k8s.api import Api
from kf_trainer_core.k8s.calls import Get
from kf_trainer_core.k8s.errors import ApiError
from kf_trainer_core.k8s.paging import DEFAULT_PAGE_SIZE, list_all
from kf_trainer_core.k8s.resources import (
    CLUSTER_TRAINING_RUNTIMES,
    EVENTS,
    JOBSET_NAME_LABEL,
    JOBSETS,
    NAMESPACES,
    PODS,
    TRAINING_RUNTIMES,
    TRAINJOBS,
)
from kf_trainer_core.manifest.runtimes import RuntimeInfo
from kf_trainer_core.programs.informer import slim_trainjob


def pod_selector(job: str) -> str:
    return f"{JOBSET_NAME_LABEL}={job}"


def pods_by_job(pods: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Pods grouped by the job (JobSet) their label names."""
    by_job: dict[str, list[dict[str, Any]]] = {}
    for pod in pods:
        labels = (pod.get("metadata") or {}).get("labels") or {}
        by_job.setdefault(labels.get(JOBSET_NAME_LABEL, ""), []).append(pod)
    return by_job


async def job_pods(api: Api, namespace: str, name: str) -> list[dict[str, Any]]:
    """The pods of one job (selected by its JobSet label; paginated, as every list of
    the suite is, so that a job of thousands of pods is read in pages)."""
    listing = await list_all(api, PODS, namespace, label_selector=pod_selector(name))
    pods: list[dict[str, Any]] = listing["items"]
    return pods


async def get_runtime(
    api: Api, name: str, kind: str, namespace: str
) -> tuple[RuntimeInfo, dict[str, Any]]:
    """Read a runtime; a missing one is a :class:`RuntimeNotFoundError` naming the
    nearest installed name, or the kind a runtime of that name has."""
    if not isinstance(name, str) or not name.strip() or "/" in name:
        raise ValueError(
            f"runtime name {shown(name)} names no runtime. Fix: use a runtime's name, e.g. "
            "'torch-distributed' (list_runtimes() shows those installed)."
        )
    res = CLUSTER_TRAINING_RUNTIMES if kind == "ClusterTrainingRuntime" else TRAINING_RUNTIMES
    ns = None if res is CLUSTER_TRAINING_RUNTIMES else namespace
    try:
        obj = await api(Get(res, ns, name))
    except ApiError as err:
        if not err.not_found:
            raise
        missing = await _runtime_missing(api, name, kind, namespace)
        raise missing from None
    return RuntimeInfo.from_manifest(obj), obj


#: At most this many installed runtimes are named in an error.
_NAMED_RUNTIMES = 12
#: Where a user sees the runtimes, whichever way they reached the error.
_RUNTIMES_HINT = "`kf-trainer runtimes list` or list_runtimes() shows them"


async def _runtime_names(api: Api, kind: str, namespace: str) -> list[str]:
    """The names of the installed runtimes of ``kind`` (none where the namespace's
    runtimes may not be read)."""
    res = CLUSTER_TRAINING_RUNTIMES if kind == "ClusterTrainingRuntime" else TRAINING_RUNTIMES
    ns = None if res is CLUSTER_TRAINING_RUNTIMES else namespace
    try:
        listing = await list_all(api, res, ns, slim=lambda o: (o.get("metadata") or {}).get("name"))
    except ApiError as err:
        if res is CLUSTER_TRAINING_RUNTIMES or not (err.forbidden or err.not_found):
            raise
        return []
    return sorted(str(n) for n in listing["items"] if n)


async def _runtime_missing(api: Api, name: str, kind: str, namespace: str) -> RuntimeNotFoundError:
    """The error for a runtime that does not exist: the other kind when a runtime of
    that name has it, else the nearest installed name ("did you mean") and what is
    installed. One fix, never a second one added by whoever reports it."""
    other = "TrainingRuntime" if kind == "ClusterTrainingRuntime" else "ClusterTrainingRuntime"
    here = await _runtime_names(api, kind, namespace)
    there = await _runtime_names(api, other, namespace)

    def where(k: str) -> str:
        return f" in namespace {namespace!r}" if k == "TrainingRuntime" else ""

    problem = f"{kind} {name!r} does not exist{where(kind)}"
    if name in there:
        return RuntimeNotFoundError(
            f"{problem}; a {other} of that name exists{where(other)}. Fix: name its kind: "
            f"`runtime: {{name: {name}, kind: {other}}}` in a spec, "
            f"RuntimeRef(name={name!r}, kind={other!r}) in Python, "
            f"`--kind {other}` for `kf-trainer runtimes get`."
        )
    installed = [*here, *(f"{n} ({other})" for n in there)]
    listed = ", ".join(installed[:_NAMED_RUNTIMES])
    if len(installed) > _NAMED_RUNTIMES:
        listed += f" and {len(installed) - _NAMED_RUNTIMES} more"
    close = difflib.get_close_matches(name, [*here, *there], n=1, cutoff=0.75)
    if close:
        return RuntimeNotFoundError(
            f"{problem}. Fix: did you mean {close[0]!r}? (installed: {listed}; {_RUNTIMES_HINT})."
        )
    if not installed:
        return RuntimeNotFoundError(
            f"{problem}, and none is installed{where(kind)}. Fix: install Kubeflow "
            "Trainer's runtimes, or name a runtime the cluster has "
            f"({_RUNTIMES_HINT})."
        )
    return RuntimeNotFoundError(f"{problem}. Fix: use one of {listed} ({_RUNTIMES_HINT}).")


async def namespace_missing(api: Api, namespace: str) -> bool:
    """Whether the cluster says ``namespace`` does not exist. ``False`` where it exists
    or where that cannot be told: credentials that may not read namespaces (most
    tenants' on a shared cluster), or a backend without namespace objects."""
    try:
        await api(Get(NAMESPACES, None, namespace))
    except ApiError as err:
        return about_namespace(err, namespace)
    return False


def about_namespace(err: ApiError, namespace: str) -> bool:
    """Whether ``err`` is the API server's 404 for ``namespace`` itself (``namespaces
    "team-x" not found``: a GET of it, or a create in it)."""
    details = err.status.get("details") or {}
    return bool(
        err.not_found and details.get("kind") == "namespaces" and details.get("name") == namespace
    )


def missing_namespace_error(namespace: str, what: str) -> NamespaceNotFoundError:
    """The error for ``what`` (e.g. "No TrainJobs can be listed") in a namespace that
    does not exist."""
    return NamespaceNotFoundError(
        f"{what}: namespace {namespace!r} does not exist. Fix: name an existing "
        "namespace (`-n` for kf-trainer, namespace= of the backend configuration, or the "
        "kubeconfig context's).",
        namespace,
    )


async def list_runtimes(api: Api, namespace: str) -> list[RuntimeInfo]:
    """Cluster runtimes and the namespace's own runtimes."""
    out = []
    cluster = await list_all(api, CLUSTER_TRAINING_RUNTIMES, None, slim=RuntimeInfo.from_manifest)
    out += cluster["items"]
    try:
        local = await list_all(api, TRAINING_RUNTIMES, namespace, slim=RuntimeInfo.from_manifest)
        out += local["items"]
    except ApiError as err:
        if not (err.forbidden or err.not_found):
            raise
    return out


async def get_object(api: Api, namespace: str, name: str) -> dict[str, Any]:
    """The TrainJob object, or :class:`TrainJobNotFoundError`."""
    names.require_job_name(name)
    try:
        obj: dict[str, Any] = await api(Get(TRAINJOBS, namespace, name))
    except ApiError as err:
        if not err.not_found:
            raise
        raise await job_not_found(api, namespace, name) from None
    return obj


async def job_not_found(api: Api, namespace: str, name: str) -> Exception:
    """The error for a TrainJob the API server does not have: the namespace named when
    it is the namespace that is missing."""
    if await namespace_missing(api, namespace):
        return missing_namespace_error(namespace, f"TrainJob {namespace}/{name} not found")
    return TrainJobNotFoundError(f"TrainJob {namespace}/{name} not found.")


async def list_jobs(
    api: Api,
    namespace: str,
    label_selector: str | None = None,
    page_size: int | None = DEFAULT_PAGE_SIZE,
) -> list[TrainJob]:
    """Jobs of a namespace, with steps: one paginated list of the jobs (each page
    slimmed before the next: programs are not kept) and one of their pods."""
    listing = await list_all(
        api,
        TRAINJOBS,
        namespace,
        label_selector=label_selector,
        page_size=page_size,
        slim=slim_trainjob,
    )
    items = listing["items"]
    if not items:
        # A real API server lists an empty collection in a namespace that does not
        # exist: say so, instead of "no jobs" there.
        if await namespace_missing(api, namespace):
            raise missing_namespace_error(namespace, "No TrainJobs can be listed")
        return []
    pods = await list_all(
        api, PODS, namespace, label_selector=JOBSET_NAME_LABEL, page_size=page_size
    )
    by_job = pods_by_job(pods["items"])
    # Each job says whether it restarts or cannot start; a list reads no JobSets, so a
    # restart's attempt count has no total here (``get_job`` reads it).
    jobs = []
    for o in items:
        mine = by_job.get(str(o["metadata"]["name"]), [])
        jobs.append(with_waiting(to_trainjob(o, mine), o, mine))
    return jobs


async def get_events(
    api: Api,
    namespace: str,
    name: str,
    pods: list[dict[str, Any]] | None = None,
    obj: Mapping[str, Any] | None = None,
) -> list[Event]:
    """Events of the TrainJob, its JobSet, Jobs and pods (one paginated list of the
    namespace's events; each page keeps only the job's). Which Jobs and pods are the
    job's comes from its ``pods`` (read here when not given) and the replicated jobs its
    ``obj``'s status lists (:func:`~kf_trainer_core.cluster.status.job_events`)."""
    names.require_job_name(name)
    if pods is None:
        pods = await job_pods(api, namespace, name)
    steps = steps_of(obj) if obj is not None else []

    def ours(ev: dict[str, Any]) -> bool:
        return bool(job_events(name, [ev], pods, steps))

    listing = await list_all(api, EVENTS, namespace, where=ours)
    return job_events(name, listing["items"], pods, steps)


async def explained(
    api: Api,
    namespace: str,
    job: TrainJob,
    obj: dict[str, Any],
    pods: list[dict[str, Any]],
    refused: Failure | None = None,
) -> TrainJob:
    """``job`` with what holds it up (:attr:`TrainJob.waiting`, read by
    :func:`~kf_trainer_core.cluster.stuck.waiting_of` from ``obj`` and its pods, and
    ``refused``: the API server's refusal of its pods), the attempt count's total
    read from the JobSet of a restarting job (:func:`jobset_limits`)."""
    waiting = waiting_of(obj, pods, refused=refused)
    if waiting is not None and waiting.state == "Restarting":
        limits = await jobset_limits(api, namespace, obj)
        if limits:
            waiting = waiting_of(obj, pods, limits=limits, refused=refused)
    return job if waiting == job.waiting else job.model_copy(update={"waiting": waiting})


async def jobset_limits(api: Api, namespace: str, obj: dict[str, Any]) -> dict[str, int]:
    """The ``backoffLimit`` of each replicated job of TrainJob ``obj``'s JobSet
    (:func:`~kf_trainer_core.cluster.stuck.backoff_limits`); empty when the JobSet cannot
    be read (gone, an earlier job's of the same name, or ``get`` on ``jobsets`` not
    granted): the attempt count then has no total."""
    meta = obj.get("metadata") or {}
    try:
        jobset = await api(Get(JOBSETS, namespace, str(meta.get("name"))))
    except ApiError:
        return {}
    uid = meta.get("uid")
    if uid and not owned_by(jobset, uid):
        return {}
    return backoff_limits(jobset)


def owned_by(obj: object, uid: str) -> bool:
    """Whether ``obj`` names ``uid`` among its owner references."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    refs = (meta.get("ownerReferences") if isinstance(meta, dict) else None) or []
    return any(isinstance(r, dict) and r.get("uid") == uid for r in refs)
