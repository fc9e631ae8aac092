"""The JobSet and Job controllers, as far as both emulations run them: the labels a
JobSet stamps on its Jobs and their pods, the pod a Job creates for one completion index
(with the apiserver's defaults), the TrainJob's trainer and initializers laid over the
runtime's containers, and how the pods' and Jobs' states flow up into the JobSet's
``replicatedJobsStatus`` and the TrainJob's ``status.jobsStatus``.

Pure functions over plain objects. The test bed's controllers (``testing/controller``)
drive them from their simulated Jobs, the local backend's supervisor from the processes it
runs; the conformance tests hold the test bed's output to the real control plane's, and so
the local backend's too.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kf_trainer_core.k8s.objects import generate_suffix, owner_reference
from kf_trainer_core.k8s.patch import json_copy
from kf_trainer_core.k8s.trainjob import (
    COMPLETION_INDEX_LABEL,
    CONTROLLER_UID_LABEL,
    GLOBAL_REPLICAS_LABEL,
    GROUP_NAME_LABEL,
    GROUP_REPLICAS_LABEL,
    JOB_API,
    JOB_GLOBAL_INDEX_LABEL,
    JOB_GROUP_INDEX_LABEL,
    JOB_INDEX_LABEL,
    JOB_KEY_LABEL,
    JOB_NAME_LABEL,
    JOBSET_NAME_LABEL,
    JOBSET_PRIORITY_LABEL,
    JOBSET_UID_LABEL,
    REPLICATED_JOB_LABEL,
    REPLICATED_JOB_REPLICAS_LABEL,
    RESTART_ATTEMPT_LABEL,
)

JSON = dict[str, Any]

#: Where the torch policy's ``PET_NODE_RANK`` reads the completion index from...
COMPLETION_INDEX_PATH = f"metadata.annotations['{COMPLETION_INDEX_LABEL}']"
#: ... and the Job controller's ``JOB_COMPLETION_INDEX`` (seen on the real control plane).
_JOB_INDEX_PATH = f"metadata.labels['{COMPLETION_INDEX_LABEL}']"

#: The counts of one ``replicatedJobsStatus`` entry, in the order the JobSet writes them.
_COUNTS = ("ready", "succeeded", "failed", "active", "suspended")


def job_name(jobset: str, rjob: str, index: int) -> str:
    """The name of Job ``index`` of replicated job ``rjob`` of JobSet ``jobset``."""
    return f"{jobset}-{rjob}-{index}"


@dataclass(frozen=True)
class JobRef:
    """Which Job of which JobSet: what its labels and its pods' labels say."""

    namespace: str
    jobset: str
    jobset_uid: str
    #: The JobSet's replicated jobs in order: ``(name, replicas, groupName)``.
    rjobs: tuple[tuple[str, int, str], ...]
    rjob: str
    index: int  # the Job's index in its replicated job
    uid: str = ""  # the Job's own uid

    @property
    def name(self) -> str:
        return job_name(self.jobset, self.rjob, self.index)

    def jobset_labels(self) -> dict[str, str]:
        """The labels (and annotations) the JobSet controller puts on the Job and its
        pods: its indexes among all the JobSet's Jobs and among its group's."""
        key = hashlib.sha1(f"{self.namespace}/{self.name}".encode()).hexdigest()
        at = next(i for i, r in enumerate(self.rjobs) if r[0] == self.rjob)
        _, replicas, group = self.rjobs[at]
        in_group = [r for r in self.rjobs[:at] if r[2] == group]
        return {
            JOBSET_NAME_LABEL: self.jobset,
            REPLICATED_JOB_LABEL: self.rjob,
            REPLICATED_JOB_REPLICAS_LABEL: str(replicas),
            JOB_INDEX_LABEL: str(self.index),
            JOB_GLOBAL_INDEX_LABEL: str(sum(r[1] for r in self.rjobs[:at]) + self.index),
            RESTART_ATTEMPT_LABEL: "0",
            JOB_KEY_LABEL: key,
            JOBSET_UID_LABEL: self.jobset_uid,
            GLOBAL_REPLICAS_LABEL: str(sum(r[1] for r in self.rjobs)),
            GROUP_NAME_LABEL: group,
            GROUP_REPLICAS_LABEL: str(sum(r[1] for r in self.rjobs if r[2] == group)),
            JOB_GROUP_INDEX_LABEL: str(sum(r[1] for r in in_group) + self.index),
        }


