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

import json
import re
from collections.abc import Callable
from enum import Enum
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from kf_trainer_core import checks
from kf_trainer_core import function as fn
from kf_trainer_core._model import SpecModel, fix
from kf_trainer_core.checkpoint_storage import Checkpoints
from kf_trainer_core.errors import FieldProblem, SpecError

DEFAULT_RUNTIME = "torch-distributed"
DEFAULT_PIP_INDEX_URLS = ("https://pypi.org/simple",)
DEFAULT_MODEL_IGNORE_PATTERNS = ("*.msgpack", "*.h5", "*.bin", "*.pt", "*.pth")

#: The runtimePatches ``manager`` this suite writes unless told otherwise.
DEFAULT_PATCH_MANAGER = "kf-trainer-suite/patch"
#: Kueue reads the queue of a workload from this label.
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
MANAGED_BY_TRAINER = "trainer.kubeflow.org/trainjob-controller"
MANAGED_BY_MULTIKUEUE = "kueue.x-k8s.io/multikueue"
#: The API server refuses objects whose annotations (keys and values) exceed 256 KiB.
ANNOTATIONS_LIMIT = 256 * 1024

_QUANTITY = checks.QUANTITY
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_RFC1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


# --------------------------------------------------------------------------- helpers


def _check_env_name(name: str) -> str:
    if not name or not _ENV_NAME.match(name):
        raise ValueError(
            fix(
                f"{name!r} is not a valid environment variable name.",
                "use letters, digits, '_', '-' or '.', not starting with a digit.",
            )
        )
    return name


def _check_label_key(key: str, what: str) -> None:
    prefix, _, name = key.rpartition("/")
    ok = bool(name) and len(name) <= 63 and bool(_LABEL_NAME.match(name))
    if prefix:
        ok = ok and len(prefix) <= 253 and bool(_DNS_SUBDOMAIN.match(prefix))
    if not ok:
        raise ValueError(
            fix(
                f"{key!r} is not a valid {what} key.",
                "use an optional DNS-subdomain prefix and '/', then a name of at most 63 "
                "letters, digits, '-', '_' or '.', starting and ending alphanumeric.",
            )
        )


def _check_json(value: Any, what: str) -> None:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(
            fix(
                f"{what} must be JSON-serialisable ({exc}).",
                "pass plain str/int/float/bool/None, lists and dicts with string keys; "
                "turn dates and paths into strings.",
            )
        ) from None


def _positive(value: int | None, what: str) -> int | None:
    if value is not None and value < 1:
        raise ValueError(fix(f"{what} must be at least 1 (got {value}).", f"set {what} >= 1."))
    return value


# ------------------------------------------------------------------------ references


class RuntimeKind(str, Enum):
    """The kind of blueprint a TrainJob names."""

    CLUSTER_TRAINING_RUNTIME = "ClusterTrainingRuntime"
    TRAINING_RUNTIME = "TrainingRuntime"


class RuntimeRef(SpecModel):
    """Reference to a ``ClusterTrainingRuntime`` (default) or namespaced
    ``TrainingRuntime``. A plain string is accepted wherever a ``RuntimeRef`` is."""

    name: str = DEFAULT_RUNTIME
    kind: RuntimeKind = RuntimeKind.CLUSTER_TRAINING_RUNTIME

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not v or len(v) > 253 or not _DNS_SUBDOMAIN.match(v):
            raise ValueError(
                fix(
                    f"{v!r} is not a valid runtime name.",
                    "use the name of an installed runtime, e.g. 'torch-distributed' "
                    "(`kubectl get clustertrainingruntimes`).",
                )
            )
        return v


class SecretKeyRef(SpecModel):
    """One key of a Kubernetes Secret, used for credentials in environment variables."""

    name: str
    key: str
    optional: bool | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _DNS_SUBDOMAIN.match(v) or len(v) > 253:
            raise ValueError(
                fix(f"{v!r} is not a valid Secret name.", "use a lowercase DNS subdomain name.")
            )
        return v


EnvValue = str | SecretKeyRef


