"""Admission of a TrainJob by the local backend: what the apiserver's schema and the
Trainer's webhook refuse (a bad name, unknown spec fields), what cannot run on this
machine (a ``BuiltinTrainer``, a container without a command, resources it lacks), and
the run plan its supervisor reads.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from typing import Any

from kf_trainer_core.backends.local import gpus, launch, machine
from kf_trainer_core.backends.local.store import (
    CLUSTER_TRAINING_RUNTIMES,
    TRAINING_RUNTIMES,
    TRAINJOBS,
    Kind,
    StatusError,
)
from kf_trainer_core.k8s.trainjob import runtime_not_found, trainer_container

JSON = dict[str, Any]

_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")
_SPEC_FIELDS = frozenset(
    {
        "runtimeRef",
        "initializer",
        "trainer",
        "labels",
        "annotations",
        "podSpecOverrides",
        "podTemplateOverrides",
        "runtimePatches",
        "suspend",
        "managedBy",
        "activeDeadlineSeconds",
    }
)


def validate_trainjob(obj: JSON) -> JSON:
    """The TrainJob's spec, once its name and spec pass what the apiserver checks (a 422
    or a strict-decoding 400 otherwise)."""
    name = str(obj["metadata"]["name"])
    if len(name) > 63 or not _NAME.match(name):
        raise StatusError.invalid(
            TRAINJOBS,
            name,
            [
                (
                    "metadata.name",
                    "FieldValueInvalid",
                    f'Invalid value: "{name}": a lowercase RFC 1123 label must consist of '
                    "lower case alphanumeric characters or '-', and must start and end "
                    "with an alphanumeric character (at most 63 characters)",
                )
            ],
        )
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        raise StatusError.invalid(
            TRAINJOBS, name, [("spec", "FieldValueRequired", "Required value")]
        )
    unknown = sorted(set(spec) - _SPEC_FIELDS)
    if unknown:
        raise StatusError.bad_request(
            "strict decoding error: "
            + ", ".join(f'unknown field "spec.{field}"' for field in unknown)
        )
    return spec


def plan_trainjob(
    obj: JSON,
    *,
    runtime: Callable[[Kind, str | None, str], JSON | None],
    python: str | None,
    use_venv: bool,
    container: JSON | None,
    on_missing_resources: str,
    held_gpus: int = 0,
) -> tuple[JSON, list[tuple[str, str, str]], list[tuple[str, str]]]:
    """Admission: what the supervisor needs to know (the job's run plan), the 422
    causes, and warnings ``(reason, message)`` for Warning events. ``runtime`` looks up
    a (Cluster)TrainingRuntime; ``container`` holds the container backend's settings
    (None: processes); ``held_gpus``: this machine's GPUs that running jobs hold."""
    from kf_trainer_core.manifest.runtimes import RuntimeInfo

    spec = obj.get("spec") or {}
    meta = obj["metadata"]
    ref = spec.get("runtimeRef") or {}
    rt_kind_name = str(ref.get("kind") or "ClusterTrainingRuntime")
    rt_kind = TRAINING_RUNTIMES if rt_kind_name == "TrainingRuntime" else CLUSTER_TRAINING_RUNTIMES
    rt_name = str(ref.get("name") or "")
    trainer = spec.get("trainer") or {}
    plan: JSON = {
        "python": python or sys.executable,
        "use_venv": use_venv,
        "cwd": os.getcwd(),
        "warnings": [],
        "runtime_error": None,
    }
    causes: list[tuple[str, str, str]] = []
    warnings: list[tuple[str, str]] = []
    manifest = None
    if rt_kind_name in ("ClusterTrainingRuntime", "TrainingRuntime"):
        manifest = runtime(rt_kind, meta.get("namespace"), rt_name)
    if manifest is None:
        plan["runtime_error"] = runtime_not_found(rt_kind.kind, rt_name)
        return plan, causes, warnings
    info = RuntimeInfo.from_manifest(manifest)
    node = trainer_container(manifest)
    plan["runtime"] = {
        "name": info.name,
        "kind": info.kind,
        "policy": info.policy,
        "framework": info.framework,
        "replicated_jobs": list(info.replicated_jobs),
        "num_nodes": info.num_nodes,
        "num_proc_per_node": info.num_proc_per_node,
        "command": list(node.get("command") or []),
        "args": list(node.get("args") or []),
        "image": node.get("image"),
    }
    command = list(trainer.get("command") or node.get("command") or [])
    if info.framework == "torchtune" or command[:2] == ["tune", "run"]:
        causes.append(
            (
                "spec.trainer",
                "FieldValueForbidden",
                "Forbidden: a BuiltinTrainer (TorchTune recipes on runtime "
                f"{info.name!r}) needs a Kubeflow Trainer cluster: the local backend runs "
                "CustomTrainer and CustomTrainerContainer jobs only. Fix: run it with "
                "KubernetesConfig, or train with a CustomTrainer on 'torch-distributed'.",
            )
        )
        return plan, causes, warnings
    if container is not None:
        from kf_trainer_core.backends.local.container.admission import admit

        admit(
            container, plan, runtime_name=str(info.name), node=node, trainer=trainer, causes=causes
        )
    else:
        image = trainer.get("image")
        if not command:
            causes.append(
                (
                    "spec.trainer.command",
                    "FieldValueRequired",
                    "Required value: the local backend cannot run an image's entrypoint. Fix: "
                    "give the command with the TrainerCommand option (TrainerArgs for its "
                    "arguments).",
                )
            )
        if command and launch.parse_trainer(command, []).kind != "function":
            what = f"image {image!r}" if image else "the runtime's image"
            warnings.append(
                (
                    "ImageNotUsed",
                    f"the local backend runs the command {command[0]!r} on this machine: "
                    f"{what} is not used",
                )
            )
        elif image:
            warnings.append(
                (
                    "ImageNotUsed",
                    f"image {image!r} is not used: the function runs in "
                    f"{plan['python']} on this machine",
                )
            )
    nodes = int(trainer.get("numNodes") or info.num_nodes or 1)
    resources = trainer.get("resourcesPerNode") or node.get("resources")
    # What this job holds of the machine's GPUs from its admission on, before its nodes'
    # pods are stored (gpus.held_count), and what a re-check in the create's write
    # transaction admits again (LocalApi.create_trainjob).
    plan["admitted"] = {
        "resources": resources,
        "nodes": nodes,
        "gpus": nodes * (gpus.requested(resources) or 0),
    }
    more_causes, more_warnings = machine.admit_resources(
        resources,
        nodes,
        on_missing_resources,
        "LocalConfig" if container is None else "ContainerConfig",
        held_gpus,
    )
    causes += more_causes
    warnings += more_warnings
    plan["warnings"] = [message for _, message in warnings]
    return plan, causes, warnings
