"""What every part of the local backend shares: where things live in the state
directory and the environment variables that connect the supervisor with
the processes it runs.

This module is imported by the supervisor, whose start-up time is part of every job's
latency, so it imports nothing beyond the standard library (the suite's pydantic models
cost ~0.4 s to import).
"""

from __future__ import annotations

from pathlib import Path

from kf_trainer_core.base.quoting import shown

# The kubelet's cap on a termination message, as both emulations apply it.
from kf_trainer_core.emulation.kubelet import TERMINATION_MESSAGE_LIMIT

# The Trainer's vocabulary and the object shapes, shared with the rest of the suite
# (standard library only, so importing them here costs the supervisor nothing).
from kf_trainer_core.k8s.objects import now_iso
from kf_trainer_core.k8s.trainjob import (
    ANCESTOR_LABEL,
    DATASET_INITIALIZER,
    FRAMEWORK_LABEL,
    INITIALIZERS,
    JOB_NAME_LABEL,
    JOBSET_NAME_LABEL,
    LAUNCHER,
    MODEL_INITIALIZER,
    NODE,
    REPLICATED_JOB_LABEL,
    TRAINER_API,
)

# The generated program's hand-off (kf_trainer_core.spec.function, duplicated here so the
# supervisor need not import pydantic; a test keeps the two in step).
TERMINATION_LOG_ENV = "KF_TRAINER_TERMINATION_LOG"
RESULT_MARKER = "##kf-trainer-result## "
LAUNCHER_ENV = "KF_TRAINER_LAUNCHER"

#: The job's workspace on this machine: what a cluster mounts at ``/workspace``.
WORKSPACE_ENV = "KF_TRAINER_WORKSPACE"
CLUSTER_WORKSPACE = "/workspace"
#: Every process of a job carries its uid in this variable, so that cancelling finds
#: them all, including grandchildren that left their process group.
JOB_UID_ENV = "KF_TRAINER_LOCAL_JOB_UID"
POD_ENV = "KF_TRAINER_LOCAL_POD"
#: The supervisor restores the submitter's PYTHONPATH from this before starting ranks.
ORIGINAL_PYTHONPATH_ENV = "KF_TRAINER_LOCAL_PYTHONPATH"


def missing_state(root: Path, backend: str = "local") -> str | None:
    """Why ``root`` holds no jobs to read (``None``: it does). Only a submit creates a
    state directory; a read of one that is not there is an error, so that a mistyped
    directory is never answered with "no jobs" (nor left behind, empty)."""
    root = Path(root).expanduser()
    if (root / "state.db").is_file():
        return None
    what = "does not exist" if not root.exists() else "holds no jobs' state (no state.db)"
    return f"the {backend} backend's state directory {root} {what}: no job was submitted with it"


class Paths:
    """The layout of a state directory::

    state.db                                objects, change log, run plans (SQLite)
    logs/<namespace>/<pod>/<container>.log  "<RFC3339Nano> <text>" lines
    logs/<namespace>/<pod>/<container>.done the container ended: followers stop
    workspaces/<namespace>/<job>-<uid8>/    dataset/, model/ (the job's /workspace)
    run/<uid>/                              program, termination logs, supervisor.log
    locks/<uid>.lock                        held by the job's supervisor while it runs
    venvs/<key>/                            cached virtual environments (use_venv)
    """

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).expanduser().resolve()

    def _under(self, *parts: str) -> Path:
        """``root/part/...``, refusing any part that is not one plain name: the
        parts come from object names and namespaces, and a delete removes the result."""
        for part in parts:
            if not part or part in (".", "..") or "/" in part or "\\" in part or "\0" in part:
                raise ValueError(
                    f"{shown(part)} cannot name a directory under the local state directory "
                    "(it would leave it). Fix: use Kubernetes names (lowercase letters, "
                    "digits and '-')."
                )
        path = self.root.joinpath(*parts)
        if not path.resolve().is_relative_to(self.root):  # a symlink pointing out
            raise ValueError(f"{path} leaves the local state directory {self.root}.")
        return path

    @property
    def db(self) -> Path:
        return self.root / "state.db"

    def log_dir(self, namespace: str, pod: str) -> Path:
        return self._under("logs", namespace, pod)

    def log(self, namespace: str, pod: str, container: str) -> Path:
        return self._under("logs", namespace, pod, f"{container}.log")

    def log_done(self, namespace: str, pod: str, container: str) -> Path:
        return self._under("logs", namespace, pod, f"{container}.done")

    def workspace(self, namespace: str, name: str, uid: str) -> Path:
        return self._under("workspaces", namespace, f"{name}-{uid[:8]}")

    def run_dir(self, uid: str) -> Path:
        return self._under("run", uid)

    def lock(self, uid: str) -> Path:
        return self._under("locks", f"{uid}.lock")

    @property
    def venvs(self) -> Path:
        return self.root / "venvs"


__all__ = [
    "ANCESTOR_LABEL",
    "DATASET_INITIALIZER",
    "FRAMEWORK_LABEL",
    "INITIALIZERS",
    "JOBSET_NAME_LABEL",
    "JOB_NAME_LABEL",
    "LAUNCHER",
    "MODEL_INITIALIZER",
    "NODE",
    "REPLICATED_JOB_LABEL",
    "TERMINATION_MESSAGE_LIMIT",
    "TRAINER_API",
    "now_iso",
]
