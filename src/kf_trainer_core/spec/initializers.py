"""The initializers of the training spec: where the dataset and the model come from
(HuggingFace, S3, a DataCache or any URI the runtime's initializer understands)."""

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, Field, field_validator

from kf_trainer_core.base.quoting import shown
from kf_trainer_core.fields import checks
from kf_trainer_core.fields._model import SpecModel, fix
from kf_trainer_core.spec.common import (
    DEFAULT_MODEL_IGNORE_PATTERNS,
    SECRET_NAME_FIX,
    check_env_name,
    check_object_name,
)

# ---------------------------------------------------------------------- initializers


def _no_plain_secret(field: str, secret_key: str) -> AfterValidator:
    """A field check that refuses a credential given in clear text (it would be stored in
    the TrainJob), pointing at the Secret key to use instead."""

    def refuse(value: str | None) -> str | None:
        if value:
            raise ValueError(
                fix(
                    f"`{field}` would be stored in clear text in the TrainJob, readable by "
                    "anyone who can read the job.",
                    f"put it in a Secret (kubectl create secret generic <name> "
                    f"--from-literal={secret_key}=...) and pass secret_ref='<name>'.",
                )
            )
        return value

    return AfterValidator(refuse)


class _Initializer(SpecModel):
    storage_uri: str
    secret_ref: str | None = None
    env: dict[str, str] | None = None
    #: The scheme ``storage_uri`` must have, and an example of the form (None: the
    #: subclass checks it).
    _uri_scheme: ClassVar[tuple[str, str] | None] = None

    @field_validator("storage_uri", mode="before")
    @classmethod
    def _no_credentials(cls, v: Any) -> Any:
        # Before every other check, so that no later message quotes a credential.
        problem = checks.uri_credentials_problem(v, "storage_uri") if isinstance(v, str) else None
        if problem:
            raise ValueError(problem)
        return v

    @field_validator("storage_uri")
    @classmethod
    def _uri(cls, v: str) -> str:
        if len(v) > 2048:
            raise ValueError(fix("storage_uri is longer than 2048 characters.", "shorten it."))
        return v

    @field_validator("storage_uri")
    @classmethod
    def _scheme(cls, v: str) -> str:
        return _require_scheme(v, *cls._uri_scheme) if cls._uri_scheme else v

    @field_validator("secret_ref")
    @classmethod
    def _secret(cls, v: str | None) -> str | None:
        return None if v is None else check_object_name(v, "Secret name", SECRET_NAME_FIX)

    @field_validator("env", mode="before")
    @classmethod
    def _env_in(cls, v: Any) -> Any:
        return checks.env_values(v, allow_refs=False) if isinstance(v, dict) else v

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, str] | None) -> dict[str, str] | None:
        for name in v or {}:
            check_env_name(name)
        checks.check_env(v)
        return v


def _require_scheme(v: str, scheme: str, example: str) -> str:
    if not v.startswith(scheme):
        raise ValueError(
            fix(
                f"storage_uri must start with '{scheme}' (got {shown(v)}).",
                f"write it as '{example}'.",
            )
        )
    if len(v) <= len(scheme):
        raise ValueError(fix("storage_uri names no object.", f"write it as '{example}'."))
    return v


class _HuggingFaceSource(_Initializer):
    """What HuggingFace Hub downloads share: the ``hf://`` URI and the token rule."""

    _uri_scheme = ("hf://", "hf://<org>/<name>")
    access_token: Annotated[str | None, _no_plain_secret("access_token", "ACCESS_TOKEN")] = Field(
        default=None, exclude=True, repr=False
    )

    @field_validator("storage_uri", mode="before")
    @classmethod
    def _add_scheme(cls, v: Any) -> Any:
        # The SDK accepts a bare Hub id ("org/name"); the CRD wants a URI: add the scheme.
        return f"hf://{v}" if isinstance(v, str) and v and "://" not in v else v


class _S3Source(_Initializer):
    """What S3 downloads share: the ``s3://`` URI, endpoint settings and key rules."""

    _uri_scheme = ("s3://", "s3://<bucket>/<path>")
    endpoint: str | None = None
    region: str | None = None
    role_arn: str | None = None
    access_key_id: Annotated[str | None, _no_plain_secret("access_key_id", "ACCESS_KEY_ID")] = (
        Field(default=None, exclude=True, repr=False)
    )
    secret_access_key: Annotated[
        str | None, _no_plain_secret("secret_access_key", "SECRET_ACCESS_KEY")
    ] = Field(default=None, exclude=True, repr=False)


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
                fix(
                    f"{shown(v)} is not cache://<schema>/<table>.",
                    "name one schema and one table.",
                )
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


_SCHEME_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://.+\Z")


class _GenericInitializer(_Initializer):
    @field_validator("storage_uri")
    @classmethod
    def _scheme(cls, v: str) -> str:
        if not _SCHEME_URI.match(v):
            raise ValueError(
                fix(
                    f"{shown(v)} is not a URI.",
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
