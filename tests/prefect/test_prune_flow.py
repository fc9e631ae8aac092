"""Retention in a real Prefect run (issue 27): the ready-made maintenance flow (with a
saved credentials block, as a served deployment runs it) and the ``prune_trainjobs``
task delete the finished jobs a training flow left, and never a running one. On the
local backend."""

from __future__ import annotations

from pathlib import Path

import pytest
from prefect import flow
from prefect_jobs import add, sleepy

from kf_trainer_core.client import TrainerClient
from kf_trainer_core.spec import CustomTrainer, Retention, TrainJobSpec
from kf_trainer_prefect import (
    KubeflowTrainerCredentials,
    prune_trainjobs,
    prune_trainjobs_flow,
    run_trainjob,
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
