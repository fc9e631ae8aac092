"""Checkpoints on the container backend: the identity's directory under the state
directory is bind-mounted where a cluster pod would see it, and the next attempt
resumes from what the failed one saved there."""

from __future__ import annotations

from pathlib import Path

from container_jobs import resume_once

from kf_trainer_core.checkpoints import DEFAULT_MOUNT, identity_key, local_dir
from kf_trainer_core.client import TrainerClient
from kf_trainer_core.cluster.status import JobState
from kf_trainer_core.spec import CustomTrainer, TrainJobSpec


def test_every_attempt_mounts_the_identitys_directory(
    client: TrainerClient, state_dir: Path
) -> None:
    spec = TrainJobSpec(trainer=CustomTrainer(resume_once))
    identity = ("dag", "train", "run-1")
    first = client.submit(spec, identity=identity).job.name
    client.wait_for_job_status(first, "Failed", timeout=120)
    retry = client.submit(spec, identity=identity).job.name
    job, result = client.wait(retry, timeout=120)
    assert job.status is JobState.COMPLETE
    key = identity_key("dag/train/run-1")
    assert result == {"resumed_from": 1, "dir": f"{DEFAULT_MOUNT}/{client.namespace}/{key}"}
    on_host = local_dir(state_dir.resolve(), client.namespace, "dag/train/run-1")
    assert [p.name for p in on_host.iterdir()] == ["step-0000000000.json"]
