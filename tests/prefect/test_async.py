"""The async twins in async flows: the same jobs on the async client, created in the
flow's event loop; a timeout cancels the task's coroutine and the job is still stopped
(the clean-up is shielded from the cancellation)."""

from __future__ import annotations

import time

import pytest
from prefect import flow
from prefect_support import aread_logs, read_artifacts, spec

from kf_trainer_core.client import TrainerClient
from kf_trainer_core.cluster.outputs import JobOutputs
from kf_trainer_core.cluster.status import JobState, TrainJob
from kf_trainer_core.errors import TrainJobFailedError
from kf_trainer_prefect import (
    KubeflowTrainerCredentials,
    acancel_trainjob,
    aget_trainjob_outputs,
    arun_trainjob,
    astream_trainjob_logs,
    asubmit_trainjob,
    atrainjob_task,
    await_trainjob,
)

pytestmark = pytest.mark.usefixtures("prefect_server")


async def test_arun_trainjob(creds: KubeflowTrainerCredentials, k8s: TrainerClient) -> None:
    @flow
    async def train() -> JobOutputs:
        return await arun_trainjob(spec("progress"), creds)

    state = await train(return_state=True)
    out = await state.result()
    assert out.status is JobState.COMPLETE
    assert out.result == {"epochs": 3, "loss": 0.1289}
    flow_run_id = state.state_details.flow_run_id
    keys = {a.key for a in read_artifacts(flow_run_id)}
    assert {f"{out.name}-progress", f"{out.name}-summary", f"{out.name}-steps"} <= keys
    progress = next(a for a in read_artifacts(flow_run_id) if a.type == "progress")
    assert float(progress.data) == 100
    logs = await aread_logs(flow_run_id)
    assert any(line.startswith(f"[{out.name}/node-0] Epoch 3/3") for line in logs)


async def test_async_steps_and_failure(
    creds: KubeflowTrainerCredentials, k8s: TrainerClient
) -> None:
    @flow
    async def train() -> tuple[TrainJob, JobOutputs, int, JobOutputs, bool]:
        job = await asubmit_trainjob(spec(None), creds)
        again = await asubmit_trainjob(spec(None), creds)
        assert again.name == job.name
        done = await await_trainjob(job, creds)
        lines = await astream_trainjob_logs(job, creds, follow=False)
        outputs = await aget_trainjob_outputs(job.name, creds)
        return job, done, lines, outputs, await acancel_trainjob(job, creds)

    _job, done, lines, outputs, deleted = await train()
    assert done.status is JobState.COMPLETE
    assert outputs.result == done.result
    assert lines > 0
    assert deleted
    assert k8s.list_jobs() == []

    @flow
    async def failing() -> JobOutputs:
        return await arun_trainjob(spec("oom"), creds)

    with pytest.raises(TrainJobFailedError) as info:
        await failing()
    assert info.value.failure.container_reason == "OOMKilled"


async def test_async_timeout_deletes_the_job(
    creds: KubeflowTrainerCredentials, k8s: TrainerClient
) -> None:
    @flow
    async def train() -> JobOutputs:
        return await arun_trainjob.with_options(timeout_seconds=2.5)(spec("never-finish"), creds)

    state = await train(return_state=True)
    assert state.is_failed()
    deadline = time.monotonic() + 30
    while [j for j in k8s.list_jobs() if not j.deleting]:
        assert time.monotonic() < deadline, "the job was not deleted"
        time.sleep(0.05)
    logs = await aread_logs(state.state_details.flow_run_id)
    assert any(line.startswith("Deleted TrainJob ") for line in logs)


def _double(x: int = 1) -> int:
    return x * 2


async def test_async_decorator(creds: KubeflowTrainerCredentials) -> None:
    from kf_trainer_core.spec import Annotations
    from kf_trainer_core.testing.scenarios import SCENARIO_ANNOTATION

    double = atrainjob_task(
        credentials=creds, options=[Annotations({SCENARIO_ANNOTATION: "exec"})]
    )(_double)

    @flow
    async def train() -> int:
        return await double(x=21)

    assert await train() == 42
