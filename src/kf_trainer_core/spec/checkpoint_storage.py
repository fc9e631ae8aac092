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

Nothing here deletes anything unless asked: :func:`clean_program` (the clients'
``clean_checkpoints``, ``kf-trainer jobs checkpoints clean``) removes one identity's
location, and refuses while an attempt of that identity still runs; on a cluster the
clients run :func:`cleaning_job`, a one-node job that mounts the claim.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import field_validator, model_validator

from kf_trainer_core import checkpoints as ck
from kf_trainer_core.errors import FieldProblem, KFTrainerError, SpecError
from kf_trainer_core.fields import checks, names
from kf_trainer_core.fields._model import SpecModel, fix

if TYPE_CHECKING:
    from kf_trainer_core.k8s.calls import Program

#: The runtime patch's ``manager``: the suite's checkpoint volume, nobody else's.
PATCH_MANAGER = "kf-trainer-suite/checkpoints"
VOLUME_NAME = "kf-trainer-checkpoints"

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")
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
        if v is not None and (len(v) > 253 or not _DNS_SUBDOMAIN.match(v)):
            raise ValueError(
                fix(
                    f"{v!r} is not a PersistentVolumeClaim name.",
                    "use the claim's name, e.g. 'team-checkpoints'.",
                )
            )
        return v

    @field_validator("uri")
    @classmethod
    def _uri(cls, v: str | None) -> str | None:
        if v is not None and not _URI.match(v):
            raise ValueError(
                fix(
                    f"{checks.shown(v)} is not a storage URI.",
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
                    f"mount_path {v!r} must be an absolute path of its own.",
                    f"use e.g. {ck.DEFAULT_MOUNT!r} (not / nor /workspace).",
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
                f"a RuntimePatch uses manager {PATCH_MANAGER!r}, which the option needs.",
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


def locate_program(
    namespace: str,
    identity: str,
    *,
    state_dir: str | Path | None,
    option: Checkpoints | None = None,
) -> Program[tuple[CheckpointLocation, list[dict[str, Any]]]]:
    """Where ``identity``'s checkpoints are, and the identity's TrainJobs (on a cluster
    the option is read back from the newest job that used one, unless given)."""
    from kf_trainer_core.programs.submit import jobs_for_identity

    if not identity.strip("/ "):
        raise ValueError(
            "no identity was named. Fix: pass the identity the job was submitted with, "
            "e.g. (dag_id, task_id, run_id)."
        )
    existing = yield from jobs_for_identity(namespace, identity)
    if option is None and state_dir is None:  # the local backends need no option
        option = next((o for o in map(option_of, reversed(existing)) if o is not None), None)
    return location(option, namespace, identity, state_dir=state_dir), existing


def clean_program(
    namespace: str,
    identity: str,
    *,
    state_dir: str | Path | None,
    option: Checkpoints | None = None,
    force: bool = False,
) -> Program[CheckpointLocation]:
    """Remove the checkpoints of one identity (every attempt's): the only way they are
    ever deleted. Refused while an attempt is unfinished (``force`` overrides).

    Local and container backends: the identity's directory is removed. A cluster's
    volume or bucket cannot be reached from here: :class:`CheckpointsUnreachableError`
    carries the location (the clients then clean a claim with :func:`cleaning_job`)."""
    from kf_trainer_core.cluster.status import job_state

    loc, existing = yield from locate_program(
        namespace, identity, state_dir=state_dir, option=option
    )
    live = [o for o in existing if not job_state(o).terminal]
    if live and not force:
        running = ", ".join(str(o["metadata"]["name"]) for o in live)
        raise CheckpointsInUseError(
            f"the checkpoints of identity {identity!r} are in use: TrainJob {running} has "
            "not finished and may still write them. Fix: wait for it or cancel it first "
            "(or pass force=True)."
        )
    if loc.local_path is not None and state_dir is not None:
        try:
            ck.remove_tree(loc.local_path, state_dir, depth=3)
        except (OSError, ValueError) as exc:
            raise CheckpointsNotRemovedError(
                f"the checkpoints of identity {identity!r} were not removed: {exc}"
            ) from None
        return loc
    if loc.path is None and loc.uri is None:
        raise CheckpointsNotFoundError(
            f"no checkpoint location is known for identity {identity!r} in {namespace} "
            "(none of its TrainJobs used the Checkpoints option). Fix: pass the option the "
            "job used: clean_checkpoints(identity, checkpoints=Checkpoints(pvc=...))."
        )
    raise CheckpointsUnreachableError(
        f"the checkpoints of identity {identity!r} are at {loc.describe()}, which this "
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
    from kf_trainer_core.spec import CustomTrainer, TrainJobSpec

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


def checkpoints_program(
    config: Any,
    namespace: str,
    identity: str,
    option: Checkpoints | None,
    clean: bool,
    force: bool,
) -> Program[CheckpointLocation]:
    """The clients' ``checkpoint_location`` (``clean=False``) and ``clean_checkpoints``:
    a local or container ``config`` keeps checkpoints under its state directory."""
    from kf_trainer_core.config import LocalConfig

    state = None
    if isinstance(config, LocalConfig):
        from kf_trainer_core.backends.local.transport import state_dir_of

        state = state_dir_of(config).resolve()
    if clean:
        return (
            yield from clean_program(
                namespace, identity, state_dir=state, option=option, force=force
            )
        )
    loc, _ = yield from locate_program(namespace, identity, state_dir=state, option=option)
    return loc
