"""The training spec: a typed, JSON-serialisable description of a TrainJob in the
Kubeflow Python SDK's vocabulary.

The names follow ``kubeflow.trainer`` (``CustomTrainer``, ``CustomTrainerContainer``,
``BuiltinTrainer(TorchTuneConfig)``, ``Initializer``, the options ``Name``, ``Labels``,
``RuntimePatch``...), so code written for the SDK reads the same here. Unlike the SDK's
dataclasses, every model validates its fields when built, round-trips through JSON (the
form orchestrators store in XCom, Prefect results and KFP parameters) and refuses
credentials in clear text.

Each variant of a union carries a ``type`` tag so that its JSON form says what it is::

    {"type": "CustomTrainer", "func": {"name": "train", "source": "def train(): ..."}}
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import Field, field_validator, model_validator

from kf_trainer_core.base.errors import FieldProblem, SpecError
from kf_trainer_core.base.quoting import shown
from kf_trainer_core.fields._model import SpecModel
from kf_trainer_core.fields.checks import spec_mapping
from kf_trainer_core.fields.retention import Retention
from kf_trainer_core.spec.checkpoint_storage import Checkpoints
from kf_trainer_core.spec.common import (
    ANNOTATIONS_LIMIT,
    DEFAULT_MODEL_IGNORE_PATTERNS,
    DEFAULT_PATCH_MANAGER,
    DEFAULT_PIP_INDEX_URLS,
    DEFAULT_RUNTIME,
    KUEUE_QUEUE_LABEL,
    MANAGED_BY_MULTIKUEUE,
    MANAGED_BY_TRAINER,
    EnvValue,
    RuntimeKind,
    RuntimeRef,
    SecretKeyRef,
)
from kf_trainer_core.spec.initializers import (
    DataCacheInitializer,
    DatasetInit,
    DatasetInitializer,
    HuggingFaceDatasetInitializer,
    HuggingFaceModelInitializer,
    Initializer,
    ModelInit,
    ModelInitializer,
    S3DatasetInitializer,
    S3ModelInitializer,
)
from kf_trainer_core.spec.options import (
    SINGLE_OPTIONS,
    ActiveDeadlineSeconds,
    Annotations,
    ContainerPatch,
    JobSetSpecPatch,
    JobSetTemplatePatch,
    JobSpecPatch,
    JobTemplatePatch,
    Labels,
    ManagedBy,
    Name,
    Option,
    PodSpecPatch,
    PodTemplatePatch,
    QueueName,
    ReplicatedJobPatch,
    RuntimePatch,
    Suspend,
    TrainerArgs,
    TrainerCommand,
    TrainingRuntimeSpecPatch,
)
from kf_trainer_core.spec.trainers import (
    BuiltinTrainer,
    CustomTrainer,
    CustomTrainerContainer,
    DataFormat,
    DataType,
    LoraConfig,
    Loss,
    ResourceValue,
    TorchTuneConfig,
    TorchTuneInstructDataset,
    Trainer,
    TrainFunction,
    trainer_type,
)

# --------------------------------------------------------------------------- the job


def _runtime_in(value: Any) -> Any:
    if isinstance(value, str):
        return {"name": value}
    # The SDK's Runtime objects (from get_runtime) carry name and kind.
    name = getattr(value, "name", None)
    if name is not None and not isinstance(value, (dict, RuntimeRef)):
        kind = getattr(value, "kind", RuntimeKind.CLUSTER_TRAINING_RUNTIME)
        return {"name": name, "kind": getattr(kind, "value", kind)}
    return value


class TrainJobSpec(SpecModel):
    """Everything needed to build a TrainJob: the SDK's ``train(runtime, initializer,
    trainer, options)`` arguments as one JSON-serialisable value."""

    _error_root = ""

    runtime: RuntimeRef = Field(default_factory=RuntimeRef)
    trainer: Trainer | None = None
    initializer: Initializer | None = None
    options: list[Option] = Field(default_factory=list)

    @classmethod
    def parse(cls, data: Any) -> TrainJobSpec:
        """Validate ``data`` into a spec: a dict, an instance, or the text of a spec file,
        YAML or JSON, read as ``kf-trainer`` and the Airflow operator read it (at most
        1 MiB, aliases refused). A text that cannot be read is a :class:`SpecError`
        naming the position, never quoting the text."""
        if isinstance(data, (str, bytes)):
            data = spec_mapping(data)
        return super().parse(data)

    @field_validator("runtime", mode="before")
    @classmethod
    def _runtime(cls, v: Any) -> Any:
        return _runtime_in(v)

    @model_validator(mode="after")
    def _consistent(self) -> TrainJobSpec:
        problems: list[FieldProblem] = []
        seen: dict[str, int] = {}
        managers: set[str] = set()
        for i, opt in enumerate(self.options):
            where, kind = f"options[{i}]", opt.type
            if kind in SINGLE_OPTIONS and kind in seen:
                problems.append(
                    FieldProblem(
                        where, f"{kind} is given twice (also options[{seen[kind]}]).", "keep one."
                    )
                )
            seen.setdefault(kind, i)
            if isinstance(opt, (TrainerCommand, TrainerArgs)) and not isinstance(
                self.trainer, CustomTrainerContainer
            ):
                what = f"not {type(self.trainer).__name__}" if self.trainer else "and there is none"
                problems.append(
                    FieldProblem(
                        where,
                        f"{kind} only works with CustomTrainerContainer, {what}: CustomTrainer "
                        "builds its command from the function and BuiltinTrainer takes it from "
                        "the runtime.",
                        "drop the option, or use CustomTrainerContainer(image=...).",
                    )
                )
            if isinstance(opt, RuntimePatch):
                if opt.manager in managers:
                    problems.append(
                        FieldProblem(
                            f"{where}.manager",
                            f"two RuntimePatch options use manager {shown(opt.manager)}; "
                            "patches are keyed by manager.",
                            "give each patch its own `manager`, or merge them.",
                        )
                    )
                managers.add(opt.manager)
        if len(managers) > 16:
            problems.append(
                FieldProblem(
                    "options",
                    f"{len(managers)} RuntimePatch managers; the CRD allows 16.",
                    "merge some.",
                )
            )
        init = self.initializer
        if (
            init is not None
            and isinstance(init.dataset, DataCacheInitializer)
            and isinstance(self.trainer, BuiltinTrainer)
        ):
            problems.append(
                FieldProblem(
                    "initializer.dataset",
                    "the data cache does not feed BuiltinTrainer (TorchTune reads files).",
                    "use a HuggingFace or S3 data set.",
                )
            )
        if problems:
            raise SpecError(problems)
        return self

    def option(self, kind: type[Any]) -> Any:
        """The first option of the given class, or ``None``."""
        return next((o for o in self.options if isinstance(o, kind)), None)

    def with_options(self, *options: Any) -> TrainJobSpec:
        """A copy with options added; a single-valued option replaces one of its kind."""
        kinds = {o.type for o in options if o.type in SINGLE_OPTIONS}
        kept = [o for o in self.options if o.type not in kinds]
        return TrainJobSpec.parse({**self.model_dump(mode="python"), "options": [*kept, *options]})


def train_spec(
    runtime: str | RuntimeRef | None = None,
    trainer: CustomTrainer | CustomTrainerContainer | BuiltinTrainer | None = None,
    initializer: Initializer | None = None,
    options: list[Any] | None = None,
) -> TrainJobSpec:
    """Build a :class:`TrainJobSpec` with the SDK's ``TrainerClient.train`` signature."""
    data: dict[str, Any] = {
        "trainer": trainer,
        "initializer": initializer,
        "options": options or [],
    }
    if runtime is not None:
        data["runtime"] = runtime
    return TrainJobSpec(**data)


