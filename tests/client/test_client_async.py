"""The async client (``kubernetes_asyncio``) over real HTTP: the same programs as the
sync client, so the same behaviour, plus many waits sharing one watch."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from train_functions import train_linear

from kf_trainer_core.client import AsyncTrainerClient
from kf_trainer_core.cluster.status import JobState
from kf_trainer_core.config import KubernetesConfig
from kf_trainer_core.errors import (
    SpecConflictError,
    TrainJobCreationFailedError,
    TrainJobFailedError,
    TrainJobNotFoundError,
)
from kf_trainer_core.k8s.calls import Create, OpenWatch
from kf_trainer_core.programs.informer import open_watch_count
from kf_trainer_core.spec import Annotations, CustomTrainer, Name, Suspend, TrainJobSpec
from kf_trainer_core.testing.scenarios import SCENARIO_ANNOTATION


def spec(scenario: str | None = None, *options: Any, nodes: int = 1) -> TrainJobSpec:
    opts = list(options)
    if scenario:
        opts.append(Annotations({SCENARIO_ANNOTATION: scenario}))
    return TrainJobSpec(trainer=CustomTrainer(train_linear, num_nodes=nodes), options=opts)


async def test_runtimes(aclient: AsyncTrainerClient) -> None:
    assert "torch-distributed" in {r.name for r in await aclient.list_runtimes()}
    assert (await aclient.get_runtime("mlx-distributed")).launcher == "mpirun"
    with pytest.raises(TrainJobNotFoundError):
        await aclient.get_runtime("missing")


async def test_train_wait_outputs_logs_events(aclient: AsyncTrainerClient) -> None:
    name = await aclient.train(trainer=CustomTrainer(train_linear, num_nodes=2))
    job = await aclient.wait_for_job_status(name, timeout=30)
    assert job.status is JobState.COMPLETE
    assert [s.name for s in job.steps] == ["node-0", "node-1"]
    out = await aclient.get_job_outputs(name)
    assert out.result is not None
    assert [j.name for j in await aclient.list_jobs()] == [name]
    assert (await aclient.get_job(name)).status is JobState.COMPLETE
    lines = [line async for line in aclient.get_job_logs(name)]
    followed = [line async for line in aclient.get_job_logs(name, follow=True)]
    assert lines
    assert followed == lines
    # ``tail`` bounds the history a follow replays; 0 replays none (not the default's 1000).
    assert [line async for line in aclient.get_job_logs(name, follow=True, tail=0)] == []
    assert any(e.involved_object_kind == "Pod" for e in await aclient.get_job_events(name))


async def test_failure_and_creation_failure(aclient: AsyncTrainerClient) -> None:
    failing = (await aclient.submit(spec("oom"))).job.name
    broken = (await aclient.submit(spec("creation-failure"))).job.name
    with pytest.raises(TrainJobFailedError) as info:
        await aclient.wait(failing, timeout=30)
    assert info.value.failure.container_reason == "OOMKilled"
    with pytest.raises(TrainJobCreationFailedError):
        await aclient.wait(broken, timeout=30)


async def test_idempotency_and_conflict(aclient: AsyncTrainerClient) -> None:
    ident = ("flow-run", "task", 0)
    a = await aclient.submit(spec(None), identity=ident)
    b = await aclient.submit(spec(None), identity=ident)
    assert a.created
    assert not b.created
    assert a.job.name == b.job.name
    await aclient.submit(spec(None, Name("pinned")))
    with pytest.raises(SpecConflictError):
        await aclient.submit(spec(None, Name("pinned"), nodes=2))


async def test_suspend_resume_delete(aclient: AsyncTrainerClient) -> None:
    name = (await aclient.submit(spec(None, Suspend()))).job.name
    assert (
        await aclient.wait_for_job_status(name, "Suspended", timeout=30)
    ).status is JobState.SUSPENDED
    await aclient.resume_job(name)
    assert (await aclient.wait_for_job_status(name, "Running", timeout=30)).status in (
        JobState.RUNNING,
        JobState.COMPLETE,
    )
    await aclient.suspend_job(name)
    assert await aclient.delete_job(name)
    assert not await aclient.delete_job(name)


async def test_many_waits_share_one_watch(aclient: AsyncTrainerClient, calls: list[Any]) -> None:
    names = [(await aclient.submit(spec(None))).job.name for _ in range(60)]
    before = len([c for c in calls if isinstance(c, OpenWatch)])
    jobs = await asyncio.gather(*(aclient.wait_for_job_status(n, timeout=60) for n in names))
    assert all(j.status is JobState.COMPLETE for j in jobs)
    watches = [c for c in calls if isinstance(c, OpenWatch)]
    # One TrainJob watch and one Event watch for the namespace, whatever the number of
    # waits (reconnects after the server's timeout aside).
    assert len(watches) - before <= 4
    assert isinstance(aclient.config, KubernetesConfig)
    assert open_watch_count(aclient.config.cache_key()) <= 2
    assert len([c for c in calls if isinstance(c, Create)]) == 60


async def test_run_and_cancel(aclient: AsyncTrainerClient) -> None:
    lines: list[str] = []
    out = await aclient.run(spec(None), identity=("flow", "t", 1), on_log=lines.append, timeout=30)
    assert out.status is JobState.COMPLETE
    assert lines == [line async for line in aclient.get_job_logs(out.name)]
    name = (await aclient.submit(spec("never-finish"))).job.name
    await aclient.wait_for_job_status(name, "Running", timeout=30)
    assert await aclient.cancel_job(name, "suspend")
    assert await aclient.cancel_job(name, "delete")
    assert not await aclient.cancel_job(name, "keep")


async def test_stop_unfinished(aclient: AsyncTrainerClient) -> None:
    name = (await aclient.submit(spec("never-finish"), identity=("flow", "t"))).job.name
    assert await aclient.stop_unfinished(identity=("flow", "other")) == []
    assert await aclient.stop_unfinished(identity=("flow", "t")) == [name]
    assert await aclient.stop_unfinished(name) == []


async def test_build_and_runtime_packages(aclient: AsyncTrainerClient) -> None:
    built = await aclient.build(spec(None), identity=("a", "b"))
    assert built.runtime.observed
    assert built.manifest["metadata"]["namespace"] == aclient.namespace
    assert await aclient.get_runtime_packages(timeout=30)
