"""TrainJobSensor pokes against the test server (DAG runs are in test_dags.py)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk import PokeReturnValue
from airflow.sdk.exceptions import TaskDeferred

from kf_trainer_airflow._args import DEFAULT_RESUME_GRACE
from kf_trainer_airflow.operators.trainjob import TrainJobFailedException
from kf_trainer_airflow.sensors.trainjob import TrainJobSensor
from kf_trainer_core.client import TrainerClient
from kf_trainer_core.config import KubernetesConfig
from kf_trainer_core.errors import SpecError
from kf_trainer_core.spec import Annotations, CustomTrainer, TrainJobSpec
from kf_trainer_core.testing.scenarios import SCENARIO_ANNOTATION


def train() -> int:
    return 1


@pytest.fixture
def client(kf_conn: Path) -> Iterator[TrainerClient]:
    with TrainerClient(KubernetesConfig(kubeconfig=str(kf_conn))) as c:
        yield c


def submit(client: TrainerClient, scenario: str, ident: str, *, wait: str | None = None) -> str:
    spec = TrainJobSpec(
        trainer=CustomTrainer(train), options=[Annotations({SCENARIO_ANNOTATION: scenario})]
    )
    name = client.submit(spec, identity=ident).job.name
    if wait:
        client.wait(name, (wait,), timeout=30)
    return name


def sensor(name: str, **kwargs: Any) -> TrainJobSensor:
    return TrainJobSensor(
        task_id="sense", job_name=name, kubeflow_trainer_conn_id="kf_test", **kwargs
    )


def test_arguments_checked_at_parse_time() -> None:
    with pytest.raises(ValueError, match=r"target_status \['Done'\] is not a job state"):
        sensor("x", target_status="Done")
    with pytest.raises(ValueError, match="unknown step 'trainer'"):
        sensor("x", step="trainer")
    with pytest.raises(ValueError, match=r"unknown step status \['Complete'\]"):
        sensor("x", step="node-0", target_status="Complete")
    assert sensor("x", step="{{ params.step }}").step == "{{ params.step }}"


def test_more_arguments_checked_at_parse_time() -> None:
    with pytest.raises(ValueError, match=r"job_name: 'My_Job' is not a valid TrainJob name"):
        sensor("My_Job")
    with pytest.raises(
        ValueError, match=r"recheck_interval: a str is not a number of seconds \(got '30s'\)\. Fix"
    ):
        sensor("x", recheck_interval="30s")
    with pytest.raises(ValueError, match=r"resume_grace: -1 seconds is not a duration\. Fix"):
        sensor("x", resume_grace=-1)
    with pytest.raises(SpecError, match=r"target_statu: unknown argument.*`target_status`"):
        sensor("x", target_statu="Running")
    templated = "{{ ti.xcom_pull('train', key='job_name') }}"
    assert sensor(templated).job_name == templated


def test_job_states(client: TrainerClient) -> None:
    running = submit(client, "never-finish", "s/running", wait="Running")
    assert sensor(running).poke({}) is False
    result = sensor(running, target_status=["Running"]).poke({})
    assert isinstance(result, PokeReturnValue)
    assert result.xcom_value == {"job_name": running, "namespace": "default", "status": "Running"}

    done = submit(client, "success", "s/done", wait="Complete")
    result = sensor(done).poke({})
    assert isinstance(result, PokeReturnValue)
    assert result.xcom_value["status"] == "Complete"
    assert result.xcom_value["steps"][0]["name"] == "node-0"
    # Waiting for Running, and it already finished: it did run.
    assert isinstance(sensor(done, target_status="Running").poke({}), PokeReturnValue)


def test_failed_job_fails_the_sensor_with_the_reason(client: TrainerClient) -> None:
    name = submit(client, "fail", "s/failed")
    deadline = time.monotonic() + 20
    while client.get_job(name).status.value != "Failed":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    with pytest.raises(TrainJobFailedException) as info:
        sensor(name).poke({})
    text = str(info.value)
    assert f"TrainJob default/{name} is Failed, not Complete" in text
    assert "exit code 1" in text
    assert info.value.failure is not None
    with pytest.raises(TrainJobFailedException, match="step node-0 is Failed"):
        sensor(name, step="node-0").poke({})


def test_missing_job(client: TrainerClient) -> None:
    with pytest.raises(TrainJobFailedException, match=r"does not exist\. Fix: check the name"):
        sensor("no-such-job").poke({})


def test_step_not_reached_yet(client: TrainerClient) -> None:
    name = submit(client, '{"preset": "slow-start"}', "s/slow")
    assert sensor(name, step="node-0", target_status="Succeeded").poke({}) is False


def test_deferrable_sensor_defers_only_when_needed(client: TrainerClient) -> None:
    done = submit(client, "success", "s/d-done", wait="Complete")
    value = sensor(done, deferrable=True).execute({})
    assert value["status"] == "Complete"
    running = submit(client, "never-finish", "s/d-running", wait="Running")
    with pytest.raises(TaskDeferred) as info:
        sensor(running, deferrable=True, step="node-0", timeout=120).execute({})
    _, kwargs = info.value.trigger.serialize()
    assert (kwargs["step"], kwargs["step_status"], kwargs["on_kill_action"]) == (
        "node-0",
        ["Succeeded"],
        "keep",  # a sensor never cancels a job it does not own
    )
    assert kwargs["timeout"] == 120.0
    assert kwargs["resume_grace"] == DEFAULT_RESUME_GRACE
    assert abs(kwargs["deferred_at"] - time.time()) < 60


def test_execute_complete() -> None:
    step = {"name": "node-0", "status": "Running"}
    ok = {"status": "success", "job_name": "j", "namespace": "n", "step": step}
    assert sensor("j", step="node-0").execute_complete({}, ok) == step
    bad = {"status": "failed", "job_name": "j", "namespace": "n", "message": "TrainJob n/j: boom"}
    with pytest.raises(TrainJobFailedException, match="boom"):
        sensor("j").execute_complete({}, bad)


def test_a_job_kueue_can_never_admit_fails_the_poke(
    client: TrainerClient, kube: Any, kf_conn: Path
) -> None:
    from kf_trainer_core.cluster.kueue import QUEUE_NAME_LABEL
    from kf_trainer_core.errors import CapacityFailure
    from kf_trainer_core.spec import Labels

    sim = kube.install_kueue()
    sim.add_cluster_queue("gpus", {"nvidia.com/gpu": 4})
    sim.add_local_queue("default", "team-a", "gpus")
    spec = TrainJobSpec(
        trainer=CustomTrainer(train, resources_per_node={"gpu": 8}),
        options=[Labels({QUEUE_NAME_LABEL: "team-a"})],
    )
    name = client.submit(spec).job.name
    deadline = time.monotonic() + 15
    while not ((q := client.get_job(name).queue) and q.never_admissible):
        assert time.monotonic() < deadline, "Kueue never said the job cannot fit"
        time.sleep(0.05)
    for step in (None, "node-0"):
        with pytest.raises(TrainJobFailedException) as caught:
            sensor(name, step=step, target_status="Running" if step else "Complete").poke({})
        assert isinstance(caught.value, CapacityFailure)
        assert "can never be admitted by Kueue" in str(caught.value)
        assert "maximum capacity of 4" in str(caught.value)
