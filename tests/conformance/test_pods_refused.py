"""Pods the API server refuses to create: a trainer whose service account does not exist.
The real Job controller retries for ever, writing ``FailedCreate`` Warning Events on the
Job, and no pod ever appears, so the TrainJob reads Created until someone looks. A wait
that runs out of time must say why (the refusal, the step, a configuration failure),
not only that the job did not start. One body on the test bed (the ``pods-refused``
scenario) and the real controllers (a missing service account)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from conformance_support import Cluster, runtime_patch, wait_on
from train_functions import train_linear

from kf_trainer_core.client import AsyncTrainerClient, TrainerClient
from kf_trainer_core.cluster.status import JobState
from kf_trainer_core.errors import FailureClass, TrainJobTimeoutError
from kf_trainer_core.spec import (
    Annotations,
    CustomTrainer,
    PodSpecPatch,
    TrainJobSpec,
)
from kf_trainer_core.testing.scenarios import SCENARIO_ANNOTATION


def refused_pods(cluster: Cluster) -> Any:
    """An option that gets the trainer's pods refused by the API server."""
    if not cluster.real:
        return Annotations({SCENARIO_ANNOTATION: json.dumps({"preset": "pods-refused"})})
    return runtime_patch(pod_spec=PodSpecPatch(service_account_name="missing"))


@pytest.mark.parametrize("face", ["sync", "async"])
async def test_a_wait_that_runs_out_says_the_pods_are_refused(
    controllers: Cluster, face: str, client: TrainerClient, aclient: AsyncTrainerClient
) -> None:
    spec = TrainJobSpec(trainer=CustomTrainer(train_linear), options=[refused_pods(controllers)])
    name = client.submit(spec).job.name
    with pytest.raises(TrainJobTimeoutError) as info:
        await wait_on(face, client, aclient, name, timeout=8)
    failure = info.value.failure
    assert failure is not None, str(info.value)
    assert failure.reason == "FailedCreate"
    assert failure.step == "node"
    assert 'serviceaccount "missing" not found' in failure.message
    assert failure.failure_class is FailureClass.CONFIGURATION
    assert info.value.failure_class is FailureClass.CONFIGURATION
    # Said as what holds the job up: Pending, the refusal, one fix of its class.
    assert info.value.waiting is not None
    assert info.value.waiting.state == "Pending"
    first = str(info.value).splitlines()[0]
    assert "it is Pending: the API server refuses the pods of step node: " in first
    assert 'serviceaccount "missing" not found' in first
    assert "fix: fix the job's configuration" in str(info.value)
    job = client.get_job(name)
    assert job.status is JobState.CREATED
    assert not any(step.name.startswith("node") for step in job.steps)
