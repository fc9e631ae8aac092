"""Retention in a real Prefect run (issue 27): the ready-made maintenance flow (with a
saved credentials block, as a served deployment runs it) and the ``prune_trainjobs``
task delete the finished jobs a training flow left, and never a running one. On the
local backend."""

from __future__ import annotations

from pathlib import Path

import pytest
from prefect import flow
from prefect_jobs import add, broken, sleepy

from kf_trainer_core.client import TrainerClient
from kf_trainer_core.errors import TrainJobFailedError
from kf_trainer_core.spec import CustomTrainer, Retention, TrainJobSpec
from kf_trainer_prefect import (
    KubeflowTrainerCredentials,
    prune_trainjobs,
    prune_trainjobs_flow,
    run_trainjob,
    submit_trainjob,
    trainjob_task,
    wait_trainjob,
)

pytestmark = pytest.mark.usefixtures("prefect_server")


def test_the_maintenance_flow_prunes_finished_jobs_only(tmp_path: Path) -> None:
    local = KubeflowTrainerCredentials(backend="local", state_dir=str(tmp_path / "state"))
    local.save("kf-prune-test", overwrite=True)
    done_spec = TrainJobSpec(
        trainer=CustomTrainer(add, func_args={"a": 1}),
        options=[Retention(after_finished_seconds=0)],
    )

    @flow
    def train() -> str:
        return run_trainjob(done_spec, local).name

    finished = train()
    with TrainerClient(local.backend_config()) as client:
        running = client.submit(TrainJobSpec(trainer=CustomTrainer(sleepy))).job.name
        client.wait_for_job_status(running, "Running", timeout=60)

        @flow
        def plan() -> dict[str, object]:
            return prune_trainjobs(local, older_than="1d", honour_retention=False, dry_run=True)

        assert plan()["selected"] == []  # finished seconds ago
        # Without rules, the retention the job was submitted with decides.
        report = prune_trainjobs_flow(credentials="kf-prune-test")
        assert report["deleted"] == [finished]
        assert report["unfinished"] == 1
        assert [j.name for j in client.list_jobs()] == [running]
        client.delete_job(running)


def _names(local: KubeflowTrainerCredentials) -> list[str]:
    with TrainerClient(local.backend_config()) as client:
        return [j.name for j in client.list_jobs()]


def test_on_finish_deletes_a_succeeded_job_after_its_outputs_are_in_prefect(
    tmp_path: Path,
) -> None:
    local = KubeflowTrainerCredentials(backend="local", state_dir=str(tmp_path / "state"))
    spec = TrainJobSpec(trainer=CustomTrainer(add, func_args={"a": 2}))

    @trainjob_task(credentials=local, on_finish="delete-succeeded")
    def summed(a: int = 1, b: int = 2) -> dict[str, int]:
        return {"sum": a + b}

    @flow
    def train() -> tuple[dict[str, object], dict[str, int]]:
        outputs = run_trainjob(spec, local, on_finish="delete-succeeded")
        return outputs.model_dump(mode="json"), summed(a=5)

    outputs, result = train()
    assert outputs["status"] == "Complete"
    assert outputs["result"] == {"sum": 4}
    assert result == {"sum": 7}  # the decorator's task returns the result, then deletes
    assert _names(local) == []  # both finished jobs went once their outputs were stored


def test_on_finish_keeps_a_failed_job_unless_asked(tmp_path: Path) -> None:
    local = KubeflowTrainerCredentials(backend="local", state_dir=str(tmp_path / "state"))
    failing = TrainJobSpec(trainer=CustomTrainer(broken))

    @flow
    def train(action: str) -> None:
        run_trainjob(failing, local, name=f"broken-{action}", on_finish=action)

    with pytest.raises(TrainJobFailedError):
        train("delete-succeeded")
    assert _names(local) == ["broken-delete-succeeded"]  # a failed job stays to inspect
    with pytest.raises(TrainJobFailedError):
        train("delete")
    assert _names(local) == ["broken-delete-succeeded"]  # asked for: deleted after failing
    with pytest.raises(ValueError, match="on_finish: 'remove'"):
        train("remove")  # refused before anything is submitted
    assert _names(local) == ["broken-delete-succeeded"]


def test_on_finish_of_wait_trainjob(tmp_path: Path) -> None:
    local = KubeflowTrainerCredentials(backend="local", state_dir=str(tmp_path / "state"))

    @flow
    def train() -> str:
        job = submit_trainjob(TrainJobSpec(trainer=CustomTrainer(add)), local)
        return wait_trainjob(job, local, on_finish="delete").name

    train()
    assert _names(local) == []


def test_the_blocks_retention_is_stamped_and_honoured(tmp_path: Path) -> None:
    """``retention`` on the credentials block is stamped on every job it submits, and
    a later prune without rules honours it (a spec's own Retention wins)."""
    local = KubeflowTrainerCredentials(
        backend="local",
        state_dir=str(tmp_path / "state"),
        retention={"after_finished_seconds": 0},
    )
    local.save("kf-retention-test", overwrite=True)
    lasting = Retention(after_finished_seconds=86400)

    @flow
    def train() -> list[str]:
        short = TrainJobSpec(trainer=CustomTrainer(add, func_args={"a": 1}))
        long = TrainJobSpec(trainer=CustomTrainer(add, func_args={"a": 2}), options=[lasting])
        return [run_trainjob(s, "kf-retention-test").name for s in (short, long)]

    short, long = train()
    report = prune_trainjobs_flow(credentials="kf-retention-test")  # no rules: the stamps
    assert report["deleted"] == [short]
    assert _names(local) == [long]
