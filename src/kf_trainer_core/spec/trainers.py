"""The trainers of the training spec: ``CustomTrainer``, ``CustomTrainerContainer`` and
``BuiltinTrainer(TorchTuneConfig)``, in the Kubeflow SDK's vocabulary."""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Discriminator, Field, Tag, field_validator, model_validator

from kf_trainer_core.base.errors import SpecError
from kf_trainer_core.base.quoting import shown
from kf_trainer_core.fields import checks
from kf_trainer_core.fields._model import SpecModel, field_problem, fix
from kf_trainer_core.spec import function as fn
from kf_trainer_core.spec.common import (
    DEFAULT_PIP_INDEX_URLS,
    QUANTITY,
    EnvValue,
    check_env_name,
    check_json,
    env_dict,
    positional,
    positive,
)

# -------------------------------------------------------------------------- trainers

ResourceValue = int | float | str


def _resources(value: dict[str, ResourceValue] | None) -> dict[str, ResourceValue] | None:
    """Validate ``resources_per_node`` like the SDK reads it: aliases ``gpu``, ``cpu``,
    ``memory``, ``storage``, ``mig-<profile>`` or full resource names."""
    if value is None:
        return None
    migs: list[str] = []
    for key, qty in value.items():
        low = key.lower()
        known = low in {"gpu", "cpu", "memory", "storage", "ephemeral-storage"}
        if not (known or low.startswith("mig-") or "/" in key):
            raise ValueError(
                fix(
                    f"unknown resource {shown(key)}.",
                    "use gpu, cpu, memory, storage, mig-<profile> (e.g. mig-1g.5gb) or a "
                    "full extended resource name such as 'amd.com/gpu'.",
                )
            )
        if isinstance(qty, bool) or (isinstance(qty, (int, float)) and qty < 0):
            raise ValueError(
                fix(f"{key}: {shown(qty)} is not a quantity.", "give e.g. 2, '500m', '16Gi'.")
            )
        if isinstance(qty, str) and not QUANTITY.match(qty):
            raise ValueError(
                fix(
                    f"{key}: {shown(qty)} is not a Kubernetes quantity.",
                    "give e.g. 2, '500m', '16Gi' (no spaces; Gi not GB).",
                )
            )
        if not checks.quantity_in_range(qty):
            raise ValueError(
                fix(
                    f"{key}: {shown(qty)} is out of range; Kubernetes keeps quantities up to "
                    "2^63-1.",
                    "give a finite amount, e.g. 2, '500m', '16Gi'.",
                )
            )
        if (low in {"gpu"} or low.startswith("mig-") or "/" in key) and not checks.whole_quantity(
            qty
        ):
            raise ValueError(
                fix(
                    f"{key}: {shown(qty)} is not a whole number; GPUs and other extended resources "
                    "are whole devices.",
                    "request an integer count; for a fraction of a GPU request a MIG profile "
                    "such as mig-1g.5gb: 1.",
                )
            )
        if low.startswith("mig-") or key.startswith("nvidia.com/mig-"):
            migs.append(key)
    if len(migs) > 1:
        raise ValueError(
            fix(f"several MIG profiles requested ({', '.join(migs)}).", "request one.")
        )
    if migs and any(k.lower() in {"gpu", "nvidia.com/gpu"} for k in value):
        raise ValueError(
            fix("a whole GPU and a MIG slice cannot be requested together.", "drop one of them.")
        )
    return value


#: ``resources_per_node``, checked by :func:`_resources`.
Resources = Annotated[dict[str, ResourceValue] | None, AfterValidator(_resources)]


