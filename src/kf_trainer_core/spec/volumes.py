"""Volumes for the training pods: a ``RuntimePatch`` that adds one volume to the pods of
some replicated jobs and mounts it into their main container.

Data and models that several pods (or the workflow's own tasks) read and write must live
on storage they all see: a ReadWriteMany PersistentVolumeClaim, an NFS export, a CSI
volume. The runtime decides the pods, so the way in is a runtime patch:

>>> spec = TrainJobSpec(
...     trainer=CustomTrainer(train, num_nodes=2),
...     options=[mount_pvc("retraining-data", "/mnt/shared")],
... )

Each call makes a patch with a manager of its own (``kf-trainer-suite/volume-<name>``),
so several volumes can be mounted side by side; the builder checks the replicated job
names against the runtime, as for any runtime patch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kf_trainer_core.base.errors import SpecError
from kf_trainer_core.base.quoting import shown
from kf_trainer_core.fields import names
from kf_trainer_core.spec import (
    ContainerPatch,
    JobSetSpecPatch,
    JobSetTemplatePatch,
    JobSpecPatch,
    JobTemplatePatch,
    PodSpecPatch,
    PodTemplatePatch,
    ReplicatedJobPatch,
    RuntimePatch,
    TrainingRuntimeSpecPatch,
)

__all__ = ["mount_pvc", "mount_volume"]

#: The prefix of the patch managers these helpers write.
MANAGER_PREFIX = "kf-trainer-suite/volume-"


def _container_of(replicated_job: str) -> str:
    # The default runtimes name the main container after its replicated job, except
    # the MPI launcher, whose container is the trainer's ("node").
    return names.NODE if replicated_job == names.LAUNCHER else replicated_job


def mount_volume(
    volume: Mapping[str, Any],
    mount_path: str,
    *,
    read_only: bool = False,
    sub_path: str | None = None,
    replicated_jobs: Sequence[str] = (names.NODE,),
    container: str | None = None,
    manager: str | None = None,
) -> RuntimePatch:
    """A runtime patch that adds ``volume`` (a Kubernetes ``Volume``, e.g.
    ``{"name": "data", "nfs": {"server": ..., "path": ...}}``) to the pods of
    ``replicated_jobs`` and mounts it at ``mount_path`` in their main container.

    Args:
        volume: the pod volume, in the Kubernetes API's form; it needs a ``name``.
        mount_path: where the container sees it (absolute).
        read_only: mount it read-only.
        sub_path: mount only this path inside the volume.
        replicated_jobs: the runtime's replicated jobs to patch: ``node`` (the
            training nodes, default), ``launcher``, ``dataset-initializer``,
            ``model-initializer``.
        container: the container to mount it in (default: the replicated job's main
            container: ``node`` for ``node`` and ``launcher``, else the job's name).
        manager: the patch's manager (default ``kf-trainer-suite/volume-<name>``).

    Raises:
        SpecError: naming the argument at fault and the fix.
    """
    name = volume.get("name")
    if not isinstance(name, str) or not name:
        raise SpecError.single(
            "volume.name",
            "the volume has no name.",
            "give it one, e.g. {'name': 'data', 'persistentVolumeClaim': {...}}.",
        )
    if not mount_path.startswith("/"):
        raise SpecError.single(
            "mount_path",
            f"{shown(mount_path)} is not an absolute path.",
            "give the path the container sees, e.g. '/mnt/shared'.",
        )
    if not replicated_jobs:
        raise SpecError.single(
            "replicated_jobs", "no replicated job to patch.", "name at least one, e.g. 'node'."
        )
    if isinstance(replicated_jobs, str):
        # A lone string would be read letter by letter.
        replicated_jobs = (replicated_jobs,)
    mount: dict[str, Any] = {"name": name, "mountPath": mount_path}
    if read_only:
        mount["readOnly"] = True
    if sub_path:
        mount["subPath"] = sub_path
    patches = [
        ReplicatedJobPatch(
            name=rjob,
            template=JobTemplatePatch(
                spec=JobSpecPatch(
                    template=PodTemplatePatch(
                        spec=PodSpecPatch(
                            volumes=[dict(volume)],
                            containers=[
                                ContainerPatch(
                                    name=container or _container_of(rjob),
                                    volume_mounts=[mount],
                                )
                            ],
                        )
                    )
                )
            ),
        )
        for rjob in replicated_jobs
    ]
    return RuntimePatch(
        TrainingRuntimeSpecPatch(
            template=JobSetTemplatePatch(spec=JobSetSpecPatch(replicated_jobs=patches))
        ),
        manager=manager or f"{MANAGER_PREFIX}{name}",
    )


def mount_pvc(
    claim_name: str,
    mount_path: str,
    *,
    volume_name: str = "shared",
    read_only: bool = False,
    sub_path: str | None = None,
    replicated_jobs: Sequence[str] = (names.NODE,),
    container: str | None = None,
    manager: str | None = None,
) -> RuntimePatch:
    """A runtime patch that mounts the PersistentVolumeClaim ``claim_name`` at
    ``mount_path`` in the training pods (see :func:`mount_volume` for the rest).

    Several nodes write to it at once only with a ``ReadWriteMany`` claim (NFS,
    CephFS, EFS, Filestore...); a ``ReadWriteOnce`` claim binds to one node.
    """
    if not claim_name:
        raise SpecError.single(
            "claim_name", "the claim's name is empty.", "give the PersistentVolumeClaim's name."
        )
    volume = {
        "name": volume_name,
        "persistentVolumeClaim": {
            "claimName": claim_name,
            **({"readOnly": True} if read_only else {}),
        },
    }
    return mount_volume(
        volume,
        mount_path,
        read_only=read_only,
        sub_path=sub_path,
        replicated_jobs=replicated_jobs,
        container=container,
        manager=manager,
    )