def _env_dict(value: Any) -> Any:
    """Accept ``{"NAME": "value"}`` and also the Kubernetes list form
    ``[{"name": ..., "value": ...}]`` (values stringified, like the SDK)."""
    if isinstance(value, list):
        out: dict[str, Any] = {}
        for item in value:
            if not isinstance(item, dict) or "name" not in item:
                raise ValueError(
                    fix("env list entries need a `name`.", "use {'NAME': 'value'} instead.")
                )
            if "valueFrom" in item:
                ref = item["valueFrom"].get("secretKeyRef")
                if ref is None:
                    raise ValueError(
                        fix(
                            "only secretKeyRef is supported in env valueFrom.",
                            "use a SecretKeyRef or a plain value.",
                        )
                    )
                out[item["name"]] = ref
            else:
                out[item["name"]] = item.get("value", "")
        return out
    if isinstance(value, dict):
        return checks.env_values(value, allow_refs=True)
    return value


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
                    f"unknown resource {key!r}.",
                    "use gpu, cpu, memory, storage, mig-<profile> (e.g. mig-1g.5gb) or a "
                    "full extended resource name such as 'amd.com/gpu'.",
                )
            )
        if isinstance(qty, bool) or (isinstance(qty, (int, float)) and qty < 0):
            raise ValueError(
                fix(f"{key}: {qty!r} is not a quantity.", "give e.g. 2, '500m', '16Gi'.")
            )
        if isinstance(qty, str) and not _QUANTITY.match(qty):
            raise ValueError(
                fix(
                    f"{key}: {qty!r} is not a Kubernetes quantity.",
                    "give e.g. 2, '500m', '16Gi' (no spaces; Gi not GB).",
                )
            )
        if (low in {"gpu"} or low.startswith("mig-") or "/" in key) and not checks.whole_quantity(
            qty
        ):
            raise ValueError(
                fix(
                    f"{key}: {qty!r} is not a whole number; GPUs and other extended resources "
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
                        f"{self.ref!r} is not a 'package.module:function' reference.",
                        "fix its form.",
                    )
                )
            module, _, attr = self.ref.rpartition(":")
            problem = checks.module_path_problem(module, "the module") or (
                checks.identifier_problem(attr, "the function")
            )
            if problem:
                raise SpecError.single("ref", *problem.split(checks.FIX, 1))
            if self.name is None:
                object.__setattr__(self, "name", attr)
            problem = checks.identifier_problem(self.name or "", "the name")
            if problem:
                # With embed=False the name is pasted into the program: it must be one
                # Python identifier, or the job would fail (or worse) in the pod.
                raise SpecError.single("name", *problem.split(checks.FIX, 1))
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
    resources_per_node: dict[str, ResourceValue] | None = None
    env: dict[str, EnvValue] | None = None

    @field_validator("num_nodes")
    @classmethod
    def _nodes(cls, v: int | None) -> int | None:
        return _positive(v, "num_nodes")

    @field_validator("resources_per_node")
    @classmethod
    def _res(cls, v: dict[str, ResourceValue] | None) -> dict[str, ResourceValue] | None:
        return _resources(v)

    @field_validator("env", mode="before")
    @classmethod
    def _env_in(cls, v: Any) -> Any:
        return _env_dict(v)

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, EnvValue] | None) -> dict[str, EnvValue] | None:
        for name in v or {}:
            _check_env_name(name)
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
        problem = checks.image_problem(v) if v is not None else None
        if problem:
            raise ValueError(problem)
        return v


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
            _check_json(v, "func_args")
            problem = checks.token_problem(v, "func_args")
            if problem:
                raise ValueError(problem)
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
                text, _, how = problem.partition(checks.FIX)
                raise SpecError.single("func_args", text, how)
        return self

    @field_validator("num_proc_per_node")
    @classmethod
    def _procs(cls, v: int | None) -> int | None:
        return _positive(v, "num_proc_per_node")


class CustomTrainerContainer(_NodeTrainer):
    """Run a container image on every training node (SDK ``CustomTrainerContainer``).
    Combine with the ``TrainerCommand`` / ``TrainerArgs`` options to set what it runs."""

    type: Literal["CustomTrainerContainer"] = "CustomTrainerContainer"
    image: str = Field(min_length=1, max_length=500)
    num_proc_per_node: int | None = None

    def __init__(self, image: str | None = None, /, **data: Any) -> None:
        if image is not None:
            data["image"] = image
        super().__init__(**data)


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
    resources_per_node: dict[str, ResourceValue] | None = None

    @field_validator("resources_per_node")
    @classmethod
    def _res(cls, v: dict[str, ResourceValue] | None) -> dict[str, ResourceValue] | None:
        return _resources(v)