class TrainFunction(SpecModel):
    """A training function in shippable form.

    Build it from a function object (its source is captured), from source text, or from
    a ``"package.module:function"`` reference; every ``CustomTrainer.func`` field accepts
    all three directly. With ``embed=False`` a reference is imported in the pod instead
    of being shipped as source (for code that is installed in the image).
    """

    name: str | None = None
    source: str | None = None
    ref: str | None = None
    embed: bool = True

    @model_validator(mode="before")
    @classmethod
    def _coerce(cls, data: Any) -> Any:
        if callable(data) and not isinstance(data, type):
            name, source = fn.capture_source(data)
            return {"name": name, "source": source}
        if isinstance(data, str):
            if fn.REF_PATTERN.match(data.strip()):
                return {"ref": data.strip()}
            fn.refuse_dotted_path(data.strip())
            name, source = fn.parse_source(data)
            return {"name": name, "source": source}
        return data

    @model_validator(mode="after")
    def _check(self) -> TrainFunction:
        if (self.source is None) == (self.ref is None):
            raise ValueError(
                fix(
                    "give exactly one of `source` and `ref`.",
                    "pass a function, its source or a reference.",
                )
            )
        if self.ref is not None:
            if not fn.REF_PATTERN.match(self.ref):
                raise ValueError(
                    fix(
                        f"{shown(self.ref)} is not a 'package.module:function' reference.",
                        "fix its form.",
                    )
                )
            module, _, attr = self.ref.rpartition(":")
            problem = checks.module_path_problem(module, "the module") or (
                checks.identifier_problem(attr, "the function")
            )
            if problem:
                raise SpecError(field_problem("ref", problem))
            if self.name is None:
                object.__setattr__(self, "name", attr)
            problem = checks.identifier_problem(self.name or "", "the name")
            if problem:
                # With embed=False the name is pasted into the program: it must be one
                # Python identifier, or the job would fail (or worse) in the pod.
                raise SpecError(field_problem("name", problem))
        else:
            assert self.source is not None
            name, source = fn.parse_source(self.source, self.name)
            object.__setattr__(self, "name", name)
            object.__setattr__(self, "source", source)
        return self

    def resolved(self) -> tuple[str, str | None, str | None]:
        """``(name, source, import_ref)`` ready for the program generator: a reference
        that is embedded is imported here and its source captured."""
        assert self.name is not None
        if self.source is not None:
            return self.name, self.source, None
        assert self.ref is not None
        if not self.embed:
            return self.name, None, self.ref
        name, source = fn.capture_source(fn.resolve_ref(self.ref))
        return name, source, None


class _NodeTrainer(SpecModel):
    num_nodes: int | None = None
    resources_per_node: Resources = None
    env: dict[str, EnvValue] | None = None

    @field_validator("num_nodes")
    @classmethod
    def _nodes(cls, v: int | None) -> int | None:
        return positive(v, "num_nodes")

    @field_validator("env", mode="before")
    @classmethod
    def _env_in(cls, v: Any) -> Any:
        return env_dict(v)

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, EnvValue] | None) -> dict[str, EnvValue] | None:
        for name in v or {}:
            check_env_name(name)
            if name.startswith("PET_"):
                raise ValueError(
                    fix(
                        f"{name} is reserved: the Trainer sets PET_* variables on the node "
                        "container itself and rejects jobs that set them.",
                        "drop it; use num_nodes / num_proc_per_node to shape the job.",
                    )
                )
        checks.check_env(v)
        return v

    @field_validator("image", check_fields=False)
    @classmethod
    def _image(cls, v: str | None) -> str | None:
        return checks.refuse_problem(v, checks.image_problem)


