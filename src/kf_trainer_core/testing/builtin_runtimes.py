"""The default runtimes of Kubeflow Trainer v2.3 as the suite itself defines them, for
a test server with no folder of upstream runtime files.

Built from :data:`kf_trainer_core.manifest.runtimes.DEFAULT_RUNTIMES` (names, frameworks, ML
policies, steps — what the builder and the local backend assume) through the local
backend's manifest shape, plus what a pod needs here: each step's image (with the
release's tags), the MPI nodes' ``sshd`` command, the TorchTune trainer's ``tune run``
command, the initializers' ``STORAGE_URI`` and the ``/workspace`` volume they share.
The upstream files, when named with ``$KF_TRAINER_UPSTREAM``, replace these.
"""

from __future__ import annotations

from typing import Any

from kf_trainer_core.fields import names
from kf_trainer_core.k8s.patch import json_copy

JSON = dict[str, Any]

_RELEASE = "v2.3.0"
_TORCH_IMAGE = "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime"
_GHCR = "ghcr.io/kubeflow/trainer"

#: The trainer image of each runtime (every step of it, unless an initializer).
_IMAGES = {
    "torch-distributed": _TORCH_IMAGE,
    "torch-distributed-with-cache": _TORCH_IMAGE,
    "deepspeed-distributed": f"{_GHCR}/deepspeed-runtime:{_RELEASE}",
    "mlx-distributed": f"{_GHCR}/mlx-runtime:{_RELEASE}",
    "jax-distributed": "nvcr.io/nvidia/jax:25.10-py3",
    "xgboost-distributed": f"{_GHCR}/xgboost-runtime:{_RELEASE}",
    "torchtune-llama3.2-1b": f"{_GHCR}/torchtune-trainer:{_RELEASE}",
    "torchtune-llama3.2-3b": f"{_GHCR}/torchtune-trainer:{_RELEASE}",
    "torchtune-qwen2.5-1.5b": f"{_GHCR}/torchtune-trainer:{_RELEASE}",
}

#: TorchTune runtimes: the model they fine-tune (initializer URI, recipe config).
_TORCHTUNE = {
    "torchtune-llama3.2-1b": ("hf://meta-llama/Llama-3.2-1B-Instruct", "llama3_2/1B_full"),
    "torchtune-llama3.2-3b": ("hf://meta-llama/Llama-3.2-3B-Instruct", "llama3_2/3B_full"),
    "torchtune-qwen2.5-1.5b": ("hf://Qwen/Qwen2.5-1.5B-Instruct", "qwen2_5/1.5B_full"),
}
_DATASET_URI = "hf://tatsu-lab/alpaca"
_WORKSPACE = "/workspace"
_VOLUME = "initializer"


def _tune_command(config: str) -> list[str]:
    data = f"{_WORKSPACE}/dataset/data"
    model = f"{_WORKSPACE}/model"
    return [
        "tune",
        "run",
        "--rdzv_endpoint=localhost:29500",
        "full_finetune_distributed",
        "--config",
        config,
        "dataset=torchtune.datasets.instruct_dataset",
        "dataset.source=parquet",
        f"dataset.data_dir={data}",
        f"output_dir={_WORKSPACE}/output",
        f"tokenizer.path={model}/original/tokenizer.model",
        f"checkpointer.checkpoint_dir={model}",
    ]


def _containers(rjob: JSON) -> list[JSON]:
    containers: list[JSON] = rjob["template"]["spec"]["template"]["spec"]["containers"]
    return containers


def _complete(manifest: JSON) -> JSON:
    name = str(manifest["metadata"]["name"])
    image = _IMAGES.get(name, _TORCH_IMAGE)
    tune = _TORCHTUNE.get(name)
    mpi = "mpi" in manifest["spec"]["mlPolicy"]
    for rjob in manifest["spec"]["template"]["spec"]["replicatedJobs"]:
        step = rjob["name"]
        for container in _containers(rjob):
            if step in (names.DATASET_INITIALIZER, names.MODEL_INITIALIZER):
                container["image"] = f"{_GHCR}/{step}:{_RELEASE}"
                uri = _DATASET_URI if step == names.DATASET_INITIALIZER else None
                if tune is not None and step == names.MODEL_INITIALIZER:
                    uri = tune[0]
                if uri is not None:
                    container["env"] = [{"name": "STORAGE_URI", "value": uri}]
            else:
                container["image"] = image
                if mpi and step == names.NODE:
                    container["command"] = ["/usr/sbin/sshd"]
                    container["args"] = ["-De", "-f", "/home/mpiuser/.sshd_config"]
                if tune is not None:
                    container["command"] = _tune_command(tune[1])
            if tune is not None:
                container["volumeMounts"] = [{"name": _VOLUME, "mountPath": _WORKSPACE}]
    if tune is not None:
        manifest["spec"]["template"]["spec"]["volumeClaimPolicies"] = [
            {
                "templates": [
                    {
                        "metadata": {"name": _VOLUME},
                        "spec": {
                            "accessModes": ["ReadWriteOnce"],
                            "resources": {"requests": {"storage": "20Gi"}},
                        },
                    }
                ]
            }
        ]
    meta = manifest["metadata"]
    for key in ("uid", "resourceVersion", "generation", "creationTimestamp"):
        meta.pop(key, None)  # the store assigns them
    meta["labels"] = {
        **meta.get("labels", {}),
        "trainer.kubeflow.org/webhook-validation": "disabled",
    }
    return manifest


def builtin_runtimes() -> list[JSON]:
    """Fresh manifests of the default ClusterTrainingRuntimes (callers may edit them)."""
    from kf_trainer_core.backends.local.runtimes import default_runtimes

    return [_complete(json_copy(doc)) for _, doc in sorted(default_runtimes().items())]
