"""Kubeflow Trainer's facts, once: the API groups, the labels the Trainer, JobSet and
Job controllers put on a TrainJob's pods, the steps' names, and the condition types,
reasons, messages and event sources of those controllers (``trainjob_types.go``, the
JobSet constants, the Job controller).

The builder and the status readers, the local backend (which plays those controllers
on this machine) and the test server's controller all take them from here, so a change
in upstream Trainer semantics is one edit.

Standard library only: the local supervisor imports it, and its start-up time is part
of every local job's latency.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

TRAINER_GROUP = "trainer.kubeflow.org"
TRAINER_API = f"{TRAINER_GROUP}/v1alpha1"
JOBSET_API = "jobset.x-k8s.io/v1alpha2"
JOB_API = "batch/v1"

# ---------------------------------------------------------------------- labels
# On every pod of a TrainJob (the JobSet and Job controllers).
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
REPLICATED_JOB_REPLICAS_LABEL = "jobset.sigs.k8s.io/replicatedjob-replicas"
JOB_INDEX_LABEL = "jobset.sigs.k8s.io/job-index"
JOB_GLOBAL_INDEX_LABEL = "jobset.sigs.k8s.io/job-global-index"
#: How many times the JobSet was restarted when the pod was made (failure policy).
RESTART_ATTEMPT_LABEL = "jobset.sigs.k8s.io/restart-attempt"
JOB_KEY_LABEL = "jobset.sigs.k8s.io/job-key"
JOBSET_UID_LABEL = "jobset.sigs.k8s.io/jobset-uid"
#: The replicated jobs' groups (``groupName``, "default" unless set): all the JobSet's
#: Jobs, those of the pod's group, and the Job's index in its group.
GLOBAL_REPLICAS_LABEL = "jobset.sigs.k8s.io/global-replicas"
GROUP_NAME_LABEL = "jobset.sigs.k8s.io/group-name"
GROUP_REPLICAS_LABEL = "jobset.sigs.k8s.io/group-replicas"
JOB_GROUP_INDEX_LABEL = "jobset.sigs.k8s.io/job-group-index"
#: The pod's priority (a label of the pod's only, not of its Job's).
JOBSET_PRIORITY_LABEL = "jobset.sigs.k8s.io/priority"
COMPLETION_INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
CONTROLLER_UID_LABEL = "batch.kubernetes.io/controller-uid"
#: The pod failures a Job retries when its template sets no ``backoffLimit`` (the
#: upstream runtimes set none): seven attempts in all, minutes apart as the back-off grows.
JOB_DEFAULT_BACKOFF_LIMIT = 6
# The Trainer's.
ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
FRAMEWORK_LABEL = "trainer.kubeflow.org/framework"

# ---------------------------------------------------------------------- steps
DATASET_INITIALIZER = "dataset-initializer"
MODEL_INITIALIZER = "model-initializer"
NODE = "node"
LAUNCHER = "launcher"
INITIALIZERS = (DATASET_INITIALIZER, MODEL_INITIALIZER)
#: The replicated jobs the Trainer's runtimes name (their Jobs: ``<job>-<step>-<index>``).
STEPS = (*INITIALIZERS, NODE, LAUNCHER)

# ---------------------------------------------------------------------- conditions
# A TrainJob has only these three condition types; "running" is read from
# status.jobsStatus and the pods.
SUSPENDED = "Suspended"
COMPLETE = "Complete"
FAILED = "Failed"

#: (reason, message) of the TrainJob's conditions, as the Trainer writes them.
TRAINJOB_SUSPENDED = ("Suspended", "TrainJob is suspended")
TRAINJOB_RESUMED = ("Resumed", "TrainJob is resumed")
TRAINJOB_DEADLINE = ("DeadlineExceeded", "TrainJob exceeded its active deadline")
#: The JobSet's (the TrainJob copies them into its Complete/Failed conditions).
JS_COMPLETED = ("AllJobsCompleted", "jobset completed successfully")
JS_FAILED = ("FailedJobs", "jobset failed due to one or more job failures")
JS_SUSPENDED = ("SuspendedJobs", "jobset is suspended")
JS_RESUMED = ("ResumeJobs", "jobset is resumed")
#: The Job controller's.
JOB_BACKOFF = ("BackoffLimitExceeded", "Job has reached the specified backoff limit")
JOB_COMPLETE = ("CompletionsReached", "Reached expected number of succeeded pods")
JOB_SUSPENDED = ("JobSuspended", "Job suspended")
JOB_RESUMED = ("JobResumed", "Job resumed")

#: The Warning event the Trainer emits when it cannot build a TrainJob's JobSet (the
#: only trace such a job leaves: it gets no condition).
CREATION_FAILED_REASON = "TrainJobResourcesCreationFailed"
CREATION_FAILED_PREFIX = "TrainJob resources reconciliation failed: "


def runtime_not_found(kind: str, name: str) -> str:
    """How the Trainer says a TrainJob's runtime is missing (its JobSet cannot be
    built), for ``kind`` ``TrainingRuntime`` or ``ClusterTrainingRuntime``. It reads
    runtimes through its cache, whose NotFound names the kind
    (``ClusterTrainingRuntime.trainer.kubeflow.org "x" not found``), not the resource as
    the API server's own NotFound does."""
    cached = f'{kind}.{TRAINER_GROUP} "{name}" not found'
    if kind == "TrainingRuntime":
        return f"TrainingRuntime specified in TrainJob is not found: {cached}"
    return f"not found ClusterTrainingRuntime specified in TrainJob: {cached}"