class CustomTrainer(_NodeTrainer):
    """Run a self-contained Python function on every training node (SDK
    ``CustomTrainer``).

    ``func`` takes a function object, its source, or ``"package.module:function"``;
    ``func_args`` become its keyword arguments and must be JSON-serialisable. The
    function's return value (JSON, ≤ 4 KiB) comes back as the job's result.
    """

    type: Literal["CustomTrainer"] = "CustomTrainer"
    func: TrainFunction
    func_args: dict[str, Any] | None = None
    image: str | None = Field(default=None, max_length=500)
    packages_to_install: list[str] | None = None
    pip_index_urls: list[str] = Field(default_factory=lambda: list(DEFAULT_PIP_INDEX_URLS))
    num_proc_per_node: int | None = None

    def __init__(self, func: Any = None, /, **data: Any) -> None:
        if func is not None:
            data["func"] = func
        super().__init__(**data)

    @field_validator("func_args")
    @classmethod
    def _args(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        if v is not None:
            check_json(v, "func_args")
            checks.refuse_tokens(v, "func_args")
        return v

    @field_validator("packages_to_install")
    @classmethod
    def _packages(cls, v: list[str] | None) -> list[str] | None:
        return checks.each(v, checks.requirement_problem)

    @field_validator("pip_index_urls")
    @classmethod
    def _urls(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError(
                fix("pip_index_urls is empty.", "leave it out to use PyPI, or list index URLs.")
            )
        return checks.each(v, checks.index_url_problem) or []

    @model_validator(mode="after")
    def _call(self) -> CustomTrainer:
        # The function must take func_args: a mismatch would fail only in the pod.
        if self.func.source is not None and self.func.name is not None:
            problem = fn.call_problem(self.func.source, self.func.name, self.func_args)
            if problem:
                raise SpecError(field_problem("func_args", problem))
        return self

    @field_validator("num_proc_per_node")
    @classmethod
    def _procs(cls, v: int | None) -> int | None:
        return positive(v, "num_proc_per_node")


class CustomTrainerContainer(_NodeTrainer):
    """Run a container image on every training node (SDK ``CustomTrainerContainer``).
    Combine with the ``TrainerCommand`` / ``TrainerArgs`` options to set what it runs."""

    type: Literal["CustomTrainerContainer"] = "CustomTrainerContainer"
    image: str = Field(min_length=1, max_length=500)
    num_proc_per_node: int | None = None

    def __init__(self, image: str | None = None, /, **data: Any) -> None:
        super().__init__(**positional(data, image=image))


class DataType(str, Enum):
    """Data type of the TorchTune model and optimizer parameters."""

    BF16 = "bf16"
    FP32 = "fp32"


class Loss(str, Enum):
    """Loss function of the TorchTune LLM trainer."""

    CEWithChunkedOutputLoss = "torchtune.modules.loss.CEWithChunkedOutputLoss"


class DataFormat(str, Enum):
    """File type of an instruct data set."""

    JSON = "json"
    CSV = "csv"
    PARQUET = "parquet"
    ARROW = "arrow"
    TEXT = "text"
    XML = "xml"


class LoraConfig(SpecModel):
    """LoRA / QLoRA / DoRA settings of a TorchTune fine-tune."""

    apply_lora_to_mlp: bool | None = None
    apply_lora_to_output: bool | None = None
    lora_attn_modules: list[str] = Field(
        default_factory=lambda: ["q_proj", "v_proj", "output_proj"]
    )
    lora_rank: int | None = Field(default=None, ge=1)
    lora_alpha: int | None = Field(default=None, ge=1)
    lora_dropout: float | None = Field(default=None, ge=0, le=1)
    quantize_base: bool | None = None
    use_dora: bool | None = None

    @field_validator("lora_attn_modules")
    @classmethod
    def _modules(cls, v: list[str]) -> list[str]:
        allowed = {"q_proj", "k_proj", "v_proj", "output_proj"}
        bad = [m for m in v if m not in allowed]
        if bad:
            raise ValueError(
                fix(f"unknown attention modules {bad}.", f"use some of {sorted(allowed)}.")
            )
        return v


class TorchTuneInstructDataset(SpecModel):
    """An instruct data set: prompts and responses in a file of ``source`` type."""

    source: DataFormat | None = None
    split: str | None = None
    train_on_input: bool | None = None
    new_system_prompt: str | None = None
    column_map: dict[str, str] | None = None

    @field_validator("column_map")
    @classmethod
    def _cols(cls, v: dict[str, str] | None) -> dict[str, str] | None:
        if v and set(v) - {"input", "output"}:
            raise ValueError(
                fix(
                    f"column_map keys must be 'input' and/or 'output' (got {sorted(v)}).",
                    "map 'input'/'output' to your data set's column names.",
                )
            )
        return v


class TorchTuneConfig(SpecModel):
    """TorchTune fine-tuning settings (the runtime holds the recipe)."""

    dtype: DataType | None = None
    batch_size: int | None = Field(default=None, ge=1)
    epochs: int | None = Field(default=None, ge=1)
    loss: Loss | None = None
    num_nodes: int | None = Field(default=None, ge=1)
    peft_config: LoraConfig | None = None
    dataset_preprocess_config: TorchTuneInstructDataset | None = None
    resources_per_node: Resources = None


class BuiltinTrainer(SpecModel):
    """A trainer whose program lives in the runtime; only its settings are given
    (SDK ``BuiltinTrainer(config=TorchTuneConfig(...))``)."""

    type: Literal["BuiltinTrainer"] = "BuiltinTrainer"
    config: TorchTuneConfig

    def __init__(self, config: TorchTuneConfig | None = None, /, **data: Any) -> None:
        super().__init__(**positional(data, config=config))


def trainer_type(value: Any) -> str | None:
    """A trainer's ``type``; a hand-written mapping that leaves the tag out (a DAG's,
    a pipeline's, a flow's JSON) is known by what it holds: ``func`` a
    ``CustomTrainer``, ``config`` a ``BuiltinTrainer``, ``image`` a
    ``CustomTrainerContainer``."""
    if not isinstance(value, Mapping):
        # A model has its tag; anything else is refused by a model's own check ("give a
        # mapping"), as the plain discriminator did.
        return getattr(value, "type", "CustomTrainer")
    if "type" in value:
        return value["type"]  # type: ignore[no-any-return]
    for field, kind in (
        ("func", "CustomTrainer"),
        ("config", "BuiltinTrainer"),
        ("image", "CustomTrainerContainer"),
    ):
        if field in value:
            return kind
    return None


Trainer = Annotated[
    Annotated[CustomTrainer, Tag("CustomTrainer")]
    | Annotated[CustomTrainerContainer, Tag("CustomTrainerContainer")]
    | Annotated[BuiltinTrainer, Tag("BuiltinTrainer")],
    Discriminator(trainer_type),
]
