"""The pieces every part of the training spec shares: defaults, field checks, runtime and
secret references."""

from __future__ import annotations

import json
import re
from enum import Enum
from typing import Any

from pydantic import field_validator

from kf_trainer_core.base.quoting import shown
from kf_trainer_core.fields import checks
from kf_trainer_core.fields._model import SpecModel, fix

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

QUANTITY = checks.QUANTITY
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*\Z")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)\Z")
DNS_SUBDOMAIN = checks.DNS_SUBDOMAIN
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?\Z")


#: The fix for a Secret's name that is not one.
SECRET_NAME_FIX = "use a lowercase DNS subdomain name."

# --------------------------------------------------------------------------- helpers


def check_env_name(name: str) -> str:
    if not name or not _ENV_NAME.match(name):
        raise ValueError(
            fix(
                f"{shown(name)} is not a valid environment variable name.",
                "use letters, digits, '_', '-' or '.', not starting with a digit.",
            )
        )
    return name


def check_object_name(v: str, what: str, example: str, limit: int = 253) -> str:
    """``v`` if it can name a Kubernetes object (a DNS subdomain name of at most
    ``limit`` characters); else a ``ValueError`` saying it is not a valid ``what``, with
    ``example`` as the fix."""
    if len(v) > limit or not DNS_SUBDOMAIN.match(v):
        raise ValueError(fix(f"{shown(v)} is not a valid {what}.", example))
    return v


def check_label_key(key: str, what: str) -> None:
    prefix, _, name = key.rpartition("/")
    ok = bool(name) and len(name) <= 63 and bool(_LABEL_NAME.match(name))
    if prefix:
        ok = ok and len(prefix) <= 253 and bool(DNS_SUBDOMAIN.match(prefix))
    if not ok:
        raise ValueError(
            fix(
                f"{shown(key)} is not a valid {what} key.",
                "use an optional DNS-subdomain prefix and '/', then a name of at most 63 "
                "letters, digits, '-', '_' or '.', starting and ending alphanumeric.",
            )
        )


def check_json(value: Any, what: str) -> None:
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


def positional(data: dict[str, Any], **given: Any) -> dict[str, Any]:
    """The keyword fields of a model whose main field may also be passed positionally
    (``Name("job")``, ``Labels({...})``): the positional value, when given, wins."""
    data.update({key: value for key, value in given.items() if value is not None})
    return data


def positive(value: int | None, what: str) -> int | None:
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
        return check_object_name(
            v,
            "runtime name",
            "use the name of an installed runtime, e.g. 'torch-distributed' "
            "(`kf-trainer runtimes list` shows them).",
        )


class SecretKeyRef(SpecModel):
    """One key of a Kubernetes Secret, used for credentials in environment variables."""

    name: str
    key: str
    optional: bool | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return check_object_name(v, "Secret name", SECRET_NAME_FIX)


EnvValue = str | SecretKeyRef


def env_dict(value: Any) -> Any:
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
