"""The async client on the local backend: the same programs as the sync client."""

from __future__ import annotations

import asyncio

import pytest
from local_jobs import chatty, fail_on_rank, resumable, sleeper, trivial

from kf_trainer_core.client import AsyncTrainerClient
from kf_trainer_core.cluster.status import JobState
from kf_trainer_core.errors import TrainJobFailedError, TrainJobNotFoundError
from kf_trainer_core.programs import informer
from kf_trainer_core.programs.informer import open_watch_count
from kf_trainer_core.spec import CustomTrainer


async def test_train_wait_outputs_logs_events(aclient: AsyncTrainerClient) -> None:
    assert "torch-distributed" in {r.name for r in await aclient.list_runtimes()}
    name = await aclient.train(trainer=CustomTrainer(chatty, func_args={"lines": 3}, num_nodes=2))
    job = await aclient.wait_for_job_status(name, timeout=30)
    assert job.status is JobState.COMPLETE
    assert [s.name for s in job.steps] == ["node-0", "node-1"]
    out = await aclient.get_job_outputs(name)
    assert out.result == 3
    assert [j.name for j in await aclient.list_jobs()] == [name]
    lines = [line async for line in aclient.get_job_logs(name)]
    followed = [line async for line in aclient.get_job_logs(name, follow=True)]
    assert lines[:3] == ["line 0", "line 1", "line 2"]
    assert followed == lines
    events = await aclient.get_job_events(name)
    assert any(
        e.involved_object_kind == "JobSet" and e.reason == "AllJobsCompleted" for e in events
    )


async def test_failure_is_explained(aclient: AsyncTrainerClient) -> None:
    name = await aclient.train(trainer=CustomTrainer(fail_on_rank, func_args={"rank": 0}))
    with pytest.raises(TrainJobFailedError) as info:
        await aclient.wait(name, timeout=30)
    assert info.value.failure.step == "node-0"
    assert info.value.failure.exit_code == 1
    assert "boom on rank 0" in str(info.value)


async def test_many_waits_share_one_watch(aclient: AsyncTrainerClient) -> None:
    names = [
        await aclient.train(trainer=CustomTrainer(trivial, func_args={"x": i})) for i in range(4)
    ]
    results = await asyncio.gather(*(aclient.wait(n, timeout=60) for n in names))
    assert [r for _, r in results] == [{"doubled": 2 * i} for i in range(4)]
    # One informer per resource in this loop, whatever the number of waits.
    registry = informer._registries[asyncio.get_running_loop()]
    assert sorted(key[1] for key in registry) == ["events", "trainjobs"]
    assert open_watch_count() >= 1


async def test_suspend_resume_and_delete(aclient: AsyncTrainerClient) -> None:
    name = await aclient.train(
        trainer=CustomTrainer(resumable, func_args={"marker": "/workspace/m"})
    )
    await aclient.wait_for_job_status(name, status="Running", timeout=30)
    for _ in range(500):  # until the first run has left its marker
        lines = [line async for line in aclient.get_job_logs(name)]
        if any("first run" in line for line in lines):
            break
        await asyncio.sleep(0.02)
    await aclient.suspend_job(name)
    job = await aclient.wait_for_job_status(name, status="Suspended", timeout=30)
    assert job.status is JobState.SUSPENDED
    await aclient.resume_job(name)
    _, result = await aclient.wait(name, timeout=30)
    assert result == "second run"

    other = await aclient.train(trainer=CustomTrainer(sleeper))
    await aclient.wait_for_job_status(other, status="Running", timeout=30)
    assert await aclient.delete_job(other) is True
    with pytest.raises(TrainJobNotFoundError):
        await aclient.get_job(other)
