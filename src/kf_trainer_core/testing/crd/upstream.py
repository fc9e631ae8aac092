"""Locating the shared folders (the upstream data, the control plane) and loading the
upstream CRDs."""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Final

from kf_trainer_core.testing.crd.definition import CRDSchema

UPSTREAM_ENV: Final = "KF_TRAINER_UPSTREAM"


def find_upstream(start: Path | None = None) -> Path | None:
    """Locate the shared folder of upstream data files (CRDs, default runtimes).

    ``$KF_TRAINER_UPSTREAM`` wins when set (``None`` if it names no folder). Otherwise
    each ancestor of ``start`` (default: this file, then the working directory) is
    checked for a ``shared/upstream`` folder, i.e. ``<repo>/../shared/upstream`` for a
    checkout at ``<parent>/<repo>``. Returns ``None`` when nothing is found.
    """
    return find_shared("upstream", UPSTREAM_ENV, Path.is_dir, start)


def find_shared(
    name: str, env: str, found: Callable[[Path], bool], start: Path | None = None
) -> Path | None:
    """The folder ``$env`` names (``None`` when ``found`` rejects it), else the first
    ``shared/<name>`` that ``found`` accepts in an ancestor of ``start`` (default:
    this file, then the working directory)."""
    named = os.environ.get(env)
    if named:
        path = Path(named).expanduser()
        return path if found(path) else None
    for base in [start] if start is not None else [Path(__file__), Path.cwd()]:
        for folder in (base.resolve(), *base.resolve().parents):
            if found(folder / "shared" / name):
                return folder / "shared" / name
    return None


@lru_cache(maxsize=32)
def _load_cached(path: str, mtime_ns: int) -> CRDSchema:
    del mtime_ns  # part of the cache key only: a changed file is read again
    return CRDSchema.from_file(path)


def load_upstream_crds(
    upstream: Path | None = None, *, branch: str = "v2.3.0"
) -> dict[str, CRDSchema]:
    """The TrainJob, TrainingRuntime, ClusterTrainingRuntime and JobSet CRDs.

    Keyed by CRD name (``trainjobs.trainer.kubeflow.org``, ...). ``branch`` ``"v2.3.0"``
    reads ``kubeflow-trainer/crds``, ``"main"`` the ``kubeflow-trainer/main-*/crds``
    snapshot; JobSet comes from ``jobset/``. ``upstream`` defaults to
    :func:`find_upstream`; ``FileNotFoundError`` if there is none. Results are cached.
    """
    root = upstream if upstream is not None else find_upstream()
    if root is None or not root.is_dir():
        raise FileNotFoundError(
            f"upstream data folder not found (set ${UPSTREAM_ENV} or provide "
            "<repo>/../shared/upstream)"
        )
    trainer = root / "kubeflow-trainer"
    if branch == "v2.3.0":
        crd_dir = trainer / "crds"
    elif branch == "main":
        snapshots = sorted(trainer.glob("main-*/crds"))
        if not snapshots:
            raise FileNotFoundError(f"no main-branch CRD snapshot under {trainer}")
        crd_dir = snapshots[-1]
    else:
        raise ValueError(f"unknown branch {branch!r} (use 'v2.3.0' or 'main')")
    files = [
        crd_dir / f"trainer.kubeflow.org_{plural}.yaml"
        for plural in ("trainjobs", "trainingruntimes", "clustertrainingruntimes")
    ]
    files.append(root / "jobset" / "jobset.x-k8s.io_jobsets.yaml")
    schemas: dict[str, CRDSchema] = {}
    for file in files:
        schema = _load_cached(str(file.resolve()), file.stat().st_mtime_ns)
        schemas[schema.name] = schema
    return schemas