class BuiltinTrainer(SpecModel):
    """A trainer whose program lives in the runtime; only its settings are given
    (SDK ``BuiltinTrainer(config=TorchTuneConfig(...))``)."""

    type: Literal["BuiltinTrainer"] = "BuiltinTrainer"
    config: TorchTuneConfig

    def __init__(self, config: TorchTuneConfig | None = None, /, **data: Any) -> None:
        if config is not None:
            data["config"] = config
        super().__init__(**data)


Trainer = Annotated[
    CustomTrainer | CustomTrainerContainer | BuiltinTrainer, Field(discriminator="type")
]


# ---------------------------------------------------------------------- initializers


def _no_plain_secret(value: str | None, field: str, secret_key: str) -> None:
    if value:
        raise ValueError(
            fix(
                f"`{field}` would be stored in clear text in the TrainJob, readable by anyone "
                "who can read the job.",
                f"put it in a Secret (kubectl create secret generic <name> "
                f"--from-literal={secret_key}=...) and pass secret_ref='<name>'.",
            )
        )


class _Initializer(SpecModel):
    storage_uri: str
    secret_ref: str | None = None
    env: dict[str, str] | None = None

    @field_validator("storage_uri")
    @classmethod
    def _uri(cls, v: str) -> str:
        if len(v) > 2048:
            raise ValueError(fix("storage_uri is longer than 2048 characters.", "shorten it."))
        return v

    @field_validator("secret_ref")
    @classmethod
    def _secret(cls, v: str | None) -> str | None:
        if v is not None and (not _DNS_SUBDOMAIN.match(v) or len(v) > 253):
            raise ValueError(
                fix(f"{v!r} is not a valid Secret name.", "use a lowercase DNS subdomain name.")
            )
        return v

    @field_validator("env", mode="before")
    @classmethod
    def _env_in(cls, v: Any) -> Any:
        return checks.env_values(v, allow_refs=False) if isinstance(v, dict) else v

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, str] | None) -> dict[str, str] | None:
        for name in v or {}:
            _check_env_name(name)
        checks.check_env(v)
        return v


def _require_scheme(v: str, scheme: str, example: str) -> str:
    if not v.startswith(scheme):
        raise ValueError(
            fix(f"storage_uri must start with '{scheme}' (got {v!r}).", f"write it as '{example}'.")
        )
    if len(v) <= len(scheme):
        raise ValueError(fix("storage_uri names no object.", f"write it as '{example}'."))
    return v


def _hf_uri(v: Any) -> Any:
    # The SDK accepts a bare Hub id ("org/name"); the CRD wants a URI, so add the scheme.
    if isinstance(v, str) and "://" not in v and v:
        return f"hf://{v}"
    return v


class _HuggingFaceSource(_Initializer):
    """What HuggingFace Hub downloads share: the ``hf://`` URI and the token rule."""

    access_token: str | None = Field(default=None, exclude=True, repr=False)

    @field_validator("storage_uri", mode="before")
    @classmethod
    def _add_scheme(cls, v: Any) -> Any:
        return _hf_uri(v)

    @field_validator("storage_uri")
    @classmethod
    def _scheme(cls, v: str) -> str:
        return _require_scheme(v, "hf://", "hf://<org>/<name>")

    @field_validator("access_token")
    @classmethod
    def _token(cls, v: str | None) -> str | None:
        _no_plain_secret(v, "access_token", "ACCESS_TOKEN")
        return v


class _S3Source(_Initializer):
    """What S3 downloads share: the ``s3://`` URI, endpoint settings and key rules."""

    endpoint: str | None = None
    region: str | None = None
    role_arn: str | None = None
    access_key_id: str | None = Field(default=None, exclude=True, repr=False)
    secret_access_key: str | None = Field(default=None, exclude=True, repr=False)

    @field_validator("storage_uri")
    @classmethod
    def _scheme(cls, v: str) -> str:
        return _require_scheme(v, "s3://", "s3://<bucket>/<path>")

    @field_validator("access_key_id")
    @classmethod
    def _key(cls, v: str | None) -> str | None:
        _no_plain_secret(v, "access_key_id", "ACCESS_KEY_ID")
        return v

    @field_validator("secret_access_key")
    @classmethod
    def _secret_key(cls, v: str | None) -> str | None:
        _no_plain_secret(v, "secret_access_key", "SECRET_ACCESS_KEY")
        return v


