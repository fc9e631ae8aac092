"""Where each job identity keeps its checkpoints, on every backend, and how that location
is cleaned.

Every attempt of one identity (``submit(spec, identity=...)``: a retried Airflow task, a
Prefect retry, a resubmit) gets the **same** checkpoint location, so that the fresh
attempt after an infrastructure failure resumes from the last checkpoint:

* local and container backends: ``<state_dir>/checkpoints/<namespace>/<identity key>/``,
  on by default (``Checkpoints(enabled=False)`` turns it off); the container backend
  bind-mounts it at ``/mnt/kf-trainer-checkpoints/<namespace>/<identity key>``;
* Kubernetes: the :class:`Checkpoints` option names a PersistentVolumeClaim, mounted
  into the trainer's pods through ``spec.runtimePatches``, and/or a storage URI passed
  through; the identity's location is ``<mount or uri>/<namespace>/<identity key>``.

The training function reads ``$KF_TRAINER_CHECKPOINT_DIR`` (and
``$KF_TRAINER_CHECKPOINT_URI``) through :mod:`kf_trainer_core.checkpoints`.

Nothing deletes anything unless asked: :mod:`kf_trainer_core.programs.checkpoints`
(the clients' ``clean_checkpoints``, ``kf-trainer jobs checkpoints clean``) removes one
identity's location, and refuses while an attempt of that identity still runs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import field_validator, model_validator

from kf_trainer_core import checkpoints as ck
from kf_trainer_core.base.errors import FieldProblem, KFTrainerError, SpecError
from kf_trainer_core.base.quoting import shown
from kf_trainer_core.fields import names
from kf_trainer_core.fields._model import SpecModel, fix
from kf_trainer_core.spec.common import check_object_name

#: The runtime patch's ``manager``: the suite's checkpoint volume, nobody else's.
PATCH_MANAGER = "kf-trainer-suite/checkpoints"
VOLUME_NAME = "kf-trainer-checkpoints"

_URI = re.compile(r"^[a-z][a-z0-9+.-]*://[^\s]+\Z")


class Checkpoints(SpecModel):
    """A checkpoint location shared by every attempt of the job's identity.

    ``Checkpoints(pvc="team-ckpts")`` mounts that PersistentVolumeClaim at
    ``mount_path`` in the trainer's pods; ``Checkpoints(uri="s3://bucket/ckpts")``
    passes the URI through (``$KF_TRAINER_CHECKPOINT_URI``; the training code writes
    there with its own storage client). On the local and container backends the job
    gets a directory under the state directory without this option;
    ``Checkpoints(enabled=False)`` turns that off.
    """

    type: Literal["Checkpoints"] = "Checkpoints"
    #: A PersistentVolumeClaim in the job's namespace (ReadWriteMany for several nodes).
    pvc: str | None = None
    #: A storage URI (``s3://``, ``gs://``, ``hf://``...): passed through, never read.
    uri: str | None = None
    mount_path: str = ck.DEFAULT_MOUNT
    enabled: bool = True

    @field_validator("pvc")
    @classmethod
    def _pvc(cls, v: str | None) -> str | None:
        if v is None:
            return None
        return check_object_name(
            v, "PersistentVolumeClaim name", "use the claim's name, e.g. 'team-checkpoints'."
        )

    @field_validator("uri")
    @classmethod
    def _uri(cls, v: str | None) -> str | None:
        if v is not None and not _URI.match(v):
            raise ValueError(
                fix(
                    f"{shown(v)} is not a storage URI.",
                    "write e.g. 's3://bucket/checkpoints'.",
                )
            )
        if v is not None and "@" in v.split("://", 1)[1].split("/", 1)[0]:
            raise ValueError(
                fix(
                    "the URI carries credentials; they would end up in the manifest.",
                    "drop them from the URI and give the pods credentials through a Secret.",
                )
            )
        return v

    @field_validator("mount_path")
    @classmethod
    def _mount(cls, v: str) -> str:
        if not v.startswith("/") or v.rstrip("/") in ("", "/workspace") or ".." in v.split("/"):
            raise ValueError(
                fix(
                    f"mount_path {shown(v)} must be an absolute path of its own.",
                    f"use e.g. {shown(ck.DEFAULT_MOUNT)} (not / nor /workspace).",
                )
            )
        return v.rstrip("/")

    @model_validator(mode="after")
    def _consistent(self) -> Checkpoints:
        if not self.enabled and (self.pvc or self.uri):
            raise ValueError(
                fix(
                    "Checkpoints(enabled=False) names a pvc or uri.",
                    "drop enabled=False to use them, or drop them to turn checkpoints off.",
                )
            )
        return self


@dataclass(frozen=True)
class CheckpointLocation:
    """Where one identity's checkpoints are."""

    namespace: str
    identity: str
    #: The identity's directory name (:func:`kf_trainer_core.checkpoints.identity_key`).
    key: str
    #: The directory in the trainer's pods (``$KF_TRAINER_CHECKPOINT_DIR``).
    path: str | None = None
    pvc: str | None = None
    uri: str | None = None
    #: The directory on this machine (local and container backends).
    local_path: Path | None = None

    def describe(self) -> str:
        """One line for a person."""
        if self.local_path is not None:
            return str(self.local_path)
        parts = []
        if self.pvc:
            parts.append(f"{self.path} on PVC {self.pvc}")
        if self.uri:
            parts.append(str(self.uri))
        return " and ".join(parts) or "none"


