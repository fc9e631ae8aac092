"""Attempts per orchestrator identity on the local backend (issue 14, item 2): the
attempt annotation decides, so a retry never starts a second live attempt and a retry
after failures always runs a fresh one, deleted old attempts or not."""

from __future__ import annotations

from pathlib import Path

from local_jobs import scripted

from kf_trainer_core.client import TrainerClient
from kf_trainer_core.cluster.status import JobState
from kf_trainer_core.programs.submit import attempt_of
from kf_trainer_core.spec import CustomTrainer, TrainJobSpec


def _spec(counter: Path, plan: str) -> TrainJobSpec:
    return TrainJobSpec(
        trainer=CustomTrainer(scripted, func_args={"counter": str(counter), "plan": plan})
    )


def test_retries_adopt_the_live_attempt(client: TrainerClient, tmp_path: Path) -> None:
    spec = _spec(tmp_path / "runs", "fail,sleep")
    identity = ("dag", "train", "run-1")
    a0 = client.submit(spec, identity=identity).job.name
    client.wait_for_job_status(a0, "Failed", timeout=60)
    a1 = client.submit(spec, identity=identity)
    assert a1.created
    assert a1.job.name != a0
    for _ in range(2):
        again = client.submit(spec, identity=identity)
        assert (again.job.name, again.created) == (a1.job.name, False)
    jobs = [j for j in client.list_jobs() if j.identity == "dag/train/run-1"]
    assert sorted(j.name for j in jobs) == sorted([a0, a1.job.name])


def test_a_retry_after_deleted_failures_runs_afresh(client: TrainerClient, tmp_path: Path) -> None:
    spec = _spec(tmp_path / "runs", "fail,fail,ok")
    identity = ("dag", "train", "run-2")
    a0 = client.submit(spec, identity=identity).job.name
    client.wait_for_job_status(a0, "Failed", timeout=60)
    a1 = client.submit(spec, identity=identity).job.name
    client.wait_for_job_status(a1, "Failed", timeout=60)
    assert client.delete_job(a0)
    # Submit creates attempt 0 first (one request for a fresh identity): with attempt 0
    # deleted, the identity starts afresh under that name (docs/safety.md).
    retry = client.submit(spec, identity=identity)
    assert retry.created
    assert retry.job.name == a0
    assert attempt_of(retry.obj) == 0
    job, result = client.wait(retry.job.name, timeout=60)
    assert job.status is JobState.COMPLETE
    assert result == "run 2"