class HuggingFaceDatasetInitializer(_HuggingFaceSource):
    """Download a data set from the HuggingFace Hub (``hf://org/name``). A private one
    needs a Secret with key ``ACCESS_TOKEN`` named by ``secret_ref``."""

    type: Literal["HuggingFaceDatasetInitializer"] = "HuggingFaceDatasetInitializer"
    ignore_patterns: list[str] | None = None


class S3DatasetInitializer(_S3Source):
    """Download a data set from S3-compatible storage (``s3://bucket/path``). Keys go in
    a Secret with ``ACCESS_KEY_ID`` and ``SECRET_ACCESS_KEY``, named by ``secret_ref``."""

    type: Literal["S3DatasetInitializer"] = "S3DatasetInitializer"
    ignore_patterns: list[str] | None = None


class DataCacheInitializer(_Initializer):
    """Serve an Iceberg table through the distributed data cache
    (``cache://<schema>/<table>``)."""

    type: Literal["DataCacheInitializer"] = "DataCacheInitializer"
    metadata_loc: str
    num_data_nodes: int
    head_cpu: str | None = None
    head_mem: str | None = None
    worker_cpu: str | None = None
    worker_mem: str | None = None
    iam_role: str | None = None

    @field_validator("storage_uri")
    @classmethod
    def _scheme(cls, v: str) -> str:
        _require_scheme(v, "cache://", "cache://<schema>/<table>")
        if len(v[len("cache://") :].split("/")) != 2:
            raise ValueError(
                fix(f"{v!r} is not cache://<schema>/<table>.", "name one schema and one table.")
            )
        return v

    @field_validator("num_data_nodes")
    @classmethod
    def _nodes(cls, v: int) -> int:
        if v <= 1:
            raise ValueError(
                fix(f"num_data_nodes must be greater than 1 (got {v}).", "use 2 or more.")
            )
        return v


class HuggingFaceModelInitializer(_HuggingFaceSource):
    """Download a model from the HuggingFace Hub (``hf://org/name``)."""

    type: Literal["HuggingFaceModelInitializer"] = "HuggingFaceModelInitializer"
    ignore_patterns: list[str] | None = Field(
        default_factory=lambda: list(DEFAULT_MODEL_IGNORE_PATTERNS)
    )


class S3ModelInitializer(_S3Source):
    """Download a model from S3-compatible storage (``s3://bucket/path``)."""

    type: Literal["S3ModelInitializer"] = "S3ModelInitializer"
    ignore_patterns: list[str] | None = Field(
        default_factory=lambda: list(DEFAULT_MODEL_IGNORE_PATTERNS)
    )


_SCHEME_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://.+$")


class _GenericInitializer(_Initializer):
    @field_validator("storage_uri")
    @classmethod
    def _scheme(cls, v: str) -> str:
        if not _SCHEME_URI.match(v):
            raise ValueError(
                fix(
                    f"{v!r} is not a URI.",
                    "write scheme://..., e.g. file:///data/train or s3://b/p.",
                )
            )
        return v


class DatasetInitializer(_GenericInitializer):
    """Any data-set URI the runtime's initializer understands (``file://`` paths are
    copied by the local backend); options go in ``env``."""

    type: Literal["DatasetInitializer"] = "DatasetInitializer"


class ModelInitializer(_GenericInitializer):
    """Any model URI the runtime's initializer understands (``file://`` paths are copied
    by the local backend); options go in ``env``."""

    type: Literal["ModelInitializer"] = "ModelInitializer"


DatasetInit = Annotated[
    HuggingFaceDatasetInitializer
    | S3DatasetInitializer
    | DataCacheInitializer
    | DatasetInitializer,
    Field(discriminator="type"),
]
ModelInit = Annotated[
    HuggingFaceModelInitializer | S3ModelInitializer | ModelInitializer,
    Field(discriminator="type"),
]


