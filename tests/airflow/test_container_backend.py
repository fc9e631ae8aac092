"""A DAG on the container backend (``backend: container`` in the connection): the
TrainJob's pod is a container of this machine's engine, the function runs in the test
image. Only the connection changes. Skips where no engine or test image exists."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from container_support import assert_nothing_left, engine_or_skip, image_or_skip
from dagtest import CONN_ENV, connection_json, run_dag

from kf_trainer_core.client import TrainerClient
from kf_trainer_core.config import ContainerConfig

pytestmark = pytest.mark.usefixtures("airflow_db")


@pytest.fixture
def containers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[TrainerClient]:
    engine = engine_or_skip()
    image = image_or_skip(engine)
    state = str(tmp_path / "state")
    monkeypatch.setenv(
        CONN_ENV,
        connection_json(backend="container", state_dir=state, image=image, pull_policy="Never"),
    )
    with TrainerClient(ContainerConfig(state_dir=state, image=image)) as client:
        yield client
        jobs = client.list_jobs()
        for job in jobs:
            client.delete_job(job.name)
        assert_nothing_left(engine, [str(job.uid) for job in jobs])


def test_train_in_a_container(containers: TrainerClient, capfd: pytest.CaptureFixture[str]) -> None:
    run = run_dag("kf_train")
    assert run.state == "success"
    assert run.xcom("train", "result") == {"double": 42}
    assert "[node-0] doubling 21" in capfd.readouterr().out
    (job,) = containers.list_jobs()
    assert job.status.value == "Complete"
    assert containers.get_job_outputs(job.name).result == {"double": 42}