def location(
    option: Checkpoints | None,
    namespace: str,
    identity: str,
    *,
    state_dir: str | Path | None = None,
) -> CheckpointLocation:
    """The location of ``identity``'s checkpoints: under ``state_dir`` for the local and
    container backends, else on the option's volume or URI."""
    key = ck.identity_key(identity)
    if state_dir is not None:
        return CheckpointLocation(
            namespace, identity, key, local_path=ck.local_dir(state_dir, namespace, identity)
        )
    if option is None or not option.enabled:
        return CheckpointLocation(namespace, identity, key)
    path = f"{option.mount_path}/{namespace}/{key}" if option.pvc else None
    uri = f"{option.uri.rstrip('/')}/{namespace}/{key}/" if option.uri else None
    return CheckpointLocation(namespace, identity, key, path=path, pvc=option.pvc, uri=uri)


# ------------------------------------------------------------------ the manifest


def apply(
    option: Checkpoints | None,
    body: dict[str, Any],
    annotations: dict[str, str],
    *,
    namespace: str | None,
    identity: str,
    replicated_jobs: tuple[str, ...],
    where: str,
    problems: list[FieldProblem],
) -> None:
    """Put the checkpoint location into a TrainJob being built: the annotation the local
    backends read, the volume (a runtime patch of the trainer's replicated jobs) and the
    trainer's env. Without the option only nothing changes (local backends still give
    each identity a directory)."""
    if option is None:
        return
    if not option.enabled:
        annotations[ck.ANNOTATION] = "off"
        return
    loc = location(option, namespace or "default", identity)
    annotations[ck.ANNOTATION] = loc.key
    env: list[dict[str, Any]] = []
    if loc.path is not None:
        env.append({"name": ck.DIR_ENV, "value": loc.path})
    if loc.uri is not None:
        env.append({"name": ck.URI_ENV, "value": loc.uri})
    trainer = body.setdefault("trainer", {})
    taken = {str(e.get("name")) for e in trainer.get("env") or []} & {e["name"] for e in env}
    if taken:
        problems.append(
            FieldProblem(
                "trainer.env",
                f"{', '.join(sorted(taken))} is set by the {where} option.",
                "drop it from the trainer's env; the option sets it for every attempt.",
            )
        )
    if env:
        trainer["env"] = [*(trainer.get("env") or []), *env]
    if option.pvc is None:
        return
    volumes = [{"name": VOLUME_NAME, "persistentVolumeClaim": {"claimName": option.pvc}}]
    mounts = [{"name": VOLUME_NAME, "mountPath": option.mount_path}]
    # The MPI launcher's container is named after its replicated job, like the node's.
    targets = [r for r in replicated_jobs if r in (names.NODE, "launcher")] or [names.NODE]
    patch_jobs = [
        {
            "name": rjob,
            "template": {
                "spec": {
                    "template": {
                        "spec": {
                            "volumes": volumes,
                            "containers": [{"name": rjob, "volumeMounts": mounts}],
                        }
                    }
                }
            },
        }
        for rjob in targets
    ]
    patches = body.setdefault("runtimePatches", [])
    if any(p.get("manager") == PATCH_MANAGER for p in patches):
        problems.append(
            FieldProblem(
                where,
                f"a RuntimePatch uses manager {shown(PATCH_MANAGER)}, which the option needs.",
                "give that RuntimePatch another manager.",
            )
        )
    patches.append(
        {
            "manager": PATCH_MANAGER,
            "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": patch_jobs}}},
        }
    )