FunctionLike = Callable[..., Any] | str | TrainFunction


__all__ = [
    "ANNOTATIONS_LIMIT",
    "DEFAULT_MODEL_IGNORE_PATTERNS",
    "DEFAULT_PATCH_MANAGER",
    "DEFAULT_PIP_INDEX_URLS",
    "DEFAULT_RUNTIME",
    "KUEUE_QUEUE_LABEL",
    "MANAGED_BY_MULTIKUEUE",
    "MANAGED_BY_TRAINER",
    "ActiveDeadlineSeconds",
    "Annotations",
    "BuiltinTrainer",
    "Checkpoints",
    "ContainerPatch",
    "CustomTrainer",
    "CustomTrainerContainer",
    "DataCacheInitializer",
    "DataFormat",
    "DataType",
    "DatasetInit",
    "DatasetInitializer",
    "EnvValue",
    "FunctionLike",
    "HuggingFaceDatasetInitializer",
    "HuggingFaceModelInitializer",
    "Initializer",
    "JobSetSpecPatch",
    "JobSetTemplatePatch",
    "JobSpecPatch",
    "JobTemplatePatch",
    "Labels",
    "LoraConfig",
    "Loss",
    "ManagedBy",
    "ModelInit",
    "ModelInitializer",
    "Name",
    "Option",
    "PodSpecPatch",
    "PodTemplatePatch",
    "QueueName",
    "ReplicatedJobPatch",
    "ResourceValue",
    "Retention",
    "RuntimeKind",
    "RuntimePatch",
    "RuntimeRef",
    "S3DatasetInitializer",
    "S3ModelInitializer",
    "SecretKeyRef",
    "Suspend",
    "TorchTuneConfig",
    "TorchTuneInstructDataset",
    "TrainFunction",
    "TrainJobSpec",
    "Trainer",
    "TrainerArgs",
    "TrainerCommand",
    "TrainingRuntimeSpecPatch",
    "train_spec",
    "trainer_type",
]
