"""Built-in CRDs: structural schemas derived at run time from the ``kubeflow-trainer-api``
models (the ``testing`` extra installs them), for a test server with no folder of
upstream CRDs.

What this level checks: every field's name and type (unknown fields are pruned or
refused as the API server does), required fields, and int-or-string quantities. What it
does not: the CRDs' CEL rules, enums, patterns and defaults, which only the CRD files
carry — name a folder of them with ``$KF_TRAINER_UPSTREAM`` for full fidelity, or test
against a live cluster (``docs/testing.md``). No CRD file is copied into the suite: the
schemas are computed from the models the Kubeflow project publishes.
"""

from __future__ import annotations

import contextlib
import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Any

from kf_trainer_core.k8s.resources import (
    CLUSTER_TRAINING_RUNTIMES,
    JOBSETS,
    TRAINING_RUNTIMES,
    TRAINJOBS,
    Resource,
)
from kf_trainer_core.testing.crd.definition import CRDSchema

JSON = dict[str, Any]

#: Each resource and the model class of its objects.
_KINDS = (
    (TRAINJOBS, "TrainerV1alpha1TrainJob"),
    (TRAINING_RUNTIMES, "TrainerV1alpha1TrainingRuntime"),
    (CLUSTER_TRAINING_RUNTIMES, "TrainerV1alpha1ClusterTrainingRuntime"),
    (JOBSETS, "JobsetV1alpha2JobSet"),
)

#: Bumped when the derivation changes (the cache file's name carries it).
_FORMAT = 1

# The generated models wrap int-or-string values (quantities, ports) in an object whose
# fields are these: in a CRD they are `x-kubernetes-int-or-string`.
_ONE_OF_FIELDS = {"actual_instance", "one_of_schemas"}


def _structural(node: Any, defs: dict[str, Any], depth: int = 0) -> JSON:
    """One JSON-schema node of the models as a structural OpenAPI v3 node."""
    if depth > 60:  # a recursive type (none in these models): accept anything below
        return {"x-kubernetes-preserve-unknown-fields": True}
    if not isinstance(node, dict):
        return {"x-kubernetes-preserve-unknown-fields": True}
    if "$ref" in node:
        return _structural(defs[str(node["$ref"]).rsplit("/", 1)[-1]], defs, depth + 1)
    for key in ("anyOf", "oneOf"):
        if key in node:
            options = [o for o in node[key] if o.get("type") != "null"]
            if len(options) == 1:
                return _structural(options[0], defs, depth + 1)
            kinds = {o.get("type") for o in options}
            if kinds <= {"integer", "string", "number"}:
                return {"x-kubernetes-int-or-string": True}
            return {"x-kubernetes-preserve-unknown-fields": True}
    props = node.get("properties")
    if isinstance(props, dict) and _ONE_OF_FIELDS & set(props):
        return {"x-kubernetes-int-or-string": True}
    kind = node.get("type")
    if kind == "object" or isinstance(props, dict):
        out: JSON = {"type": "object"}
        if isinstance(props, dict) and props:
            out["properties"] = {
                str(name): _structural(sub, defs, depth + 1) for name, sub in props.items()
            }
            required = [str(r) for r in node.get("required") or [] if r in props]
            if required:
                out["required"] = required
        extra = node.get("additionalProperties")
        if isinstance(extra, dict):
            out["additionalProperties"] = _structural(extra, defs, depth + 1)
        elif "properties" not in out:
            out["x-kubernetes-preserve-unknown-fields"] = True
        return out
    if kind == "array":
        return {"type": "array", "items": _structural(node.get("items") or {}, defs, depth + 1)}
    if kind in ("string", "integer", "number", "boolean"):
        out = {"type": kind}
        if node.get("format") == "date-time":
            out["format"] = "date-time"
        return out
    return {"x-kubernetes-preserve-unknown-fields": True}


def _crd(res: Resource, schema: JSON, defs: JSON) -> JSON:
    root = _structural(schema, defs)
    props = root.setdefault("properties", {})
    # ObjectMeta is the API server's to check (as in every CRD): an object here.
    props["metadata"] = {"type": "object"}
    props["apiVersion"] = {"type": "string"}
    props["kind"] = {"type": "string"}
    root.pop("required", None)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{res.plural}.{res.group}"},
        "spec": {
            "group": res.group,
            "names": {
                "kind": res.kind,
                "listKind": f"{res.kind}List",
                "plural": res.plural,
                "singular": res.kind.lower(),
            },
            "scope": "Namespaced" if res.namespaced else "Cluster",
            "versions": [
                {
                    "name": res.version,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": root},
                    "subresources": {"status": {}},
                }
            ],
        },
    }


def models_available() -> bool:
    """Whether the ``kubeflow-trainer-api`` models are installed."""
    import importlib.util

    return importlib.util.find_spec("kubeflow_trainer_api") is not None


def derive_crds() -> list[JSON]:
    """The four CRDs as dicts, derived from the models now (importing the models'
    package, some 400 modules, is most of its cost)."""
    from kubeflow_trainer_api import models
    from pydantic.json_schema import models_json_schema

    classes = [getattr(models, model) for _, model in _KINDS]
    refs, top = models_json_schema([(c, "validation") for c in classes], by_alias=True)
    defs = top.get("$defs") or {}
    return [
        _crd(res, refs[(cls, "validation")], defs)
        for (res, _), cls in zip(_KINDS, classes, strict=True)
    ]


def _cache_file() -> Path | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        api = version("kubeflow-trainer-api")
    except PackageNotFoundError:
        return None
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "kf-trainer" / f"crds-kubeflow-trainer-api-{api}-v{_FORMAT}.json"


@lru_cache(maxsize=1)
def builtin_crds() -> dict[str, CRDSchema]:
    """The TrainJob, TrainingRuntime, ClusterTrainingRuntime and JobSet CRDs derived
    from the ``kubeflow-trainer-api`` models, keyed by CRD name. Derived once per
    version of the models and kept in the user's cache folder
    (``~/.cache/kf-trainer``): the first derivation takes seconds."""
    cache = _cache_file()
    crds: list[JSON] | None = None
    if cache is not None and cache.is_file():
        try:
            crds = json.loads(cache.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            crds = None
    if not isinstance(crds, list):
        crds = derive_crds()
        if cache is not None:
            with contextlib.suppress(OSError):  # a read-only home: derive each time
                cache.parent.mkdir(parents=True, exist_ok=True)
                tmp = cache.with_suffix(f".{os.getpid()}.tmp")
                tmp.write_text(json.dumps(crds), encoding="utf-8")
                os.replace(tmp, cache)
    out: dict[str, CRDSchema] = {}
    for crd in crds:
        schema = CRDSchema.from_dict(crd)
        out[schema.name] = schema
    return out
