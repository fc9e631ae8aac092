"""The Prefect adapter once on the real control plane (issue 23, item 5): real flows on
the session's Prefect server, the job run by the real JobSet and Trainer controllers on
kwok's nodes. A succeeded job whose result cannot be read (kwok's nodes serve no log)
is a success for ``run_trainjob`` and an error saying why for a ``trainjob_task``, whose
return value is the function's (item 4)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from prefect import flow
from prefect_support import read_logs
from train_functions import train_linear

from kf_trainer_core.cluster.outputs import JobOutputs
from kf_trainer_core.cluster.status import JobState
from kf_trainer_core.errors import TrainJobResultUnreachableError
from kf_trainer_core.spec import (
    MANAGED_BY_MULTIKUEUE,
    CustomTrainer,
    ManagedBy,
    QueueName,
    TrainJobSpec,
)
from kf_trainer_core.testing import kwok
from kf_trainer_core.testing.control_plane import ControlPlane
from kf_trainer_core.testing.control_plane.multikueue import MultiKueuePair
from kf_trainer_prefect import KubeflowTrainerCredentials, run_trainjob, trainjob_task

pytestmark = [pytest.mark.control_plane, pytest.mark.usefixtures("prefect_server")]

RESULT = {"w": 2.9, "loss": 0.01}
#: What the API server answers for a kwok node's log: the log was asked of the worker's
#: kubelet (the manager has no pod to ask; tests/realcluster/test_multikueue_real.py).
KUBELET_LOG = ":10250/containerLogs/"
#: How a task's log follower says why the log ended.
FOLLOWED = "Could not follow the log of"
#: How long the MultiKueue task waits before it gives up: long enough for its job to
#: reach the worker (a second or two), short enough to keep the test short.
MULTIKUEUE_WAIT_SECONDS = 8.0


def square(x: int = 3) -> int:
    """The decorated task's training function (its source goes to the pods)."""
    return x * x


@pytest.fixture
def real_creds(
    control_plane: ControlPlane, control_plane_kubeconfig: Path
) -> KubeflowTrainerCredentials:
    control_plane.require_controllers()
    return KubeflowTrainerCredentials(kubeconfig=str(control_plane_kubeconfig))


def spec(*options: Any) -> TrainJobSpec:
    return TrainJobSpec(
        runtime="torch-distributed",
        trainer=CustomTrainer(train_linear, num_nodes=2),
        options=list(options),
    )


def test_run_trainjob_on_the_real_controllers(real_creds: KubeflowTrainerCredentials) -> None:
    @flow
    def train() -> tuple[JobOutputs, JobOutputs]:
        with_result = run_trainjob(spec(kwok.termination_message(json.dumps(RESULT))), real_creds)
        log_less = run_trainjob(spec(), real_creds)
        return with_result, log_less

    with_result, log_less = train()
    assert with_result.status is JobState.COMPLETE
    assert with_result.result == RESULT
    assert [s.status for s in with_result.steps] == ["Succeeded", "Succeeded"]
    assert log_less.status is JobState.COMPLETE
    assert log_less.result is None
    assert log_less.result_missing is not None
    assert log_less.result_missing.cause == "log-unreadable"


def test_trainjob_task_returns_the_value_or_says_why_not(
    real_creds: KubeflowTrainerCredentials,
) -> None:
    carried = trainjob_task(
        credentials=real_creds, options=[kwok.termination_message("9")], retries=0
    )(square)
    missing = trainjob_task(credentials=real_creds, retries=0)(square)

    @flow
    def with_value() -> int:
        return int(carried(x=3))

    @flow
    def without_value() -> Any:
        return missing(x=4)

    assert with_value() == 9
    state = without_value(return_state=True)
    assert state.is_failed()
    with pytest.raises(TrainJobResultUnreachableError, match="connection refused"):
        state.result()


def test_run_trainjob_follows_a_multikueue_job_to_its_worker(
    multikueue: MultiKueuePair, multikueue_namespace: str
) -> None:
    # The worker through its MultiKueueCluster's Secret (no mapping in the block).
    creds = KubeflowTrainerCredentials(
        kubeconfig=str(multikueue.manager.kubeconfig), namespace=multikueue_namespace
    )
    pods = {kwok.TERMINATION_MESSAGE: json.dumps(RESULT), kwok.DURATION: "3s"}
    mk = TrainJobSpec(
        runtime="torch-distributed",
        trainer=CustomTrainer(train_linear, num_nodes=2, resources_per_node={"cpu": "1"}),
        options=[
            QueueName(multikueue.queue),
            ManagedBy(MANAGED_BY_MULTIKUEUE),
            kwok.node_annotations(pods),
        ],
    )

    @flow
    def train() -> JobOutputs:
        return run_trainjob(mk, creds)

    state = train(return_state=True)
    out = state.result()
    assert out.status is JobState.COMPLETE
    assert out.result == RESULT
    assert out.worker is not None
    assert out.worker.name == multikueue.cluster
    assert out.worker.reachable
    # Its log was asked of the worker's kubelet (kwok serves none: the API server's
    # answer names it, in the task run's log).
    logs = read_logs(state.state_details.flow_run_id)
    assert any(FOLLOWED in line and KUBELET_LOG in line for line in logs), logs


def test_a_timeout_cancels_a_multikueue_job_on_both_clusters(
    multikueue: MultiKueuePair, multikueue_namespace: str
) -> None:
    ns = multikueue_namespace
    creds = KubeflowTrainerCredentials(kubeconfig=str(multikueue.manager.kubeconfig), namespace=ns)
    long_job = TrainJobSpec(
        runtime="torch-distributed",
        trainer=CustomTrainer(train_linear, num_nodes=1, resources_per_node={"cpu": "1"}),
        options=[
            QueueName(multikueue.queue),
            ManagedBy(MANAGED_BY_MULTIKUEUE),
            kwok.node_annotations({kwok.DURATION: "300s"}),
        ],
    )

    @flow
    def train() -> JobOutputs:
        # The task's own timeout; on_cancel="delete", the default.
        return run_trainjob(long_job, creds, timeout=MULTIKUEUE_WAIT_SECONDS)

    with multikueue.watching(ns) as seen:
        state = train(return_state=True)
        assert state.is_failed()
        with pytest.raises(TimeoutError) as caught:
            state.result()
        assert seen.on_worker.is_set(), seen  # it ran on the worker before the timeout
        # The manager's job is deleted by the task; MultiKueue removes the worker's copy.
        assert not any(n.startswith("trainjob/") for n in multikueue.manager_has(ns))
        assert multikueue.left_over(ns) == []
    assert not seen.manager_jobsets  # the manager never ran it
    logs = read_logs(state.state_details.flow_run_id)
    assert any(line.startswith("Deleted TrainJob ") for line in logs), logs
    # The timeout says where the job stood when the wait gave up: running on the worker,
    # admitted — not queued, as when the wait handed over to the worker.
    assert "it is Running" in str(caught.value)
    assert "queued in" not in str(caught.value), caught.value