def require_storage(spec: Any, *, cluster: bool) -> None:
    """On a cluster, ``Checkpoints()`` needs a place: a PVC or a URI. Raised before
    anything is submitted (the local backends need neither)."""
    if not cluster:
        return
    for i, opt in enumerate(getattr(spec, "options", None) or []):
        if isinstance(opt, Checkpoints) and opt.enabled and not (opt.pvc or opt.uri):
            raise SpecError.single(
                f"options[{i}].pvc",
                "Checkpoints() on a Kubernetes cluster needs storage that outlives the "
                "pods: it names neither a PersistentVolumeClaim nor a storage URI.",
                "write Checkpoints(pvc='<claim in this namespace>') (ReadWriteMany for "
                "several nodes) or Checkpoints(uri='s3://bucket/checkpoints').",
            )


# ------------------------------------------------------------------- cleaning


class CheckpointsInUseError(KFTrainerError):
    """An attempt of the identity has not finished: it may still write checkpoints."""


class CheckpointsNotRemovedError(KFTrainerError):
    """The identity's checkpoints were not (all) removed: a symbolic link on the way was
    refused, or entries could not be deleted; the message names what is left."""


class CheckpointsNotFoundError(KFTrainerError, LookupError):
    """No checkpoint location is known for the identity (no job of it used one)."""


class CheckpointsUnreachableError(KFTrainerError):
    """The location is in a bucket (or on a claim the client was told not to clean with
    a job), out of this client's reach; the message names it and how to remove it."""

    def __init__(self, message: str, location: CheckpointLocation) -> None:
        super().__init__(message)
        self.location = location


def option_of(job: Mapping[str, Any]) -> Checkpoints | None:
    """The :class:`Checkpoints` a TrainJob was built with, read back from its manifest
    (the volume of the suite's runtime patch and the trainer's env)."""
    spec = job.get("spec") or {}
    env = {str(e.get("name")): e.get("value") for e in (spec.get("trainer") or {}).get("env") or []}
    pvc, mount = None, ck.DEFAULT_MOUNT
    for patch in spec.get("runtimePatches") or []:
        if patch.get("manager") != PATCH_MANAGER:
            continue
        rjobs = ((patch.get("trainingRuntimeSpec") or {}).get("template") or {}).get("spec") or {}
        for rjob in rjobs.get("replicatedJobs") or []:
            pod = (((rjob.get("template") or {}).get("spec") or {}).get("template") or {}).get(
                "spec"
            ) or {}
            for vol in pod.get("volumes") or []:
                pvc = (vol.get("persistentVolumeClaim") or {}).get("claimName") or pvc
            for c in pod.get("containers") or []:
                for m in c.get("volumeMounts") or []:
                    mount = str(m.get("mountPath") or mount)
    # The env is the job's: a URI counts only when the option put it there (the job
    # carries the option's key, and the URI ends with <namespace>/<key>/); a variable the
    # user set by hand is the job's own business, never a reason to fail here.
    key = ((job.get("metadata") or {}).get("annotations") or {}).get(ck.ANNOTATION)
    namespace = (job.get("metadata") or {}).get("namespace") or "default"
    uri = env.get(ck.URI_ENV)
    base = None
    if isinstance(uri, str) and key and key != "off" and uri.endswith(f"/{namespace}/{key}/"):
        base = uri[: -len(f"/{namespace}/{key}/")]
    if pvc is None and base is None:
        return None
    try:
        return Checkpoints(pvc=pvc, uri=base, mount_path=mount)
    except ValueError:  # pydantic's ValidationError: a manifest edited by hand
        return None
