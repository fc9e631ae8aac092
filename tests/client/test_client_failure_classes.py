"""Failure classes over real HTTP: every class produced by a test-server scenario or
fault, on the error (type and ``failure``), in ``explain_failure`` and in the outputs;
and the retry of an infrastructure failure as the idempotent next attempt."""

from __future__ import annotations

import pickle
from typing import Any

import pytest
from train_functions import train_linear

from kf_trainer_core.client import AsyncTrainerClient, TrainerClient
from kf_trainer_core.cluster.failures import failure_class_of, should_retry
from kf_trainer_core.cluster.status import JobState
from kf_trainer_core.errors import (
    CapacityFailure,
    ConfigurationFailure,
    FailureClass,
    InfrastructureFailure,
    TrainJobCreationFailedError,
    TrainJobFailedError,
    TrainJobTimeoutError,
    UserCodeFailure,
)
from kf_trainer_core.k8s.errors import ApiError
from kf_trainer_core.spec import Annotations, CustomTrainer, TrainJobSpec
from kf_trainer_core.testing.scenarios import SCENARIO_ANNOTATION, Scenario
from kf_trainer_core.testing.server import KubeTestServer


def spec(scenario: str | None = None) -> TrainJobSpec:
    options: list[Any] = [Annotations({SCENARIO_ANNOTATION: scenario})] if scenario else []
    return TrainJobSpec(trainer=CustomTrainer(train_linear, num_nodes=1), options=options)


CASES = [
    # scenario, marker type, class, evidence
    ("fail", UserCodeFailure, FailureClass.USER_CODE, "raised RuntimeError: simulated"),
    ('{"preset": "fail", "exit_code": 3, "logs": ["bad input"]}', UserCodeFailure,
     FailureClass.USER_CODE, "exited with code 3"),
    ("oom", CapacityFailure, FailureClass.CAPACITY, "out of memory (OOMKilled)"),
    ("deadline", CapacityFailure, FailureClass.CAPACITY, "DeadlineExceeded"),
    ("evicted", InfrastructureFailure, FailureClass.INFRASTRUCTURE, "Evicted: The node was low"),
    ('{"preset": "image-pull", "image_pull_fail_after": 0.2}', ConfigurationFailure,
     FailureClass.CONFIGURATION, "the image cannot be pulled"),
    ("creation-failure", ConfigurationFailure, FailureClass.CONFIGURATION,
     "could not build the JobSet"),
]  # fmt: skip


@pytest.mark.parametrize(("scenario", "marker", "klass", "evidence"), CASES)
def test_each_class_from_a_scenario(
    client: TrainerClient,
    scenario: str,
    marker: type[BaseException],
    klass: FailureClass,
    evidence: str,
) -> None:
    name = client.submit(spec(scenario)).job.name
    with pytest.raises(TrainJobFailedError) as caught:
        client.wait(name, timeout=30)
    err = caught.value
    assert isinstance(err, marker)
    assert err.failure_class is klass
    assert err.failure.failure_class is klass
    assert evidence in err.failure.classified_by
    assert f"failure class: {klass.value}" in str(err)
    assert failure_class_of(err) is klass
    assert should_retry(err) is (klass is FailureClass.INFRASTRUCTURE)
    # Across processes (Airflow, Prefect) the class travels with the error.
    again = pickle.loads(pickle.dumps(err))
    assert type(again) is type(err)
    assert again.failure.failure_class is klass
    if not isinstance(err, TrainJobCreationFailedError):
        assert client.explain_failure(name).failure_class is klass


def test_stuck_start_is_classified(client: TrainerClient) -> None:
    # An image that does not exist never starts: the startup timeout says so, classified.
    name = client.submit(spec("image-pull")).job.name
    with pytest.raises(TrainJobTimeoutError) as caught:
        client.wait(name, timeout=30, startup_timeout=0.5)
    assert caught.value.failure_class is FailureClass.CONFIGURATION
    assert failure_class_of(caught.value) is FailureClass.CONFIGURATION


def test_api_server_trouble_is_infrastructure(
    client: TrainerClient, server: KubeTestServer
) -> None:
    name = client.submit(spec()).job.name
    server.faults.fail_next(20, code=503, retry_after=None, verb="get", resource="trainjobs")
    with pytest.raises(ApiError) as caught:
        client.get_job(name)
    assert caught.value.code == 503
    assert failure_class_of(caught.value) is FailureClass.INFRASTRUCTURE
    assert should_retry(caught.value)
    server.faults.clear()
    server.faults.fail_next(1, code=422, verb="create", resource="trainjobs")
    with pytest.raises(Exception) as refused:
        client.submit(spec("progress"))
    assert failure_class_of(refused.value) is FailureClass.CONFIGURATION


def test_infrastructure_retry_is_the_next_attempt(
    client: TrainerClient, server: KubeTestServer
) -> None:
    identity = ("dag", "train", "run-1")
    first = client.build(spec(), identity=identity).name
    server.controller.script(first, Scenario.preset("evicted"))
    with pytest.raises(InfrastructureFailure):
        client.run(spec(), identity=identity, timeout=30)
    # The retried task: same spec, same identity -> one new attempt, which runs.
    outputs = client.run(spec(), identity=identity, timeout=30)
    assert outputs.status is JobState.COMPLETE
    assert outputs.name != first
    # Exactly one new attempt: the failed one kept (its evidence), nothing duplicated.
    # (Reattaching a third call is the attempt numbering's business, tested with it.)
    jobs = client.list_jobs()
    assert sorted(j.name for j in jobs) == sorted([first, outputs.name])


async def test_async_client_classifies_the_same(aclient: AsyncTrainerClient) -> None:
    name = (await aclient.submit(spec("evicted"))).job.name
    with pytest.raises(InfrastructureFailure) as caught:
        await aclient.wait(name, timeout=30)
    assert isinstance(caught.value, TrainJobFailedError)
    failure = await aclient.explain_failure(name)
    assert failure.failure_class is FailureClass.INFRASTRUCTURE
    assert failure.retryable
