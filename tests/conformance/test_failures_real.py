"""Failure reasons as the controllers report them: pods that exit non-zero or are
OOMKilled on a runtime with ``backoffLimit: 0`` (the TrainJob's ``Failed`` condition, the
steps, the failure class, the CLI's exit code), and jobs that cannot be scheduled for
want of GPUs, CPU or memory (what the wait says, and the steps meanwhile). One body on
the test bed and the real controllers."""

from __future__ import annotations

import json
import re

import pytest
from conformance_support import Cluster, until, wait_on
from test_real_controllers import cli

from kf_trainer_core.client import AsyncTrainerClient, TrainerClient
from kf_trainer_core.cluster.status import JobState
from kf_trainer_core.errors import FailureClass, TrainJobFailedError, TrainJobTimeoutError
from kf_trainer_core.spec import CustomTrainer, TrainJobSpec


def failed_job(client: TrainerClient, cluster: Cluster, behaviour: str, **kw: int) -> str:
    runtime = cluster.fast_fail_runtime()
    return client.submit(cluster.spec(behaviour, runtime=runtime, **kw)).job.name


@pytest.mark.parametrize("exit_code", [2, 42, 126, 127, 255])
def test_the_exit_code_reaches_the_wait(
    client: TrainerClient, controllers: Cluster, exit_code: int
) -> None:
    name = failed_job(client, controllers, "fail", exit_code=exit_code)
    with pytest.raises(TrainJobFailedError) as info:
        client.wait(name, timeout=120)
    assert info.value.failure.exit_code == exit_code
    assert info.value.failure.container_reason == "Error"
    assert info.value.failure_class is FailureClass.USER_CODE


@pytest.mark.parametrize(("behaviour", "reason"), [("fail", "Error"), ("oom", "OOMKilled")])
def test_failed_condition_and_steps(
    client: TrainerClient, controllers: Cluster, behaviour: str, reason: str
) -> None:
    name = failed_job(client, controllers, behaviour)
    job = until(lambda: (j := client.get_job(name)).status is JobState.FAILED and j, what="Failed")
    (failed,) = [c for c in job.conditions if c["type"] == "Failed"]
    assert failed["status"] == "True"
    assert failed["reason"] == "FailedJobs"
    assert not any(c["type"] == "Complete" and c["status"] == "True" for c in job.conditions)
    (step,) = job.steps
    assert step.status == "Failed"
    assert step.container_reason == reason
    assert client.explain_failure(name).container_reason == reason


@pytest.mark.parametrize("face", ["sync", "async"])
async def test_oom_is_a_resources_failure(
    controllers: Cluster, face: str, client: TrainerClient, aclient: AsyncTrainerClient
) -> None:
    name = failed_job(client, controllers, "oom")
    with pytest.raises(TrainJobFailedError) as info:
        await wait_on(face, client, aclient, name, timeout=120)
    assert info.value.failure.exit_code == 137
    assert "OOMKilled" in str(info.value)
    assert info.value.failure_class in (FailureClass.CAPACITY, FailureClass.CONFIGURATION)


def test_cli_wait_and_get_on_a_failed_job(
    client: TrainerClient, controllers: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    name = failed_job(client, controllers, "fail", exit_code=3)
    code, out = cli(capsys, controllers, "jobs", "wait", name, "--timeout", "120")
    assert code == 1, out
    assert "exit code 3" in out
    code, out = cli(capsys, controllers, "jobs", "get", name, "-o", "json")
    assert code == 0, out
    data = json.loads(out)
    assert data["job"]["status"] == "Failed"
    assert data["failure"]["exit_code"] == 3
    assert data["failure"]["step"] == "node-0"


def test_a_failed_two_node_job_names_a_failed_step(
    client: TrainerClient, controllers: Cluster
) -> None:
    name = failed_job(client, controllers, "fail", exit_code=4, nodes=2)
    with pytest.raises(TrainJobFailedError) as info:
        client.wait(name, timeout=120)
    assert info.value.failure.step in ("node-0", "node-1")
    assert info.value.failure.exit_code == 4
    job = client.get_job(name)
    assert job.num_nodes == 2
    assert any(s.status == "Failed" and s.exit_code == 4 for s in job.steps)


# -- jobs that cannot be scheduled -------------------------------------------------
@pytest.mark.parametrize(
    ("resources", "short"),
    [({"gpu": 9}, "nvidia.com/gpu"), ({"cpu": "100"}, "cpu"), ({"memory": "300Gi"}, "memory")],
)
@pytest.mark.parametrize("face", ["sync", "async"])
async def test_too_big_for_any_node(
    controllers: Cluster,
    client: TrainerClient,
    aclient: AsyncTrainerClient,
    resources: dict[str, object],
    short: str,
    face: str,
) -> None:
    # Every node (kwok's and the test bed's) has 8 GPUs, 64 CPUs and 256Gi.
    trainer = CustomTrainer(controllers.spec().trainer.func, resources_per_node=resources)
    name = client.submit(TrainJobSpec(trainer=trainer)).job.name
    with pytest.raises(TrainJobTimeoutError, match="did not start within 3s") as info:
        await wait_on(face, client, aclient, name, timeout=60, startup_timeout=3)
    assert info.value.failure_class is FailureClass.CAPACITY
    # The scheduler's reason once, with what the pod asks.
    assert re.search(
        rf"cannot be scheduled: 0/4 nodes can give it \S+ {short} \(each has fewer in all or fewer unused\)\n",
        str(info.value),
    )
    assert info.value.failure is not None
    assert info.value.failure.container_reason == "Unschedulable"
    assert f"Insufficient {short}" in info.value.failure.message
    (step,) = client.get_job(name).steps
    assert step.status == "Pending"


def test_an_unschedulable_job_waits_on_without_a_startup_timeout(
    client: TrainerClient, controllers: Cluster
) -> None:
    trainer = CustomTrainer(controllers.spec().trainer.func, resources_per_node={"gpu": 9})
    name = client.submit(TrainJobSpec(trainer=trainer)).job.name
    with pytest.raises(TrainJobTimeoutError, match="did not reach Complete") as info:
        client.wait(name, timeout=4)
    assert "0/4 nodes can give it 9 nvidia.com/gpu (each has fewer in all or fewer unused)" in str(
        info.value
    )
    assert client.get_job(name).status is JobState.CREATED
