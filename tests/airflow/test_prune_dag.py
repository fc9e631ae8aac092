"""Retention in a real Airflow run (issue 27): the ready-made maintenance DAG prunes
the finished job a training DAG left, its dry run deletes nothing, and a task with
``on_finish_action="delete"`` deletes its job only after its outputs are in XCom. On the
local backend, through the connection, with ``dag.test()``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from dagtest import CONN_ENV, connection_json, run_dag

from kf_trainer_core.client import TrainerClient
from kf_trainer_core.config import LocalConfig

pytestmark = pytest.mark.usefixtures("airflow_db")


@pytest.fixture
def local(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[TrainerClient]:
    state = tmp_path / "state"
    monkeypatch.setenv(CONN_ENV, connection_json(backend="local", state_dir=str(state)))
    with TrainerClient(LocalConfig(state_dir=str(state))) as client:
        yield client
        for job in client.list_jobs():
            client.delete_job(job.name)


def test_the_maintenance_dag_prunes_what_a_training_dag_left(local: TrainerClient) -> None:
    assert run_dag("kf_train").state == "success"
    (job,) = local.list_jobs()
    assert job.status.value == "Complete"

    plan = run_dag("kf_prune_plan")
    assert plan.state == "success"
    assert [e["name"] for e in plan.xcom("prune")["selected"]] == [job.name]
    assert [j.name for j in local.list_jobs()] == [job.name]  # a dry run

    pruned = run_dag("kf_prune")
    assert pruned.state == "success"
    assert pruned.xcom("prune")["deleted"] == [job.name]
    assert local.list_jobs() == []


def test_a_task_deletes_its_job_once_its_outputs_are_in_xcom(local: TrainerClient) -> None:
    run = run_dag("kf_train_then_delete")
    assert run.state == "success"
    assert run.xcom("train", "result") == {"double": 42}
    assert local.list_jobs() == []
