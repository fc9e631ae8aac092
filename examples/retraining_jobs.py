"""What the retraining TrainJob asks for, on a laptop and on a GPU cluster: shared by the
Airflow DAG, the Prefect flow and the Kubeflow pipeline, so that the three train the
same job.

Only configuration tells a laptop run from a cluster run:

* **where** jobs run is the orchestrator's own configuration: an Airflow connection, a
  Prefect block, a KFP component argument (``backend_config``);
* **what** a job asks for is a :class:`JobProfile`: :data:`LOCAL` (one process on this
  machine) or :data:`CLUSTER` (2 nodes x 4 GPUs, files on a shared volume), chosen by
  name (``"cluster"``) or given as JSON (``{"num_nodes": 4, ...}``).

Storage: every step reads and writes files under ``shared_dir``. On a laptop that is a
plain directory. On a cluster the workflow's own steps (prepare, evaluate, promote) and
the training pods run on different machines, so ``shared_dir`` must be storage that all
of them mount at the same path: a ReadWriteMany PersistentVolumeClaim (``volume_claim``:
the profile mounts it into the training pods; mount it into the Airflow workers, the
Prefect workers' pods or the KFP components too), or an S3 bucket mounted the same way
(Mountpoint for S3, s3fs). With object storage read directly instead (``s3://`` URIs
and an S3 client in ``train``), drop the volume and pass the bucket's credentials with
``env={"AWS_ACCESS_KEY_ID": SecretKeyRef(...)}``, never in clear text.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from kf_trainer_core.spec import CustomTrainer, Labels, TrainJobSpec
from kf_trainer_core.spec.checkpoint_storage import Checkpoints
from kf_trainer_core.spec.volumes import mount_pvc

#: The label every retraining job carries (find them with ``-l`` / ``list_jobs``).
PART_OF = {"app.kubernetes.io/part-of": "kf-retraining"}


class JobProfile(BaseModel):
    """The shape of the training job and where its files live."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: A (Cluster)TrainingRuntime: ``torch-distributed`` is one of the Trainer's defaults.
    runtime: str = "torch-distributed"
    num_nodes: int = Field(default=1, ge=1)
    #: Per node, e.g. ``{"gpu": 4, "cpu": 16, "memory": "64Gi"}``. The local backend
    #: warns about resources this machine lacks and runs anyway.
    resources_per_node: dict[str, int | float | str] | None = None
    #: Where data, candidate models and the promoted model live (see the module docs);
    #: unset, each example uses a directory of its own under ``.kf-trainer``.
    shared_dir: str | None = None
    #: A ReadWriteMany PersistentVolumeClaim mounted at ``shared_dir`` in the training
    #: pods (cluster only).
    volume_claim: str | None = None
    #: A PersistentVolumeClaim for checkpoints (cluster only): every attempt of a run
    #: resumes from the last one (the local backend keeps them in its state directory).
    checkpoint_claim: str | None = None
    #: More TrainJob options in their JSON form, e.g.
    #: ``[{"type": "QueueName", "queue": "team-a"}]`` for a Kueue queue.
    options: list[dict[str, Any]] = Field(default_factory=list)

    @model_validator(mode="after")
    def _volume_needs_a_path(self) -> JobProfile:
        if self.volume_claim and not self.shared_dir:
            raise ValueError(
                "volume_claim needs shared_dir, the path it is mounted at. Fix: set "
                "shared_dir, e.g. /mnt/shared/retraining."
            )
        return self

    def root(self, default: str) -> str:
        """Where the files go: :attr:`shared_dir`, else ``default``."""
        return self.shared_dir or default

    def trainer_settings(self) -> dict[str, Any]:
        """The ``CustomTrainer`` settings: ``num_nodes`` and ``resources_per_node``."""
        settings: dict[str, Any] = {"num_nodes": self.num_nodes}
        if self.resources_per_node:
            settings["resources_per_node"] = dict(self.resources_per_node)
        return settings

    def job_options(self) -> list[dict[str, Any]]:
        """The TrainJob options in JSON form (every adapter takes that form): the
        ``part-of`` label, the shared volume, then :attr:`options`."""
        chosen: list[Any] = [Labels(PART_OF)]
        if self.volume_claim and self.shared_dir:
            chosen.append(mount_pvc(self.volume_claim, self.shared_dir))
        if self.checkpoint_claim:
            chosen.append(Checkpoints(pvc=self.checkpoint_claim))
        return [o.to_json_dict() for o in chosen] + [dict(o) for o in self.options]

    def spec(self, func: Callable[..., Any], func_args: Mapping[str, Any]) -> TrainJobSpec:
        """The whole TrainJob spec for ``func`` called with ``func_args``."""
        return TrainJobSpec.parse(
            {
                "runtime": self.runtime,
                "trainer": CustomTrainer(
                    func, func_args=dict(func_args), **self.trainer_settings()
                ),
                "options": self.job_options(),
            }
        )


#: One process on this machine (the local backend), files under ``.kf-trainer``.
LOCAL = JobProfile()

#: Two nodes with four GPUs each (``torchrun`` starts one process per GPU and the
#: training function averages gradients across all of them); data and models on the
#: ReadWriteMany claim ``retraining-data``, mounted at ``/mnt/shared``; checkpoints on
#: the claim ``retraining-checkpoints`` (ReadWriteMany too: every node reads them).
CLUSTER = JobProfile(
    runtime="torch-distributed",
    num_nodes=2,
    resources_per_node={"gpu": 4, "cpu": 16, "memory": "64Gi"},
    shared_dir="/mnt/shared/retraining",
    volume_claim="retraining-data",
    checkpoint_claim="retraining-checkpoints",
)

PROFILES = {"local": LOCAL, "cluster": CLUSTER}


def profile(value: JobProfile | Mapping[str, Any] | str | None = None) -> JobProfile:
    """A profile from its name (``local``, ``cluster``), a JSON object or a mapping of
    fields (over :data:`LOCAL`, or over the profile named by ``"base"``).

    Raises ``ValueError`` naming the field and the fix.
    """
    if value is None or isinstance(value, JobProfile):
        return value or LOCAL
    if isinstance(value, str):
        text = value.strip()
        if not text.startswith("{"):
            if text not in PROFILES:
                raise ValueError(
                    f"profile {text!r} is unknown. Fix: use {' or '.join(PROFILES)}, or a JSON "
                    'object of JobProfile fields, e.g. {"base": "cluster", "num_nodes": 4}.'
                )
            return PROFILES[text]
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"profile is not JSON ({exc}). Fix: write a JSON object.") from None
        if not isinstance(value, dict):
            raise ValueError("profile JSON is not an object. Fix: write {...}.")
    fields = dict(value)
    base = profile(str(fields.pop("base", "local")))
    try:
        chosen = JobProfile.model_validate({**base.model_dump(), **fields})
        # Build the spec once: a bad option or resource fails here, naming the field.
        chosen.spec(_probe, {})
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'profile'}: {err['msg']}"
            for err in exc.errors()
        )
        raise ValueError(
            f"invalid profile ({problems}). Fix: use the JobProfile fields "
            f"({', '.join(JobProfile.model_fields)})."
        ) from None
    return chosen


def _probe() -> None:
    """Stands in for the training function when a profile is checked."""
