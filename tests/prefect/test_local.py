"""The same tasks on the local backend: a block with ``backend="local"`` runs the jobs as
processes on this machine, with no change to the flow."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from prefect import flow
from prefect_support import read_logs

pytest.importorskip("kf_trainer_core.backends.local")

from prefect_jobs import add, broken, dated, sleepy

from kf_trainer_core.cluster.outputs import JobOutputs
from kf_trainer_core.cluster.status import JobState, TrainJob
from kf_trainer_core.errors import TrainJobFailedError
from kf_trainer_core.spec import CustomTrainer, TrainJobSpec
from kf_trainer_prefect import (
    KubeflowTrainerCredentials,
    run_trainjob,
    submit_trainjob,
    trainjob_task,
    wait_trainjob,
)

pytestmark = pytest.mark.usefixtures("prefect_server")


@pytest.fixture
def local(tmp_path: Path) -> KubeflowTrainerCredentials:
    return KubeflowTrainerCredentials(backend="local", state_dir=str(tmp_path / "state"))


def test_local_run_and_decorator(local: KubeflowTrainerCredentials) -> None:
    adder = trainjob_task(credentials=local)(add)

    @flow
    def train() -> tuple[JobOutputs, dict[str, int]]:
        out = run_trainjob(TrainJobSpec(trainer=CustomTrainer(add, func_args={"a": 2})), local)
        return out, adder(a=40, b=2)

    state = train(return_state=True)
    out, summed = state.result()
    assert out.status is JobState.COMPLETE
    assert out.result == {"sum": 4}
    assert summed == {"sum": 42}
    assert out.namespace == "local"
    logs = read_logs(state.state_details.flow_run_id)
    assert any(line.startswith(f"Submitted TrainJob local/{out.name}") for line in logs)


def test_local_timeout_stops_the_processes(local: KubeflowTrainerCredentials) -> None:
    from kf_trainer_core.backends.local.procs import processes_of_job

    submitted: list[TrainJob] = []

    @flow
    def train() -> JobOutputs:
        job = submit_trainjob(TrainJobSpec(trainer=CustomTrainer(sleepy)), local)
        submitted.append(job)
        return wait_trainjob.with_options(timeout_seconds=3)(job, local)

    state = train(return_state=True)
    assert state.is_failed()
    (job,) = submitted
    assert job.uid
    with local.get_client() as client:
        deadline = time.monotonic() + 30
        while [j for j in client.list_jobs() if not j.deleting] or processes_of_job(job.uid):
            assert time.monotonic() < deadline, "the job or its processes outlived the task"
            time.sleep(0.1)


def test_local_failure_reports_its_reason(local: KubeflowTrainerCredentials) -> None:
    @flow
    def train() -> JobOutputs:
        return run_trainjob(TrainJobSpec(trainer=CustomTrainer(broken)), local)

    state = train(return_state=True)
    with pytest.raises(TrainJobFailedError) as info:
        state.result()
    failure = info.value.failure
    assert failure.exit_code not in (None, 0)
    assert any("RuntimeError: bad data" in line for line in failure.log_tail)


def test_a_result_that_is_not_json_fails_the_task(local: KubeflowTrainerCredentials) -> None:
    """Not ``None`` handed downstream as if the function had returned it: the task fails
    with the type that JSON cannot carry and the fix."""
    task = trainjob_task(credentials=local)(dated)

    @flow
    def train() -> object:
        return task()

    state = train(return_state=True)
    with pytest.raises(TrainJobFailedError) as info:
        state.result()
    assert "Object of type date is not JSON serializable" in str(info.value)
    assert "KF_TRAINER_RESULT_NOT_JSON=ignore" in str(info.value)