def pod_for_index(job: JobRef, template: JSON, index: int, *, subdomain: str) -> JSON:
    """The pod the Job controller creates for completion ``index`` from the Job's pod
    ``template`` (not changed): the JobSet's and Job's labels, the owner reference, the
    apiserver's defaults, a generated name, and ``Pending`` with its QoS class. (The
    Trainer's ``trainjob-ancestor-step`` label stays on the Job: a real cluster's pods
    do not have it.)"""
    tmpl = json_copy(template)
    pmeta: JSON = tmpl.get("metadata") or {}
    pspec: JSON = tmpl.get("spec") or {}
    jobset_labels = job.jobset_labels()
    labels: dict[str, str] = {
        **(pmeta.get("labels") or {}),
        **jobset_labels,
        CONTROLLER_UID_LABEL: job.uid,
        "controller-uid": job.uid,
        JOB_NAME_LABEL: job.name,
        "job-name": job.name,
        COMPLETION_INDEX_LABEL: str(index),
        JOBSET_PRIORITY_LABEL: str(pspec.get("priority") or 0),
    }
    annotations: dict[str, str] = {
        **(pmeta.get("annotations") or {}),
        **jobset_labels,
        COMPLETION_INDEX_LABEL: str(index),
    }
    _pod_defaults(pspec)
    pspec["hostname"] = f"{job.name}-{index}"
    pspec["subdomain"] = subdomain
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{job.name}-{index}-{generate_suffix()}",
            "namespace": job.namespace,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [owner_reference(JOB_API, "Job", job.name, job.uid)],
        },
        "spec": pspec,
        "status": {"phase": "Pending", "qosClass": _qos_class(pspec)},
    }


def _pod_defaults(pspec: JSON) -> None:
    """The apiserver's defaults of a pod spec, and the Job controller's completion-index
    variable, set in place."""
    for c in pspec.get("containers") or []:
        upsert_env(
            c,
            [
                {
                    "name": "JOB_COMPLETION_INDEX",
                    "valueFrom": {"fieldRef": {"fieldPath": _JOB_INDEX_PATH}},
                }
            ],
        )
        c.setdefault("terminationMessagePath", "/dev/termination-log")
        c.setdefault("terminationMessagePolicy", "File")
        c.setdefault("imagePullPolicy", _pull_policy(str(c.get("image") or "")))
        c.setdefault("resources", {})
    pspec.setdefault("restartPolicy", "Never")
    pspec.setdefault("serviceAccountName", "default")
    pspec.setdefault("schedulerName", "default-scheduler")
    pspec.setdefault("terminationGracePeriodSeconds", 30)
    pspec.setdefault("dnsPolicy", "ClusterFirst")


def _pull_policy(image: str) -> str:
    """The default ``imagePullPolicy``: ``Always`` for ``:latest`` or no tag."""
    last = image.rsplit("/", 1)[-1]
    if "@" in last:
        return "IfNotPresent"
    if ":" not in last or last.endswith(":latest"):
        return "Always"
    return "IfNotPresent"


