"""A DAG on the container backend (``backend: container`` in the connection): the
TrainJob's pod is a container of this machine's engine, the function runs in the test
image. Only the connection changes. Skips where no engine or test image exists."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from dagtest import CONN_ENV, connection_json, run_dag

from container_support import assert_nothing_left, engine_or_skip, image_or_skip
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


def test_airflow_connection_selects_the_container_backend() -> None:
    from kf_trainer_airflow.hooks.trainer import ConnectionConfigError, parse_connection

    conn = parse_connection(
        "kubeflow_trainer",
        host="unix:///run/podman/podman.sock",
        extra={"backend": "container", "image": "img", "auto_remove": "false"},
    )
    assert isinstance(conn.config, ContainerConfig)
    assert conn.config.host == "unix:///run/podman/podman.sock"
    assert conn.config.auto_remove is False
    with pytest.raises(ConnectionConfigError, match="image applies only to backend 'container'"):
        parse_connection("kubeflow_trainer", extra={"image": "img"})
    with pytest.raises(
        ConnectionConfigError, match="kubeconfig_path applies only to backend 'kubernetes'"
    ):
        parse_connection(
            "kubeflow_trainer", extra={"backend": "container", "kubeconfig_path": "/k"}
        )
