"""What the builder needs to know about a runtime: its ML policy (which launcher a
``CustomTrainer`` function needs), its replicated jobs (which steps exist and how long a
job name may be) and its trainer container.

The client reads this from the cluster's runtime object; with no cluster (rendering,
dry runs, the local backend) the builder falls back to what the Trainer's default
runtimes are known to hold.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from kf_trainer_core.fields import names
from kf_trainer_core.k8s.trainjob import FRAMEWORK_LABEL, trainer_container

Launcher = Literal["torchrun", "mpirun", "python"]

GPU_RESOURCE = "nvidia.com/gpu"
MIG_PREFIX = "nvidia.com/mig-"
_DEVICE_RESOURCES = (
    (GPU_RESOURCE, "gpu"),
    ("google.com/tpu", "tpu"),
    ("huawei.com/Ascend910", "npu"),
    ("amd.com/gpu", "gpu"),
)


@dataclass(frozen=True)
class RuntimeInfo:
    """The facts about a (Cluster)TrainingRuntime that shape a TrainJob built on it."""

    name: str
    kind: str = "ClusterTrainingRuntime"
    framework: str = "torch"
    #: "torch", "mpi", "jax", "xgboost", "plainml" (no distributed policy) ...
    policy: str = "torch"
    num_nodes: int = 1
    replicated_jobs: tuple[str, ...] = (names.NODE,)
    image: str | None = None
    device: str | None = None
    device_count: str | None = None
    #: MPI: numProcPerNode of the policy; torch: numProcPerNode when set.
    num_proc_per_node: int | str | None = None
    mpi_run_launcher_as_node: bool = False
    #: True when this came from the cluster, False when guessed from defaults.
    observed: bool = False
    labels: dict[str, str] = field(default_factory=dict)

    @property
    def launcher(self) -> Launcher:
        """The program that starts a ``CustomTrainer`` function, as the SDK picks it."""
        if self.policy == "torch":
            return "torchrun"
        if self.policy == "mpi":
            return "mpirun"
        return "python"

    @property
    def known(self) -> bool:
        """Whether these facts are certain: read from the cluster, or those of a default
        runtime (a guessed runtime's steps and policy are only likely)."""
        return self.observed or self.name in DEFAULT_RUNTIMES

    @property
    def max_name_length(self) -> int:
        """The longest TrainJob name whose pods fit."""
        return names.max_name_length(self.replicated_jobs)

    @classmethod
    def from_manifest(cls, obj: dict[str, Any]) -> RuntimeInfo:
        """Read a ``ClusterTrainingRuntime`` / ``TrainingRuntime`` object (a dict as the
        API returns it)."""
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        policy_spec = spec.get("mlPolicy") or {}
        policy = next(
            (k for k in ("torch", "mpi", "jax", "xgboost", "flux") if k in policy_spec), "plainml"
        )
        labels = dict(meta.get("labels") or {})
        rjobs = ((spec.get("template") or {}).get("spec") or {}).get("replicatedJobs") or []
        node = trainer_container(obj)
        image: str | None = node.get("image")
        device, count = device_of(node.get("resources")) if node else (None, None)
        procs = (
            (policy_spec.get(policy) or {}).get("numProcPerNode")
            if policy in ("torch", "mpi")
            else None
        )
        return cls(
            name=meta.get("name", ""),
            kind=obj.get("kind", "ClusterTrainingRuntime"),
            framework=labels.get(FRAMEWORK_LABEL, policy),
            policy=policy,
            num_nodes=int(policy_spec.get("numNodes") or 1),
            replicated_jobs=tuple(r.get("name", "") for r in rjobs),
            image=image,
            device=device,
            device_count=count,
            num_proc_per_node=procs,
            mpi_run_launcher_as_node=bool((policy_spec.get("mpi") or {}).get("runLauncherAsNode")),
            observed=True,
            labels=labels,
        )

    @classmethod
    def guess(cls, name: str, kind: str = "ClusterTrainingRuntime") -> RuntimeInfo:
        """What a runtime is likely to be when the cluster cannot be asked: a known
        default runtime, else a torch runtime with every step (the strictest limits)."""
        known = DEFAULT_RUNTIMES.get(name)
        if known is not None and kind == "ClusterTrainingRuntime":
            return known
        rjobs: tuple[str, ...]
        if "mpi" in name or "deepspeed" in name or "mlx" in name:
            policy, rjobs = "mpi", (names.NODE, names.LAUNCHER)
        else:
            policy, rjobs = (
                "torch",
                (names.DATASET_INITIALIZER, names.MODEL_INITIALIZER, names.NODE),
            )
        return cls(name=name, kind=kind, policy=policy, framework=policy, replicated_jobs=rjobs)


def device_of(resources: dict[str, Any] | None) -> tuple[str | None, str | None]:
    """``(device, count)`` of a container's resource limits, e.g. ``("gpu", "4")``."""
    limits = (resources or {}).get("limits") or {}
    for key, device in _DEVICE_RESOURCES:
        if key in limits:
            return device, str(limits[key])
    for key, value in limits.items():
        if key.startswith(MIG_PREFIX):
            return key.split("/", 1)[1], str(value)
    if "cpu" in limits:
        return "cpu", str(limits["cpu"])
    return None, None


def _default(
    name: str, framework: str, policy: str, rjobs: tuple[str, ...], **kw: Any
) -> RuntimeInfo:
    return RuntimeInfo(name=name, framework=framework, policy=policy, replicated_jobs=rjobs, **kw)


_TORCH = (names.NODE,)
_INIT_TORCH = (names.DATASET_INITIALIZER, names.MODEL_INITIALIZER, names.NODE)

#: The ClusterTrainingRuntimes that Kubeflow Trainer v2.3 installs by default.
DEFAULT_RUNTIMES: dict[str, RuntimeInfo] = {
    r.name: r
    for r in (
        _default("torch-distributed", "torch", "torch", _TORCH),
        _default(
            "torch-distributed-with-cache",
            "torch",
            "torch",
            (names.DATASET_INITIALIZER, names.NODE),
        ),
        *(
            # The MPI runtimes: one process per node, the launcher doubling as a node.
            _default(
                f"{framework}-distributed",
                framework,
                "mpi",
                (names.NODE, names.LAUNCHER),
                num_proc_per_node=1,
                mpi_run_launcher_as_node=True,
            )
            for framework in ("deepspeed", "mlx")
        ),
        _default("jax-distributed", "jax", "jax", _TORCH),
        _default("xgboost-distributed", "xgboost", "xgboost", _TORCH),
        _default("torchtune-llama3.2-1b", "torchtune", "torch", _INIT_TORCH),
        _default("torchtune-llama3.2-3b", "torchtune", "torch", _INIT_TORCH),
        _default("torchtune-qwen2.5-1.5b", "torchtune", "torch", _INIT_TORCH),
    )
}


#: What ``get_runtime_packages`` runs on a node of the runtime.
PACKAGES_SOURCE = """\
def print_packages():
    import shutil
    import subprocess
    import sys

    pip = [sys.executable, "-m", "pip", "list"]
    print(subprocess.run(pip, capture_output=True, text=True).stdout)
    if shutil.which("nvidia-smi"):
        print(subprocess.run(["nvidia-smi"], capture_output=True, text=True).stdout)
"""