def _qos_class(pspec: JSON) -> str:
    """``status.qosClass`` from the containers' requests and limits."""
    containers = pspec.get("containers") or []
    any_set, guaranteed = False, bool(containers)
    for c in containers:
        res = c.get("resources") or {}
        limits, requests = res.get("limits") or {}, res.get("requests") or {}
        if limits or requests:
            any_set = True
        if (
            not limits
            or any(requests.get(k, limits.get(k)) != limits.get(k) for k in ("cpu", "memory"))
            or "cpu" not in limits
            or "memory" not in limits
        ):
            guaranteed = False
    if guaranteed:
        return "Guaranteed"
    return "Burstable" if any_set else "BestEffort"


def upsert_named(items: list[JSON], key: str, new: Iterable[JSON]) -> None:
    """Put each of ``new`` into ``items``, replacing the entry with the same ``key``."""
    for item in new:
        for i, old in enumerate(items):
            if old.get(key) == item.get(key):
                items[i] = json_copy(item)
                break
        else:
            items.append(json_copy(item))


def upsert_env(container: JSON, env: Iterable[JSON]) -> None:
    """Set environment variables of ``container``, replacing those of the same name."""
    upsert_named(container.setdefault("env", []), "name", [e for e in env if isinstance(e, dict)])


def apply_trainer(container: JSON, trainer: JSON) -> None:
    """The TrainJob's ``spec.trainer`` over a trainer container of the runtime, as the
    Trainer overrides it: image, command, args, resources and env."""
    if trainer.get("image"):
        container["image"] = trainer["image"]
    if trainer.get("command") is not None:
        container["command"] = list(trainer["command"])
    if trainer.get("args") is not None:
        container["args"] = list(trainer["args"])
    resources = trainer.get("resourcesPerNode")
    if isinstance(resources, dict) and (resources.get("limits") or resources.get("requests")):
        container["resources"] = {
            k: json_copy(v)
            for k, v in resources.items()
            if k in ("limits", "requests", "claims") and v
        }
    if trainer.get("env"):
        upsert_env(container, trainer["env"])


def apply_initializer(container: JSON, cfg: JSON) -> None:
    """A ``spec.initializer`` entry (``dataset`` or ``model``) over its initializer's
    container: ``STORAGE_URI``, the entry's env, its Secret as ``envFrom``."""
    if cfg.get("storageUri"):
        upsert_env(container, [{"name": "STORAGE_URI", "value": str(cfg["storageUri"])}])
    upsert_env(container, list(cfg.get("env") or []))
    secret = (cfg.get("secretRef") or {}).get("name")
    if secret:
        container.setdefault("envFrom", []).append({"secretRef": {"name": secret}})


# ---------------------------------------------------------------------- status


@dataclass(frozen=True)
class JobCounts:
    """What the JobSet controller reads of one of its Jobs."""

    finished: str = ""  # "", "Complete" or "Failed": the Job's terminal condition
    active: int = 0  # pods pending or running
    ready: int = 0  # ... of them, ready
    succeeded: int = 0  # completion indexes done
    pods: int = 1  # pods it runs at once: min(parallelism, completions)
    suspended: bool = False


def replicated_job_status(name: str, jobs: Iterable[JobCounts]) -> JSON:
    """One entry of the JobSet's ``replicatedJobsStatus``: how many of the replicated
    job's Jobs are ready, succeeded, failed, active and suspended."""
    counts: JSON = {"name": name, **dict.fromkeys(_COUNTS, 0)}
    for job in jobs:
        if job.finished == "Complete":
            counts["succeeded"] += 1
        elif job.finished == "Failed":
            counts["failed"] += 1
        else:
            if job.succeeded + job.ready >= job.pods:
                counts["ready"] += 1
            if job.active > 0:
                counts["active"] += 1
            if job.suspended:
                counts["suspended"] += 1
    return counts


def trainjob_jobs_status(replicated: Iterable[JSON]) -> list[JSON]:
    """The TrainJob's ``status.jobsStatus``, as the Trainer copies it from the JobSet's
    ``replicatedJobsStatus``."""
    keys = ("name", "active", "ready", "succeeded", "failed", "suspended")
    return [{key: entry[key] for key in keys} for entry in replicated]
