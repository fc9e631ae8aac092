"""Checkpoints on the local backend (issue 19, part 3): every attempt of an identity
shares one directory under the state directory, so a retry after a killed pod resumes
from the last checkpoint; only an explicit clean removes it, and only that identity's."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from checkpoint_jobs import counting
from local_jobs import trivial

from kf_trainer_core import checkpoints as ck
from kf_trainer_core.backends.local._common import POD_ENV
from kf_trainer_core.backends.local.procs import processes_of_job
from kf_trainer_core.client import AsyncTrainerClient, TrainerClient
from kf_trainer_core.cluster.status import JobState
from kf_trainer_core.errors import FailureClass
from kf_trainer_core.spec import CustomTrainer, TrainJobSpec
from kf_trainer_core.spec.checkpoint_storage import Checkpoints, CheckpointsInUseError


def _spec(ready: Path, *options: object) -> TrainJobSpec:
    args = {"steps": 8, "stall_after": 3, "ready": str(ready)}
    return TrainJobSpec(trainer=CustomTrainer(counting, func_args=args), options=list(options))


def _wait_for(path: Path, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def _kill_pod_processes(uid: str) -> int:
    """SIGKILL the training processes of a job (not its supervisor): a lost node."""
    killed = 0
    for pid in processes_of_job(uid):
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        if f"{POD_ENV}=".encode() in env:
            os.kill(pid, signal.SIGKILL)
            killed += 1
    return killed


def test_a_killed_job_resumes_from_its_last_checkpoint(
    client: TrainerClient, state_dir: Path, tmp_path: Path
) -> None:
    identity = ("dag", "train", "run-1")
    spec = _spec(tmp_path / "ready")
    first = client.submit(spec, identity=identity).job
    _wait_for(tmp_path / "ready")
    assert _kill_pod_processes(str(first.uid)) >= 1
    failed = client.wait_for_job_status(first.name, "Failed", timeout=60)
    failure = client.explain_failure(failed.name)
    assert failure.failure_class is FailureClass.INFRASTRUCTURE, failure.classified_by

    # The retry of the infrastructure failure: the next attempt of the same identity.
    retry = client.submit(spec, identity=identity)
    assert retry.created
    assert retry.job.name != first.name
    job, result = client.wait(retry.job.name, timeout=60)
    assert job.status is JobState.COMPLETE
    where = ck.local_dir(state_dir.resolve(), client.namespace, "dag/train/run-1")
    assert result == {"resumed_from": 4, "total": sum(range(8)), "dir": str(where)}
    logs = "\n".join(client.get_job_logs(retry.job.name))
    assert "starting at step 4" in logs
    assert "step 0 saved" not in logs  # nothing was trained twice
    assert [ck.step_of(p) for p in ck.checkpoints(where)] == list(range(8))
    # The location is the identity's, not the attempt's.
    assert client.checkpoint_location(identity).local_path == where


def test_clean_removes_only_that_identity_and_never_while_it_runs(
    client: TrainerClient, state_dir: Path, tmp_path: Path
) -> None:
    kept_id, cleaned_id = ("dag", "train", "keep"), ("dag", "train", "clean")
    spec = TrainJobSpec(trainer=CustomTrainer(counting, func_args={"steps": 2}))
    for ident in (kept_id, cleaned_id):
        job, _ = client.wait(client.submit(spec, identity=ident).job.name, timeout=60)
        assert job.status is JobState.COMPLETE
    kept = client.checkpoint_location(kept_id).local_path
    cleaned = client.checkpoint_location(cleaned_id).local_path
    assert kept is not None
    assert cleaned is not None
    assert ck.latest(kept) is not None
    assert ck.latest(cleaned) is not None

    assert client.clean_checkpoints(cleaned_id).local_path == cleaned
    assert not cleaned.exists()
    assert ck.latest(kept) is not None

    # An attempt that runs may still write: cleaning is refused.
    running = client.submit(_spec(tmp_path / "ready-run"), identity=("dag", "train", "busy")).job
    _wait_for(tmp_path / "ready-run")
    with pytest.raises(CheckpointsInUseError, match="has not finished"):
        client.clean_checkpoints(("dag", "train", "busy"))
    client.cancel_job(running.name)
    assert ck.latest(kept) is not None


async def test_the_async_client_finds_the_same_location(
    client: TrainerClient, aclient: AsyncTrainerClient, state_dir: Path
) -> None:
    spec = TrainJobSpec(trainer=CustomTrainer(trivial))
    client.wait(client.submit(spec, identity=("a", "b")).job.name, timeout=60)
    where = await aclient.checkpoint_location(("a", "b"))
    assert where == client.checkpoint_location(("a", "b"))
    assert not (where.local_path or state_dir).exists()  # a job that saved nothing: no dir
    assert (await aclient.clean_checkpoints(("a", "b"))).local_path == where.local_path


def test_checkpoints_can_be_turned_off(client: TrainerClient) -> None:
    spec = TrainJobSpec(
        trainer=CustomTrainer(counting, func_args={"steps": 1}),
        options=[Checkpoints(enabled=False)],
    )
    _, result = client.wait(client.submit(spec, identity=("off",)).job.name, timeout=60)
    assert result == {"resumed_from": 0, "total": 0, "dir": None}