RUNTIME_NOT_SUPPORTED_REASON = "TrainingRuntimeNotSupported"
#: The Normal event of the Job controller when a Job completes.
JOB_COMPLETED_EVENT = ("Completed", "Job completed")

# ---------------------------------------------------------------------- event sources
TRAINER_COMPONENT = "trainer-trainjob-controller"
JOBSET_COMPONENT = "jobset"
JOB_COMPONENT = "job-controller"
KUBELET = "kubelet"
SCHEDULER = "default-scheduler"


def jobset_failed_message(first_failed_job: str) -> str:
    """The JobSet's Failed message, naming the first Job that failed."""
    return f"{JS_FAILED[1]} (first failed job: {first_failed_job})"


def condition(obj: Mapping[str, Any], kind: str) -> dict[str, Any] | None:
    """The condition of ``kind`` in an object's ``status.conditions``, if present."""
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            return dict(cond)
    return None


def condition_true(obj: Mapping[str, Any], kind: str) -> bool:
    """Whether the object's ``kind`` condition is ``True`` (a ``Suspended=False`` left
    after a resume does not count)."""
    cond = condition(obj, kind)
    return bool(cond and cond.get("status") == "True")


def is_finished(obj: Mapping[str, Any]) -> bool:
    """Whether a TrainJob is Complete or Failed (nothing changes it any more)."""
    return condition_true(obj, COMPLETE) or condition_true(obj, FAILED)


def trainer_container(runtime: Mapping[str, Any]) -> dict[str, Any]:
    """The trainer step's ``node`` container in a (Cluster)TrainingRuntime manifest —
    the replicated job whose pod template carries the ancestor label — with the
    command, args, image and resources a TrainJob inherits; ``{}`` if it has none."""
    template = ((runtime.get("spec") or {}).get("template") or {}).get("spec") or {}
    for rjob in template.get("replicatedJobs") or []:
        tmpl = rjob.get("template") or {}
        if ANCESTOR_LABEL not in ((tmpl.get("metadata") or {}).get("labels") or {}):
            continue
        pod = ((tmpl.get("spec") or {}).get("template") or {}).get("spec") or {}
        for container in pod.get("containers") or []:
            if container.get("name") == NODE:
                return dict(container)
    return {}