class Initializer(SpecModel):
    """Data set and model to fetch before training, into ``/workspace/dataset`` and
    ``/workspace/model``."""

    dataset: DatasetInit | None = None
    model: ModelInit | None = None


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
            _check_env_name(str(entry.get("name", "")))
            if "value" not in entry and "valueFrom" not in entry:
                raise ValueError(
                    fix(f"env {entry.get('name')!r} has neither value nor valueFrom.", "give one.")
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
                        f"volume mount {m!r} needs a `name` and an absolute `mountPath`.",
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
            _check_label_key(key, "label")
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
        if name is not None:
            data["name"] = name
        super().__init__(**data)


class Labels(_Option):
    """Labels on the TrainJob object (they do not reach the pods: use a RuntimePatch
    for pod labels)."""

    type: Literal["Labels"] = "Labels"
    labels: dict[str, str]

    def __init__(self, labels: dict[str, str] | None = None, /, **data: Any) -> None:
        if labels is not None:
            data["labels"] = labels
        super().__init__(**data)

    @field_validator("labels")
    @classmethod
    def _labels(cls, v: dict[str, str]) -> dict[str, str]:
        checks.refuse_tokens(v, "a label value")  # first: the checks below quote the value
        for key, value in v.items():
            _check_label_key(key, "label")
            if len(value) > 63 or not _LABEL_VALUE.match(value):
                raise ValueError(
                    fix(
                        f"label {key}={value!r} has an invalid value.",
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
        if annotations is not None:
            data["annotations"] = annotations
        super().__init__(**data)

    @field_validator("annotations")
    @classmethod
    def _ann(cls, v: dict[str, str]) -> dict[str, str]:
        for key in v:
            _check_label_key(key, "annotation")
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


class TrainerCommand(_Option):
    """The trainer container's command (``CustomTrainerContainer`` only)."""

    type: Literal["TrainerCommand"] = "TrainerCommand"
    command: list[str] = Field(min_length=1, max_length=128)

    def __init__(self, command: list[str] | None = None, /, **data: Any) -> None:
        if command is not None:
            data["command"] = command
        super().__init__(**data)

    @field_validator("command")
    @classmethod
    def _command(cls, v: list[str]) -> list[str]:
        return checks.refuse_tokens(v, "the command")


class TrainerArgs(_Option):
    """The trainer container's arguments (``CustomTrainerContainer`` only)."""

    type: Literal["TrainerArgs"] = "TrainerArgs"
    args: list[str] = Field(max_length=128)

    def __init__(self, args: list[str] | None = None, /, **data: Any) -> None:
        if args is not None:
            data["args"] = args
        super().__init__(**data)

    @field_validator("args")
    @classmethod
    def _args(cls, v: list[str]) -> list[str]:
        return checks.refuse_tokens(v, "the arguments")


class ActiveDeadlineSeconds(_Option):
    """Seconds after creation before the Trainer fails the job (``DeadlineExceeded``)."""

    type: Literal["ActiveDeadlineSeconds"] = "ActiveDeadlineSeconds"
    seconds: int

    def __init__(self, seconds: int | None = None, /, **data: Any) -> None:
        if seconds is not None:
            data["seconds"] = seconds
        super().__init__(**data)

    @field_validator("seconds", mode="before")
    @classmethod
    def _secs(cls, v: Any) -> Any:
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(
                fix(f"seconds must be a positive integer (got {v!r}).", "use 1 or more.")
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
        if managed_by is not None:
            data["managed_by"] = managed_by
        super().__init__(**data)


class QueueName(_Option):
    """Submit through a Kueue ``LocalQueue``: sets the ``kueue.x-k8s.io/queue-name``
    label; Kueue then suspends and admits the job."""

    type: Literal["QueueName"] = "QueueName"
    queue: str

    def __init__(self, queue: str | None = None, /, **data: Any) -> None:
        if queue is not None:
            data["queue"] = queue
        super().__init__(**data)

    @field_validator("queue")
    @classmethod
    def _queue(cls, v: str) -> str:
        if not _DNS_SUBDOMAIN.match(v) or len(v) > 63:
            raise ValueError(
                fix(
                    f"{v!r} is not a valid LocalQueue name.", "use the queue's name, e.g. 'team-a'."
                )
            )
        return v


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
    | Checkpoints,
    Field(discriminator="type"),
]

_SINGLE_OPTIONS = {
    "Name",
    "TrainerCommand",
    "TrainerArgs",
    "ActiveDeadlineSeconds",
    "Suspend",
    "ManagedBy",
    "QueueName",
    "Checkpoints",
}


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
            if kind in _SINGLE_OPTIONS and kind in seen:
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
                            f"two RuntimePatch options use manager {opt.manager!r}; patches are "
                            "keyed by manager.",
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
        kinds = {o.type for o in options if o.type in _SINGLE_OPTIONS}
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
