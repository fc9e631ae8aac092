"""What a TrainJob reads and writes, as lineage data sets named by the OpenLineage naming
spec — plain data, no OpenLineage import.

Inputs come from the job's initializers (the data set and the model it starts from); the
output is the model the training function says it wrote: a function that produces a
model returns a dict with the key :data:`MODEL_URI_KEY` (``"model_uri"``). Each location
becomes a ``(namespace, name)`` pair that other producers of lineage use for the same
place, so that graphs join:

========================================  ===========================  =====================
storage URI                               namespace                    name
========================================  ===========================  =====================
``s3://bucket/path`` (also gs, abfss...)  ``s3://bucket``              ``path``
``hf://org/name`` (data set)              ``https://huggingface.co``   ``datasets/org/name``
``hf://org/name`` (model)                 ``https://huggingface.co``   ``org/name``
``pvc://claim/path``                      ``pvc://<k8s-ns>/claim``     ``path``
``cache://schema/table`` (DataCache)      the table's location         (from metadata_loc)
``file:///data/x``                        ``file``                     ``/data/x``
``scheme://host/path`` (any other)        ``scheme://host``            ``/path``
========================================  ===========================  =====================

Credentials never reach lineage: user info (``user:key@``), query strings (pre-signed
URLs) and fragments are dropped from every URI before it is mapped; Azure's
``container@`` (``abfs``, ``abfss``, ``wasb``, ``wasbs``) is the container's name, not a
credential, and stays (without anything after a ``:``).

The Airflow operator turns this data into OpenLineage objects
(:mod:`kf_trainer_airflow.lineage`); the builder stamps the inputs onto the TrainJob as
the :data:`LINEAGE_INPUTS_ANNOTATION` annotation, so other tools read them from the
cluster.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from kf_trainer_core.k8s.resources import TRAINJOBS

#: The key of a training function's returned dict that names the model it wrote.
MODEL_URI_KEY = "model_uri"
#: The TrainJob annotation holding its lineage inputs (compact JSON list).
LINEAGE_INPUTS_ANNOTATION = "kf-trainer-suite/lineage-inputs"
#: Where the HuggingFace Hub serves models and data sets (``HF_ENDPOINT`` overrides it).
HF_HUB = "https://huggingface.co"
#: Object stores whose namespace is ``scheme://bucket`` and whose names have no leading ``/``.
#: Azure's schemes name the container before ``@``: ``abfss://container@account.dfs...``.
_AZURE_SCHEMES = frozenset({"abfs", "abfss", "wasb", "wasbs"})
_BUCKET_SCHEMES = frozenset({"s3", "s3a", "s3n", "gs", "gcs", "abfs", "abfss", "wasb", "wasbs"})
_REDACTED = "***"


@dataclass(frozen=True)
class LineageDataset:
    """One data set or model a job reads or writes.

    :ivar namespace: the data source (OpenLineage naming spec).
    :ivar name: the data set within it.
    :ivar uri: the location as written, credentials removed.
    :ivar role: ``"dataset"`` or ``"model"``.
    :ivar source: where it was named: an initializer's type, or ``result.model_uri``.
    :ivar symlinks: other names of the same data: ``(namespace, name, type)``.
    """

    namespace: str
    name: str
    uri: str
    role: str
    source: str
    symlinks: tuple[tuple[str, str, str], ...] = field(default=())

    def as_dict(self) -> dict[str, Any]:
        """The JSON form (the annotation's items)."""
        data: dict[str, Any] = {
            "namespace": self.namespace,
            "name": self.name,
            "uri": self.uri,
            "role": self.role,
            "source": self.source,
        }
        if self.symlinks:
            data["symlinks"] = [
                {"namespace": ns, "name": name, "type": kind} for ns, name, kind in self.symlinks
            ]
        return data


def redact_uri(uri: str) -> str:
    """``uri`` without user info, query string or fragment (where credentials and
    pre-signed signatures live); ``***`` for text that cannot be read as a URI."""
    try:
        parts = urlsplit(uri)
    except ValueError:
        return _REDACTED
    if not parts.scheme:
        return uri.split("?", 1)[0].split("#", 1)[0]
    user, at, netloc = parts.netloc.rpartition("@")
    if at and parts.scheme.lower() in _AZURE_SCHEMES and user:
        # ``container@account...``: the container is part of the data set's name (as in
        # OpenLineage's naming), not a credential; a password after ':' still goes.
        netloc = f"{user.split(':', 1)[0]}@{netloc}"
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def dataset_of_uri(
    uri: str,
    *,
    role: str,
    source: str,
    k8s_namespace: str | None = None,
    hf_endpoint: str | None = None,
) -> LineageDataset:
    """The lineage data set of a storage URI (see the module's table)."""
    clean = redact_uri(uri)
    parts = urlsplit(clean)
    scheme = parts.scheme.lower()
    host = parts.netloc
    path = parts.path
    if scheme in _BUCKET_SCHEMES:
        namespace, name = f"{scheme}://{host}", path.lstrip("/") or "/"
    elif scheme == "hf":
        hub = (hf_endpoint or HF_HUB).rstrip("/")
        repo = f"{host}{path}".strip("/")
        namespace, name = hub, f"datasets/{repo}" if role == "dataset" else repo
    elif scheme == "pvc":
        # A claim belongs to a Kubernetes namespace: the same claim name elsewhere is
        # other storage.
        namespace = f"pvc://{k8s_namespace}/{host}" if k8s_namespace else f"pvc://{host}"
        name = path.lstrip("/") or "/"
    elif scheme == "file":
        namespace, name = "file", path or "/"
    elif scheme and host:
        namespace, name = f"{scheme}://{host}", path or "/"
    else:
        namespace, name = scheme or "unknown", clean.split("://", 1)[-1]
    return LineageDataset(namespace, name, clean, role, source)


def _data_cache(item: Any, k8s_namespace: str | None) -> LineageDataset:
    """A DataCache table: named by where the Iceberg table lives (its metadata file's
    directory's parent), with ``schema.table`` as a symlink of type ``TABLE``."""
    schema_table = str(item.storage_uri)[len("cache://") :].replace("/", ".")
    location = redact_uri(str(item.metadata_loc))
    head, sep, _ = location.rpartition("/metadata/")
    table_location = head if sep else location.rsplit("/", 1)[0]
    if "://" in table_location:
        found = dataset_of_uri(
            table_location, role="dataset", source=type(item).__name__, k8s_namespace=k8s_namespace
        )
    else:
        found = LineageDataset(
            "file", table_location or "/", table_location, "dataset", type(item).__name__
        )
    cache_ns = f"cache://{k8s_namespace}" if k8s_namespace else "cache://"
    link = (cache_ns, schema_table, "TABLE")
    return LineageDataset(
        found.namespace,
        found.name,
        redact_uri(str(item.storage_uri)),
        "dataset",
        found.source,
        (link,),
    )


def _hf_endpoint(item: Any) -> str | None:
    env = getattr(item, "env", None) or {}
    value = env.get("HF_ENDPOINT") if isinstance(env, Mapping) else None
    return redact_uri(value) if isinstance(value, str) and value else None


def spec_inputs(spec: Any, *, k8s_namespace: str | None = None) -> list[LineageDataset]:
    """The data sets a :class:`~kf_trainer_core.spec.TrainJobSpec` reads: its data-set
    and model initializers' storage, in that order (none without initializers)."""
    from kf_trainer_core.spec import DataCacheInitializer

    initializer = getattr(spec, "initializer", None)
    found: list[LineageDataset] = []
    for role in ("dataset", "model"):
        item = getattr(initializer, role, None) if initializer is not None else None
        if item is None:
            continue
        if isinstance(item, DataCacheInitializer):
            found.append(_data_cache(item, k8s_namespace))
            continue
        found.append(
            dataset_of_uri(
                str(item.storage_uri),
                role=role,
                source=type(item).__name__,
                k8s_namespace=k8s_namespace,
                hf_endpoint=_hf_endpoint(item),
            )
        )
    return found


#: Longest ``model_uri`` a result may name for lineage.
_RESULT_URI_LIMIT = 2048


def result_outputs(result: Any, *, k8s_namespace: str | None = None) -> list[LineageDataset]:
    """The model a training function's returned value names under :data:`MODEL_URI_KEY`
    (nothing when it returns no such string)."""
    if not isinstance(result, Mapping):
        return []
    uri = result.get(MODEL_URI_KEY)
    if not isinstance(uri, str) or "://" not in uri:
        return []
    if len(uri) > _RESULT_URI_LIMIT or not uri.isprintable():
        # The job's own text: a URI with control characters or megabytes long names no
        # data set, and must not reach a lineage backend as one.
        from kf_trainer_core.base.untrusted import warn_once

        warn_once("lineage", f"ignored a {MODEL_URI_KEY} that is not a printable URI")
        return []
    return [
        dataset_of_uri(
            uri, role="model", source=f"result.{MODEL_URI_KEY}", k8s_namespace=k8s_namespace
        )
    ]


def inputs_annotation(spec: Any, *, k8s_namespace: str | None = None) -> str | None:
    """The :data:`LINEAGE_INPUTS_ANNOTATION` value (compact JSON), or ``None`` when the
    job reads nothing through initializers."""
    found = spec_inputs(spec, k8s_namespace=k8s_namespace)
    if not found:
        return None
    return json.dumps([d.as_dict() for d in found], separators=(",", ":"), sort_keys=True)


def run_facet(
    *,
    name: str | None,
    namespace: str | None,
    runtime: str | None,
    runtime_kind: str | None = None,
    uid: str | None = None,
    status: str | None = None,
) -> dict[str, Any]:
    """The TrainJob as a run facet's fields: what it is (``apiVersion``/``kind``/``uid``),
    where (``namespace``/``name``) and what it ran on (``runtime``). Unknown values are
    left out."""
    data: dict[str, Any] = {
        "apiVersion": TRAINJOBS.api_version,
        "kind": TRAINJOBS.kind,
        "name": name,
        "namespace": namespace,
        "uid": uid,
        "runtime": runtime,
        "runtimeKind": runtime_kind,
        "status": status,
    }
    return {k: v for k, v in data.items() if v is not None}
