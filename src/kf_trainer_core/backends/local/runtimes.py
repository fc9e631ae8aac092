"""The ClusterTrainingRuntimes the local backend serves: Kubeflow Trainer's default
runtimes, as manifests shaped like the upstream ones (ML policy, replicated jobs,
the ``trainjob-ancestor-step`` label on the trainer step), built from
:data:`kf_trainer_core.manifest.runtimes.DEFAULT_RUNTIMES` so that
:meth:`RuntimeInfo.from_manifest` gives back what the builder assumes.

Runtimes created in the local store (for instance one with both initializer steps, see
:func:`kf_trainer_core.backends.local.install_runtime`) are served next to them and take
precedence over a default of the same name.
"""

from __future__ import annotations

import functools
import uuid
from typing import Any

from kf_trainer_core.backends.local._common import (
    ANCESTOR_LABEL,
    DATASET_INITIALIZER,
    FRAMEWORK_LABEL,
    INITIALIZERS,
    LAUNCHER,
    MODEL_INITIALIZER,
    NODE,
    TRAINER_API,
)
from kf_trainer_core.k8s.patch import json_copy
from kf_trainer_core.manifest.runtimes import DEFAULT_RUNTIMES, RuntimeInfo

JSON = dict[str, Any]
#: A fixed creation time: the defaults exist "since the cluster was installed".
_CREATED = "2026-01-01T00:00:00Z"


def _ml_policy(rt: RuntimeInfo) -> JSON:
    policy: JSON = {"numNodes": rt.num_nodes}
    if rt.policy == "torch":
        policy["torch"] = {"numProcPerNode": rt.num_proc_per_node} if rt.num_proc_per_node else {}
    elif rt.policy == "mpi":
        policy["mpi"] = {
            "numProcPerNode": rt.num_proc_per_node or 1,
            "mpiImplementation": "OpenMPI",
            "sshAuthMountPath": "/home/mpiuser/.ssh",
            "runLauncherAsNode": rt.mpi_run_launcher_as_node,
        }
    elif rt.policy != "plainml":
        policy[rt.policy] = {}
    return policy


def runtime_manifest(rt: RuntimeInfo) -> JSON:
    """A ClusterTrainingRuntime object for ``rt``."""
    trainer_step = LAUNCHER if LAUNCHER in rt.replicated_jobs else NODE
    rjobs: list[JSON] = []
    for name in rt.replicated_jobs:
        labels: dict[str, str] = {}
        if name in INITIALIZERS:
            labels[ANCESTOR_LABEL] = name
        elif name == trainer_step:
            labels[ANCESTOR_LABEL] = "trainer"
        container = name if name in INITIALIZERS else NODE
        rjob: JSON = {
            "name": name,
            "template": {
                "metadata": {"labels": labels} if labels else {},
                "spec": {"template": {"spec": {"containers": [{"name": container}]}}},
            },
        }
        deps = [
            {"name": dep, "status": "Complete"}
            for dep in (DATASET_INITIALIZER, MODEL_INITIALIZER)
            if name == NODE and dep in rt.replicated_jobs
        ]
        if name == LAUNCHER and NODE in rt.replicated_jobs:
            deps.append({"name": NODE, "status": "Ready"})
        if deps:
            rjob["dependsOn"] = deps
        rjobs.append(rjob)
    return {
        "apiVersion": TRAINER_API,
        "kind": "ClusterTrainingRuntime",
        "metadata": {
            "name": rt.name,
            "uid": str(uuid.uuid5(uuid.NAMESPACE_URL, f"kf-trainer-local/{rt.name}")),
            "resourceVersion": "1",
            "generation": 1,
            "creationTimestamp": _CREATED,
            "labels": {FRAMEWORK_LABEL: rt.framework},
        },
        "spec": {
            "mlPolicy": _ml_policy(rt),
            "template": {"spec": {"replicatedJobs": rjobs}},
        },
    }


@functools.lru_cache(maxsize=1)
def _defaults() -> dict[str, JSON]:
    return {name: runtime_manifest(rt) for name, rt in DEFAULT_RUNTIMES.items()}


def default_runtimes() -> dict[str, JSON]:
    """Fresh copies of the default runtimes' manifests, by name."""
    copies: dict[str, JSON] = json_copy(_defaults())
    return copies
