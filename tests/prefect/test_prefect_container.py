"""The same task on the container backend: a block with ``backend="container"`` runs the
job's pod as a container of this machine's engine, with no change to the flow. Skips
where no engine or test image exists."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from prefect import flow
from prefect_jobs import add

from container_support import assert_nothing_left, engine_or_skip, image_or_skip
from kf_trainer_core.cluster.outputs import JobOutputs
from kf_trainer_core.cluster.status import JobState
from kf_trainer_core.spec import CustomTrainer, TrainJobSpec
from kf_trainer_prefect import KubeflowTrainerCredentials, run_trainjob

pytestmark = pytest.mark.usefixtures("prefect_server")


@pytest.fixture
def containers(tmp_path: Path) -> Iterator[KubeflowTrainerCredentials]:
    engine = engine_or_skip()
    credentials = KubeflowTrainerCredentials(
        backend="container",
        state_dir=str(tmp_path / "state"),
        container={"image": image_or_skip(engine), "pull_policy": "Never"},
    )
    yield credentials
    if not (tmp_path / "state").exists():
        return  # the test submitted nothing; reading a missing state dir is an error
    with credentials.get_client() as client:
        jobs = client.list_jobs()
        for job in jobs:
            client.delete_job(job.name)
    assert_nothing_left(engine, [str(job.uid) for job in jobs])


def test_run_in_a_container(containers: KubeflowTrainerCredentials) -> None:
    @flow
    def train() -> JobOutputs:
        spec = TrainJobSpec(
            runtime="jax-distributed", trainer=CustomTrainer(add, func_args={"a": 2})
        )
        return run_trainjob(spec, containers)

    out = train()
    assert out.status is JobState.COMPLETE
    assert out.result == {"sum": 4}


def test_the_block_round_trips_a_container_config(containers: KubeflowTrainerCredentials) -> None:
    from kf_trainer_core.config import ContainerConfig
    from kf_trainer_prefect.credentials import credentials_from

    config = containers.backend_config()
    assert isinstance(config, ContainerConfig)
    assert config.pull_policy == "Never"
    again = credentials_from(config).backend_config()
    assert again == config
    with pytest.raises(ValueError, match="container applies only to backend 'container'"):
        KubeflowTrainerCredentials(backend="local", container={"image": "x"})
