"""The checkpoint location's programs: where one identity's checkpoints are, and how
they are cleaned (:func:`locate_program`, then :func:`clean_program`: the clients'
``clean_checkpoints`` and ``kf-trainer jobs checkpoints clean``; on a cluster the
clients run :func:`cleaning_job`, a one-node job that mounts the claim). The option
itself, and where it puts the location, is :mod:`kf_trainer_core.spec.checkpoint_storage`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kf_trainer_core import checkpoints as ck
from kf_trainer_core.base.quoting import shown
from kf_trainer_core.cluster.status import job_state
from kf_trainer_core.config import LocalConfig
from kf_trainer_core.k8s.api import Api
from kf_trainer_core.programs.submit import jobs_for_identity
from kf_trainer_core.spec import CustomTrainer, TrainJobSpec
from kf_trainer_core.spec.checkpoint_storage import (
    CheckpointLocation,
    Checkpoints,
    CheckpointsInUseError,
    CheckpointsNotFoundError,
    CheckpointsNotRemovedError,
    CheckpointsUnreachableError,
    location,
    option_of,
)


def _state_dir(config: Any) -> Path | None:
    """Where a local or container ``config`` keeps checkpoints: under its state
    directory (``None`` on a cluster)."""
    return config.state_path().resolve() if isinstance(config, LocalConfig) else None


async def locate_program(
    api: Api, config: Any, namespace: str, identity: str, option: Checkpoints | None
) -> tuple[CheckpointLocation, list[dict[str, Any]]]:
    """Where ``identity``'s checkpoints are, and the identity's TrainJobs (on a cluster
    the option is read back from the newest job that used one, unless given): the
    clients' ``checkpoint_location``."""
    if not identity.strip("/ "):
        raise ValueError(
            "no identity was named. Fix: pass the identity the job was submitted with, "
            "e.g. (dag_id, task_id, run_id)."
        )
    existing = await jobs_for_identity(api, namespace, identity)
    state_dir = _state_dir(config)
    if option is None and state_dir is None:  # the local backends need no option
        option = next((o for o in map(option_of, reversed(existing)) if o is not None), None)
    return location(option, namespace, identity, state_dir=state_dir), existing


def clean_program(
    loc: CheckpointLocation, existing: list[dict[str, Any]], config: Any, force: bool
) -> CheckpointLocation:
    """Remove the checkpoints of one identity (every attempt's), found by
    :func:`locate_program` with the identity's jobs (``existing``): the only way they
    are ever deleted. Refused while an attempt is unfinished (``force`` overrides).

    Local and container backends: the identity's directory is removed. A cluster's
    volume or bucket cannot be reached from here: :class:`CheckpointsUnreachableError`
    carries the location (the clients then clean a claim with :func:`cleaning_job`)."""
    identity, namespace, state_dir = loc.identity, loc.namespace, _state_dir(config)
    live = [o for o in existing if not job_state(o).terminal]
    if live and not force:
        running = ", ".join(str(o["metadata"]["name"]) for o in live)
        raise CheckpointsInUseError(
            f"the checkpoints of identity {shown(identity)} are in use: TrainJob {running} has "
            "not finished and may still write them. Fix: wait for it or cancel it first "
            "(or pass force=True)."
        )
    if loc.local_path is not None and state_dir is not None:
        try:
            ck.remove_tree(loc.local_path, state_dir, depth=3)
        except (OSError, ValueError) as exc:
            raise CheckpointsNotRemovedError(
                f"the checkpoints of identity {shown(identity)} were not removed: {exc}"
            ) from None
        return loc
    if loc.path is None and loc.uri is None:
        raise CheckpointsNotFoundError(
            f"no checkpoint location is known for identity {shown(identity)} in {namespace} "
            "(none of its TrainJobs used the Checkpoints option). Fix: pass the option the "
            "job used: clean_checkpoints(identity, checkpoints=Checkpoints(pvc=...))."
        )
    raise CheckpointsUnreachableError(
        f"the checkpoints of identity {shown(identity)} are at {loc.describe()}, which this "
        "client cannot reach (only the pods that mount the volume, or your storage "
        f"client, can). Fix: remove {loc.path or loc.uri} there, e.g. from a pod that "
        "mounts the claim; every attempt of the identity used it, no other identity did.",
        loc,
    )


#: The cleaning job reads what to remove from these (its trainer's env).
CLEAN_PATH_ENV = "KF_TRAINER_CLEAN_PATH"
CLEAN_MOUNT_ENV = "KF_TRAINER_CLEAN_MOUNT"


def cleaning_job(loc: CheckpointLocation) -> tuple[Any, str] | None:
    """On a cluster, a claim is reached by a pod that mounts it: the spec and identity of
    a one-node TrainJob that mounts ``loc``'s claim and removes the identity's directory
    (``None`` for a location without a claim: a bucket is the user's to clean)."""
    if loc.pvc is None or loc.path is None:
        return None
    mount = loc.path[: -len(f"/{loc.namespace}/{loc.key}")]
    spec = TrainJobSpec(
        trainer=CustomTrainer(
            remove_checkpoints,
            num_nodes=1,
            env={CLEAN_PATH_ENV: loc.path, CLEAN_MOUNT_ENV: mount},
        ),
        options=[Checkpoints(pvc=loc.pvc, mount_path=mount)],
    )
    return spec, f"kf-trainer-suite/clean-checkpoints/{loc.namespace}/{loc.key}"


def remove_checkpoints() -> dict[str, Any]:
    """Runs in the cleaning job's pod: remove ``$KF_TRAINER_CLEAN_PATH``, which must be
    a directory two levels under the mounted claim (``<mount>/<namespace>/<key>``)."""
    import os

    from kf_trainer_core.checkpoints import remove_tree

    path = os.environ["KF_TRAINER_CLEAN_PATH"]
    # Never through a symbolic link (refused), and never reported removed while any of
    # it is left (the job fails, naming what is).
    existed = remove_tree(path, os.environ["KF_TRAINER_CLEAN_MOUNT"], depth=2)
    print(f"removed {path}" if existed else f"{path} did not exist", flush=True)
    return {"removed": path, "existed": existed}
