"""Where a MultiKueue job runs, read and told as data.

On a MultiKueue manager a TrainJob created with ``spec.managedBy:
kueue.x-k8s.io/multikueue`` is never run by the manager's Trainer: Kueue's MultiKueue
admission check copies it to a worker cluster, whose Trainer, JobSet and kubelets run
it, and copies its status back (conditions, ``jobsStatus``). The manager's Workload —
owned by the TrainJob — names the worker in ``status.clusterName`` (the name of a
``MultiKueueCluster`` object on the manager); its pods, their logs and events exist only
there, and MultiKueue deletes the worker's copy once the manager's Workload finishes.

This module is pure: what a job's placement is (:class:`WorkerCluster`), where a
MultiKueueCluster keeps its kubeconfig, and the words for a worker the suite cannot
reach, each with its fix. Reaching the worker is the backend's
(:mod:`kf_trainer_core.backends.kubernetes.workers`).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict

from kf_trainer_core.base.errors import FailureClass
from kf_trainer_core.base.quoting import shown
from kf_trainer_core.cluster.results import ResultMissing
from kf_trainer_core.k8s.resources import Resource
from kf_trainer_core.spec.common import MANAGED_BY_MULTIKUEUE

__all__ = [
    "KUBECONFIG_KEY",
    "MULTIKUEUE_CLUSTERS",
    "WorkerCluster",
    "dispatched",
    "kubeconfig_of",
    "secret_location",
    "worker_name",
    "worker_result_missing",
]

#: The manager's description of each worker cluster (cluster-scoped).
MULTIKUEUE_CLUSTERS = Resource(
    "kueue.x-k8s.io", "v1beta2", "multikueueclusters", "MultiKueueCluster", False
)
#: The key of a MultiKueueCluster's kubeconfig Secret that holds the document (Kueue's).
KUBECONFIG_KEY = "kubeconfig"


class WorkerCluster(BaseModel):
    """Where a MultiKueue job runs: the worker cluster its Workload names, and whether
    the suite reached it (its steps, logs, events and result come from there)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    #: The MultiKueueCluster the job was dispatched to; ``None`` while MultiKueue has
    #: not dispatched it (queued on the manager).
    name: str | None = None
    #: The worker was reached: what is shown of the job's pods comes from it.
    reachable: bool = False
    #: Why the worker could not be reached, with the fix (``None`` when it was, or
    #: when the job is not dispatched yet).
    problem: str | None = None

    def line(self) -> str:
        """What a person reads: ``worker1``; ``not dispatched yet (MultiKueue)``;
        ``worker1 (not reachable: …; shown: the status MultiKueue copied back)``."""
        if self.name is None:
            return "not dispatched to a worker yet (MultiKueue)"
        if self.reachable or self.problem is None:
            return f"{self.name} (MultiKueue worker)"
        return (
            f"{self.name} (MultiKueue worker, not reachable: {self.problem} Shown: the "
            "status MultiKueue copied back to the manager)"
        )


def dispatched(obj: Mapping[str, Any]) -> bool:
    """Whether the TrainJob is MultiKueue's to dispatch (``spec.managedBy``)."""
    return (obj.get("spec") or {}).get("managedBy") == MANAGED_BY_MULTIKUEUE


def worker_name(workload: Mapping[str, Any] | None) -> str | None:
    """The worker cluster a Workload was admitted on (``status.clusterName``)."""
    name = ((workload or {}).get("status") or {}).get("clusterName")
    return name if isinstance(name, str) and name else None


def secret_location(cluster: Mapping[str, Any]) -> tuple[str, str] | None:
    """Where a MultiKueueCluster's kubeconfig is: ``(locationType, location)``
    (``Secret``: a Secret's name in Kueue's namespace; ``Path``: a file of Kueue's
    pod), or ``None`` when it says nothing usable."""
    source = (cluster.get("spec") or {}).get("clusterSource") or {}
    kube = source.get("kubeConfig") or (cluster.get("spec") or {}).get("kubeConfig") or {}
    location = kube.get("location")
    if not isinstance(location, str) or not location:
        return None
    kind = kube.get("locationType") or "Secret"
    return str(kind), location


def kubeconfig_of(secret: Mapping[str, Any]) -> str | None:
    """The kubeconfig document a MultiKueueCluster's Secret holds (``data.kubeconfig``,
    base64), or ``None``. The text is a secret: callers keep it in a ``SecretStr``."""
    data = secret.get("data") or {}
    raw = data.get(KUBECONFIG_KEY)
    if not isinstance(raw, str):
        return None
    try:
        return base64.b64decode(raw, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return None


def mapping_fix(cluster: str) -> str:
    """The fix that names the mapping to add to the backend configuration."""
    return (
        f"map it in the backend configuration: multikueue_workers={{{cluster!r}: "
        "{'context': '<its kubeconfig context>'}} (or {'kubeconfig': '<file>'})"
    )


def rbac_fix(kueue_namespace: str, cluster: str, location: str | None) -> str:
    """The fix that grants reading the worker's kubeconfig Secret on the manager."""
    secret = shown(location) if location else "its kubeconfig Secret"
    return (
        f"let these credentials get multikueueclusters.kueue.x-k8s.io {shown(cluster)} and "
        f"secret {secret} in namespace {shown(kueue_namespace)} on the manager, or "
        + mapping_fix(cluster)
    )


def worker_result_missing(
    missing: ResultMissing | None, job: str, where: WorkerCluster
) -> ResultMissing | None:
    """``missing`` said of a MultiKueue job: a result read after MultiKueue removed
    the worker's copy (pods gone), or from a worker that cannot be reached, says so and
    how to keep it, instead of blaming a node or pod garbage collection."""
    if missing is None or missing.cause != "pod-gone" or where.name is None:
        return missing
    if where.problem is not None:
        why = f"its worker cluster {where.name!r} cannot be reached: {where.problem}"
        klass = FailureClass.INFRASTRUCTURE
    else:
        why = (
            f"MultiKueue removed the job's copy on worker cluster {where.name!r} (its pods "
            "with their termination messages) once the job finished on the manager. Fix: "
            "wait for the job (client.wait/run, `kf-trainer jobs wait`, the orchestrators' "
            "tasks): a wait follows it on the worker and reads the result there before "
            "the copy goes"
        )
        klass = FailureClass.CONFIGURATION
    return ResultMissing(
        cause="pod-gone",
        message=f"TrainJob {job} succeeded, but its result cannot be read: {why}.",
        failure_class=klass,
    )
