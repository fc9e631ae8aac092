"""The upstream default training runtimes, as Trainer's release installs them.

One loader for the test bed: the test server seeds them and the simulated controller's
:func:`install_runtimes` writes them into a store. They are read at run time from the
upstream folder (``shared/upstream/kubeflow-trainer/runtimes``, never copied into the
repository) with the release overlay applied as kustomize applies it: its labels added
to every runtime, its image tags pinned on every container and init container.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import yaml

from kf_trainer_core.emulation.registry import Admission
from kf_trainer_core.k8s.patch import json_copy
from kf_trainer_core.k8s.resources import CLUSTER_TRAINING_RUNTIMES, TRAINING_RUNTIMES
from kf_trainer_core.k8s.status import StatusError

__all__ = ["install_runtimes", "load_upstream_runtimes"]

JSON = dict[str, Any]
_log = logging.getLogger(__name__)

_KINDS = ("ClusterTrainingRuntime", "TrainingRuntime")
_OVERLAY = "overlays-runtimes-kustomization.yaml"
_CACHE: dict[tuple[str, int], list[JSON]] = {}


def load_upstream_runtimes(upstream: Path) -> list[JSON]:
    """The default (Cluster)TrainingRuntimes under ``upstream`` with the overlay
    applied, in file order. Parsed once per folder state; each call returns fresh
    copies that callers may edit."""
    folder = Path(upstream) / "kubeflow-trainer" / "runtimes"
    overlay_path = folder / _OVERLAY
    stamp = max((p.stat().st_mtime_ns for p in folder.rglob("*.yaml")), default=0)
    key = (str(folder.resolve()), stamp)
    cached = _CACHE.get(key)
    if cached is None:
        cached = _CACHE[key] = _load(folder, overlay_path)
    return [json_copy(doc) for doc in cached]


def _load(folder: Path, overlay_path: Path) -> list[JSON]:
    tags: dict[str, str] = {}
    labels: dict[str, str] = {}
    if overlay_path.is_file():
        overlay = yaml.safe_load(overlay_path.read_text()) or {}
        for image in overlay.get("images") or []:
            if isinstance(image, dict) and image.get("name") and image.get("newTag"):
                tags[str(image["name"])] = str(image["newTag"])
        for entry in overlay.get("labels") or []:
            if isinstance(entry, dict):
                labels.update({str(k): str(v) for k, v in (entry.get("pairs") or {}).items()})
    runtimes: list[JSON] = []
    for path in sorted(folder.rglob("*.yaml")):
        if path == overlay_path:
            continue
        for doc in yaml.safe_load_all(path.read_text()):
            if not isinstance(doc, dict) or doc.get("kind") not in _KINDS:
                continue
            meta = doc.setdefault("metadata", {})
            meta["labels"] = {**(meta.get("labels") or {}), **labels}
            _pin_images(doc, tags)
            runtimes.append(doc)
    return runtimes


def _pin_images(node: Any, tags: dict[str, str]) -> None:
    # kustomize's image transformer: every containers[]/initContainers[] image, at any
    # depth (a runtime nests them in its JobSet template), that names a listed image.
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("containers", "initContainers") and isinstance(value, list):
                for container in value:
                    image = container.get("image") if isinstance(container, dict) else None
                    if isinstance(image, str) and image in tags:
                        container["image"] = f"{image}:{tags[image]}"
            _pin_images(value, tags)
    elif isinstance(node, list):
        for value in node:
            _pin_images(value, tags)


def install_runtimes(
    store: Any,
    upstream: Path | None = None,
    *,
    find: bool = True,
    admission: Admission | None = None,
) -> list[str]:
    """Create (or replace) the Trainer v2.3.0 default ClusterTrainingRuntimes in
    ``store`` (a :class:`~kf_trainer_core.testing.store.Store`), read at run time from
    the upstream folder, with the release overlay applied (image tags ``v2.3.0``, label
    ``trainer.kubeflow.org/webhook-validation: disabled``); without that folder, the
    suite's built-in definitions of them (without ``upstream``, the folder is looked for
    with :func:`~kf_trainer_core.testing.crd.find_upstream` unless ``find`` is False).
    ``admission`` checks each created one as the API server would (the test server's
    CRD checks): one it refuses is stored unchecked, with a warning. Returns the
    runtime names."""
    from kf_trainer_core.testing.builtin_runtimes import builtin_runtimes
    from kf_trainer_core.testing.crd import find_upstream

    root = upstream or (find_upstream() if find else None)
    # Without a folder of upstream runtimes: the suite's own definitions of them.
    docs = load_upstream_runtimes(Path(root)) if root is not None else builtin_runtimes()
    names: list[str] = []
    for doc in docs:
        meta = doc["metadata"]
        res = CLUSTER_TRAINING_RUNTIMES if doc["kind"] == _KINDS[0] else TRAINING_RUNTIMES
        namespace = meta.get("namespace")
        try:
            store.create(res, doc, namespace=namespace, admission=admission)
        except StatusError as exc:
            if exc.reason == "AlreadyExists":
                store.update(res, doc, check_rv=False)
            elif admission is not None:
                _log.warning("runtime %s rejected (%s); stored unchecked", meta.get("name"), exc)
                store.create(res, doc, namespace=namespace)
            else:
                raise
        names.append(str(meta.get("name")))
    return names
