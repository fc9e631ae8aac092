"""The options of the training spec (``Name``, ``Labels``, ``RuntimePatch``, ``QueueName``...)
and the runtime-patch models they carry."""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import AfterValidator, Field, field_validator

from kf_trainer_core.base.quoting import shown
from kf_trainer_core.fields import checks
from kf_trainer_core.fields._model import SpecModel, fix
from kf_trainer_core.fields.retention import Retention
from kf_trainer_core.spec.checkpoint_storage import Checkpoints
from kf_trainer_core.spec.common import (
    ANNOTATIONS_LIMIT,
    DEFAULT_PATCH_MANAGER,
    LABEL_VALUE,
    check_env_name,
    check_label_key,
    check_object_name,
    positional,
)

# -------------------------------------------------------------- runtime patches


class ContainerPatch(SpecModel):
    """Changes to one container of a replicated job's pods. ``env`` entries use the
    Kubernetes form (``{"name": ..., "value": ...}`` or ``valueFrom``)."""

    name: str
    env: list[dict[str, Any]] | None = None
    volume_mounts: list[dict[str, Any]] | None = None
    security_context: dict[str, Any] | None = None

    @field_validator("env", mode="before")
    @classmethod
    def _env_in(cls, v: Any) -> Any:
        if isinstance(v, dict):
            return [{"name": k, "value": str(val)} for k, val in v.items()]
        return v

    @field_validator("env")
    @classmethod
    def _env(cls, v: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
        for entry in v or []:
            check_env_name(str(entry.get("name", "")))
            if "value" not in entry and "valueFrom" not in entry:
                raise ValueError(
                    fix(
                        f"env {shown(entry.get('name'))} has neither value nor valueFrom.",
                        "give one.",
                    )
                )
        checks.check_env({str(e.get("name")): e.get("value") for e in v or [] if "value" in e})
        return v

    @field_validator("volume_mounts")
    @classmethod
    def _mounts(cls, v: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
        for m in v or []:
            path = m.get("mountPath")
            if not m.get("name") or not isinstance(path, str) or not path.startswith("/"):
                raise ValueError(
                    fix(
                        f"volume mount {shown(m)} needs a `name` and an absolute `mountPath`.",
                        "write {'name': 'data', 'mountPath': '/data'}.",
                    )
                )
        return v


class PodSpecPatch(SpecModel):
    """Pod-level fields a runtime patch may set."""

    service_account_name: str | None = None
    volumes: list[dict[str, Any]] | None = None
    init_containers: list[ContainerPatch] | None = None
    containers: list[ContainerPatch] | None = None
    image_pull_secrets: list[dict[str, Any]] | None = None
    security_context: dict[str, Any] | None = None
    node_selector: dict[str, str] | None = None
    affinity: dict[str, Any] | None = None
    tolerations: list[dict[str, Any]] | None = None
    scheduling_gates: list[dict[str, Any]] | None = None
    termination_grace_period_seconds: int | None = Field(default=None, ge=0)


class _MetadataPatch(SpecModel):
    metadata: dict[str, Any] | None = None

    @field_validator("metadata")
    @classmethod
    def _metadata(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        if v is None:
            return None
        bad = set(v) - {"labels", "annotations"}
        if bad:
            raise ValueError(
                fix(
                    f"metadata may only hold labels and annotations (got {sorted(bad)}).",
                    "drop the rest.",
                )
            )
        for key in v.get("labels") or {}:
            check_label_key(key, "label")
        return v


class PodTemplatePatch(_MetadataPatch):
    """Metadata (labels, annotations) and spec of the pods of a replicated job. Pod
    labels set here, unlike TrainJob labels, reach the pods."""

    spec: PodSpecPatch | None = None


class JobSpecPatch(SpecModel):
    """The Job spec of a replicated job."""

    template: PodTemplatePatch | None = None


class JobTemplatePatch(_MetadataPatch):
    """The Job template of a replicated job."""

    spec: JobSpecPatch | None = None


class ReplicatedJobPatch(SpecModel):
    """Changes to one replicated job (``node``, ``launcher``, ``dataset-initializer``...)."""

    name: str = Field(min_length=1, max_length=253)
    template: JobTemplatePatch | None = None


class JobSetSpecPatch(SpecModel):
    """The JobSet spec: per-replicated-job patches."""

    replicated_jobs: list[ReplicatedJobPatch] | None = Field(default=None, max_length=100)


class JobSetTemplatePatch(_MetadataPatch):
    """The JobSet template."""

    spec: JobSetSpecPatch | None = None


class TrainingRuntimeSpecPatch(SpecModel):
    """The patchable part of a (Cluster)TrainingRuntime spec."""

    template: JobSetTemplatePatch | None = None


class _Option(SpecModel):
    """Base of the options a job takes (SDK ``kubeflow.trainer.options``)."""


class Name(_Option):
    """The TrainJob's name (SDK ``Name``). Without it, a name is generated."""

    type: Literal["Name"] = "Name"
    name: str

    def __init__(self, name: str | None = None, /, **data: Any) -> None:
        super().__init__(**positional(data, name=name))


class Labels(_Option):
    """Labels on the TrainJob object (they do not reach the pods: use a RuntimePatch
    for pod labels)."""

    type: Literal["Labels"] = "Labels"
    labels: dict[str, str]

    def __init__(self, labels: dict[str, str] | None = None, /, **data: Any) -> None:
        super().__init__(**positional(data, labels=labels))

    @field_validator("labels")
    @classmethod
    def _labels(cls, v: dict[str, str]) -> dict[str, str]:
        checks.refuse_tokens(v, "a label value")  # first: the checks below quote the value
        for key, value in v.items():
            check_label_key(key, "label")
            if len(value) > 63 or not LABEL_VALUE.match(value):
                raise ValueError(
                    fix(
                        f"label {key}={shown(value)} has an invalid value.",
                        "use at most 63 letters, digits, '-', '_' or '.', starting and ending "
                        "alphanumeric (or an annotation for free text).",
                    )
                )
        return v


class Annotations(_Option):
    """Annotations on the TrainJob object."""

    type: Literal["Annotations"] = "Annotations"
    annotations: dict[str, str]

    def __init__(self, annotations: dict[str, str] | None = None, /, **data: Any) -> None:
        super().__init__(**positional(data, annotations=annotations))

    @field_validator("annotations")
    @classmethod
    def _ann(cls, v: dict[str, str]) -> dict[str, str]:
        for key in v:
            check_label_key(key, "annotation")
        size = sum(len(k.encode()) + len(str(val).encode()) for k, val in v.items())
        if size > ANNOTATIONS_LIMIT:
            raise ValueError(
                fix(
                    f"the annotations take {size // 1024} KiB; the API server allows "
                    f"{ANNOTATIONS_LIMIT // 1024} KiB of annotations per object in all.",
                    "keep large data elsewhere (a ConfigMap, object storage) and annotate a "
                    "reference to it.",
                )
            )
        return checks.refuse_tokens(v, "an annotation value")


def _refusing_tokens(what: str) -> AfterValidator:
    """A field check that refuses strings that look like credentials (see
    :func:`checks.refuse_tokens`)."""
    return AfterValidator(lambda v: checks.refuse_tokens(v, what))


class TrainerCommand(_Option):
    """The trainer container's command (``CustomTrainerContainer`` only)."""

    type: Literal["TrainerCommand"] = "TrainerCommand"
    command: Annotated[
        list[str], Field(min_length=1, max_length=128), _refusing_tokens("the command")
    ]

    def __init__(self, command: list[str] | None = None, /, **data: Any) -> None:
        super().__init__(**positional(data, command=command))


class TrainerArgs(_Option):
    """The trainer container's arguments (``CustomTrainerContainer`` only)."""

    type: Literal["TrainerArgs"] = "TrainerArgs"
    args: Annotated[list[str], Field(max_length=128), _refusing_tokens("the arguments")]

    def __init__(self, args: list[str] | None = None, /, **data: Any) -> None:
        super().__init__(**positional(data, args=args))


class ActiveDeadlineSeconds(_Option):
    """Seconds after creation before the Trainer fails the job (``DeadlineExceeded``)."""

    type: Literal["ActiveDeadlineSeconds"] = "ActiveDeadlineSeconds"
    seconds: int

    def __init__(self, seconds: int | None = None, /, **data: Any) -> None:
        super().__init__(**positional(data, seconds=seconds))

    @field_validator("seconds", mode="before")
    @classmethod
    def _secs(cls, v: Any) -> Any:
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(
                fix(f"seconds must be a positive integer (got {shown(v)}).", "use 1 or more.")
            )
        return v


class RuntimePatch(_Option):
    """Pod-level changes to the runtime for this job (``spec.runtimePatches``), keyed
    by ``manager``. Several patches need several managers (at most 16)."""

    type: Literal["RuntimePatch"] = "RuntimePatch"
    training_runtime_spec: TrainingRuntimeSpecPatch | None = None
    manager: str = Field(default=DEFAULT_PATCH_MANAGER, min_length=1, max_length=253)

    def __init__(
        self, training_runtime_spec: TrainingRuntimeSpecPatch | None = None, /, **data: Any
    ) -> None:
        if training_runtime_spec is not None:
            data["training_runtime_spec"] = training_runtime_spec
        super().__init__(**data)


class Suspend(_Option):
    """Create the job suspended (``spec.suspend``); resume it later, or let Kueue."""

    type: Literal["Suspend"] = "Suspend"
    suspend: bool = True


class ManagedBy(_Option):
    """The controller that reconciles the job (``spec.managedBy``), e.g. Kueue's
    MultiKueue to dispatch it to a worker cluster."""

    type: Literal["ManagedBy"] = "ManagedBy"
    managed_by: Literal["trainer.kubeflow.org/trainjob-controller", "kueue.x-k8s.io/multikueue"]

    def __init__(self, managed_by: str | None = None, /, **data: Any) -> None:
        super().__init__(**positional(data, managed_by=managed_by))


class QueueName(_Option):
    """Submit through a Kueue ``LocalQueue``: sets the ``kueue.x-k8s.io/queue-name``
    label; Kueue then suspends and admits the job."""

    type: Literal["QueueName"] = "QueueName"
    queue: str

    def __init__(self, queue: str | None = None, /, **data: Any) -> None:
        super().__init__(**positional(data, queue=queue))

    @field_validator("queue")
    @classmethod
    def _queue(cls, v: str) -> str:
        return check_object_name(v, "LocalQueue name", "use the queue's name, e.g. 'team-a'.", 63)


Option = Annotated[
    Name
    | Labels
    | Annotations
    | TrainerCommand
    | TrainerArgs
    | ActiveDeadlineSeconds
    | RuntimePatch
    | Suspend
    | ManagedBy
    | QueueName
    | Checkpoints
    | Retention,
    Field(discriminator="type"),
]

#: The options a spec may hold several of; of every other kind it holds one at most.
_REPEATABLE = {"Labels", "Annotations", "RuntimePatch"}
SINGLE_OPTIONS = {
    str(kind.model_fields["type"].default) for kind in get_args(get_args(Option)[0])
} - _REPEATABLE
