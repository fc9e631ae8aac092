"""The checkpoint directory of a job on the local and container backends.

Every attempt of one identity gets ``<state_dir>/checkpoints/<namespace>/<identity
key>/`` (:func:`kf_trainer_core.checkpoints.local_dir`), on by default; the trainer's
processes see it as ``$KF_TRAINER_CHECKPOINT_DIR``, a container at the path a cluster
pod would use (bind-mounted). Nothing here deletes it: see ``docs/checkpoints.md``.

Imported by the supervisor: standard library only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kf_trainer_core import checkpoints as ck

#: The variables :func:`trainer_env` adds beside the pod's own env (no Secret's values).
TRAINER_ENV_NAMES = frozenset({ck.DIR_ENV})


def trainer_env(state_dir: str | Path, namespace: str, job: dict[str, Any]) -> dict[str, str]:
    """The trainer's checkpoint variable: the job's checkpoint directory on this machine
    (empty when the job turned checkpoints off). It replaces a cluster path the manifest
    carries (``Checkpoints(pvc=...)``). The directory is not created here: the helper
    creates it when the function uses it, so jobs that never checkpoint leave nothing
    behind."""
    if not ck.local_setting(job):
        return {}
    return {ck.DIR_ENV: str(ck.local_dir(state_dir, namespace, ck.job_identity(job)))}


def container_mount(environment: dict[str, str], namespace: str) -> tuple[str, str] | None:
    """For the container backend: ``(host directory, path in the container)`` of the
    checkpoint directory named in ``environment``, which is rewritten to the path in the
    container - the one a cluster pod would see."""
    host = environment.get(ck.DIR_ENV)
    if not host:
        return None
    Path(host).mkdir(parents=True, exist_ok=True)  # a bind mount needs its source
    inside = f"{ck.DEFAULT_MOUNT}/{namespace}/{Path(host).name}"
    environment[ck.DIR_ENV] = inside
    return host, inside
