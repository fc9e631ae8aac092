"""The API resources the suite reads and writes."""

from __future__ import annotations

from dataclasses import dataclass

# The pods' labels, importable from here too (they are Trainer facts: k8s/trainjob).
from kf_trainer_core.k8s.trainjob import COMPLETION_INDEX_LABEL as COMPLETION_INDEX_LABEL
from kf_trainer_core.k8s.trainjob import JOB_INDEX_LABEL as JOB_INDEX_LABEL
from kf_trainer_core.k8s.trainjob import JOBSET_NAME_LABEL as JOBSET_NAME_LABEL
from kf_trainer_core.k8s.trainjob import REPLICATED_JOB_LABEL as REPLICATED_JOB_LABEL
from kf_trainer_core.k8s.trainjob import RESTART_ATTEMPT_LABEL as RESTART_ATTEMPT_LABEL


@dataclass(frozen=True)
class Resource:
    """One API resource type: where it lives and what it is called."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def is_custom(self) -> bool:
        """Served through CustomObjectsApi (everything outside the core group)."""
        return bool(self.group)

    @property
    def qualified(self) -> str:
        """``plural.group`` as the apiserver names it in messages (``pods`` for core)."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def __str__(self) -> str:
        return self.qualified


TRAINJOBS = Resource("trainer.kubeflow.org", "v1alpha1", "trainjobs", "TrainJob")
TRAINING_RUNTIMES = Resource(
    "trainer.kubeflow.org", "v1alpha1", "trainingruntimes", "TrainingRuntime"
)
CLUSTER_TRAINING_RUNTIMES = Resource(
    "trainer.kubeflow.org", "v1alpha1", "clustertrainingruntimes", "ClusterTrainingRuntime", False
)
JOBSETS = Resource("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet")
PODS = Resource("", "v1", "pods", "Pod")
EVENTS = Resource("", "v1", "events", "Event")
SECRETS = Resource("", "v1", "secrets", "Secret")
CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap")
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
SERVICEACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount")
