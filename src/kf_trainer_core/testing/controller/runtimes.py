"""Loading the upstream default runtimes into a store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from kf_trainer_core.testing.crd import find_upstream
from kf_trainer_core.testing.store import (
    CLUSTER_TRAINING_RUNTIMES,
    TRAINING_RUNTIMES,
    Store,
    StoreError,
    json_copy,
)

_YAML_CACHE: dict[tuple[str, int], list[Any]] = {}


def _yaml_docs(path: Path) -> list[Any]:
    """The documents of a YAML file, parsed once per (path, mtime); a fresh copy each
    call since callers edit them."""
    key = (str(path.resolve()), path.stat().st_mtime_ns)
    docs = _YAML_CACHE.get(key)
    if docs is None:
        docs = _YAML_CACHE[key] = list(yaml.safe_load_all(path.read_text()))
    return [json_copy(d) for d in docs]


def install_runtimes(store: Store, upstream: Path | None = None) -> list[str]:
    """Create (or replace) the Trainer v2.3.0 default ClusterTrainingRuntimes in
    ``store``, read at run time from the upstream folder, with the release overlay
    applied (image tags ``v2.3.0``, label ``trainer.kubeflow.org/webhook-validation:
    disabled``). Returns the runtime names."""
    root = upstream or find_upstream()
    if root is None:
        raise FileNotFoundError(
            "the upstream data folder (shared/upstream/kubeflow-trainer) was not found; "
            "set KF_TRAINER_UPSTREAM"
        )
    folder = Path(root) / "kubeflow-trainer" / "runtimes"
    overlay_path = folder / "overlays-runtimes-kustomization.yaml"
    tags: dict[str, str] = {}
    extra_labels: dict[str, str] = {}
    if overlay_path.is_file():
        overlay = yaml.safe_load(overlay_path.read_text()) or {}
        for image in overlay.get("images") or []:
            if isinstance(image, dict) and image.get("name") and image.get("newTag"):
                tags[str(image["name"])] = str(image["newTag"])
        for entry in overlay.get("labels") or []:
            if isinstance(entry, dict):
                extra_labels.update({str(k): str(v) for k, v in (entry.get("pairs") or {}).items()})
    names: list[str] = []
    for path in sorted(folder.rglob("*.yaml")):
        if path == overlay_path:
            continue
        for doc in _yaml_docs(path):
            if not isinstance(doc, dict) or doc.get("kind") not in (
                "ClusterTrainingRuntime",
                "TrainingRuntime",
            ):
                continue
            meta = doc.setdefault("metadata", {})
            meta["labels"] = {**(meta.get("labels") or {}), **extra_labels}
            for rj in ((doc.get("spec") or {}).get("template") or {}).get("spec", {}).get(
                "replicatedJobs"
            ) or []:
                pspec = (((rj.get("template") or {}).get("spec") or {}).get("template") or {}).get(
                    "spec"
                ) or {}
                for c in [*(pspec.get("containers") or []), *(pspec.get("initContainers") or [])]:
                    image = str(c.get("image") or "")
                    if image in tags:
                        c["image"] = f"{image}:{tags[image]}"
            res = (
                CLUSTER_TRAINING_RUNTIMES
                if doc["kind"] == "ClusterTrainingRuntime"
                else TRAINING_RUNTIMES
            )
            try:
                store.create(res, doc, namespace=meta.get("namespace"))
            except StoreError as exc:
                if exc.reason != "AlreadyExists":
                    raise
                store.update(res, doc, check_rv=False)
            names.append(str(meta.get("name")))
    return names
