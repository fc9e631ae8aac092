"""Names, labels, condition types, reasons and messages the simulated controllers use.

Sources: kubeflow/trainer (``pkg/apis/trainer/v1alpha1``, ``pkg/constants``),
kubernetes-sigs/jobset (``pkg/constants``, v0.12) and the Kubernetes Job controller.
"""

from __future__ import annotations

from typing import Any

from kf_trainer_core.testing.store import Resource

JSON = dict[str, Any]

#: ``batch/v1`` Jobs: the store holds them (so owner-reference cascades reach the pods)
#: although the test server need not serve them.
JOBS = Resource("batch", "v1", "jobs", "Job")

# --- API groups and well-known names -------------------------------------------------
TRAINER_GROUP = "trainer.kubeflow.org"
TRAINER_API = "trainer.kubeflow.org/v1alpha1"
JOBSET_API = "jobset.x-k8s.io/v1alpha2"
MULTIKUEUE = "kueue.x-k8s.io/multikueue"
ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"
INITIALIZERS = ("dataset-initializer", "model-initializer")
#: Trainer's ContainerTrainerPort (pkg/constants/constants.go): PET_MASTER_PORT.
TORCH_MASTER_PORT = 29500
#: The suite's generated launcher uses plain python (no torchrun/mpirun here).
LAUNCHER_ENV = "KF_TRAINER_LAUNCHER"

# --- Conditions, reasons and messages ------------------------------------------------
# kubeflow/trainer pkg/apis/trainer/v1alpha1/trainjob_types.go and pkg/constants.
TJ_SUSPENDED, TJ_COMPLETE, TJ_FAILED = "Suspended", "Complete", "Failed"
R_SUSPENDED, M_SUSPENDED = "Suspended", "TrainJob is suspended"
R_RESUMED, M_RESUMED = "Resumed", "TrainJob is resumed"
R_DEADLINE, M_DEADLINE = "DeadlineExceeded", "TrainJob exceeded its active deadline"
R_NOT_SUPPORTED = "TrainingRuntimeNotSupported"
# pkg/controller/trainjob_controller.go: the Warning event on a failed reconcile.
E_CREATION_FAILED = "TrainJobResourcesCreationFailed"
CREATION_FAILED_PREFIX = "TrainJob resources reconciliation failed: "
TRAINER_COMPONENT = "trainer-trainjob-controller"
# kubernetes-sigs/jobset pkg/constants/constants.go (v0.12).
JS_COMPLETED = ("AllJobsCompleted", "jobset completed successfully")
JS_FAILED = ("FailedJobs", "jobset failed due to one or more job failures")
JS_SUSPENDED = ("SuspendedJobs", "jobset is suspended")
JS_RESUMED = ("ResumeJobs", "jobset is resumed")
JOBSET_COMPONENT = "jobset"
# kubernetes pkg/controller/job.
JOB_COMPONENT = "job-controller"
JOB_BACKOFF = ("BackoffLimitExceeded", "Job has reached the specified backoff limit")
JOB_COMPLETE = ("CompletionsReached", "Reached expected number of succeeded pods")

# --- Labels and annotations ------------------------------------------------------------
L_JOBSET = "jobset.sigs.k8s.io/jobset-name"
L_RJOB = "jobset.sigs.k8s.io/replicatedjob-name"
L_RJOB_REPLICAS = "jobset.sigs.k8s.io/replicatedjob-replicas"
L_JOB_INDEX = "jobset.sigs.k8s.io/job-index"
L_JOB_GLOBAL_INDEX = "jobset.sigs.k8s.io/job-global-index"
L_RESTART = "jobset.sigs.k8s.io/restart-attempt"
L_JOB_KEY = "jobset.sigs.k8s.io/job-key"
L_JOBSET_UID = "jobset.sigs.k8s.io/jobset-uid"
L_COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
L_JOB_NAME = "batch.kubernetes.io/job-name"
L_CONTROLLER_UID = "batch.kubernetes.io/controller-uid"
COMPLETION_INDEX_PATH = f"metadata.annotations['{L_COMPLETION_INDEX}']"

NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # the apiserver's generateName alphabet
SIM_NODES = 4  # pods are spread over kf-sim-node-0..3
LOG_TAIL = 80  # lines kept per pod for terminationMessagePolicy FallbackToLogsOnError
