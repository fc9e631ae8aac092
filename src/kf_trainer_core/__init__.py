"""kf-trainer-suite core: Kubeflow Trainer v2 TrainJobs from typed, JSON-serialisable specs.

``kf_trainer_core.__version__`` is the installed distribution's version, read from its
metadata on first use (importing the package reads nothing)."""

from __future__ import annotations

from typing import Any

__all__ = ["__version__"]


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from kf_trainer_core.base.project import version

        return version()
    raise AttributeError(f"module 'kf_trainer_core' has no attribute '{name}'")
