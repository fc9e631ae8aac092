"""Waits (sync, async, many at once), suspend/resume, delete and garbage collection,
events, failure reasons, creation failure, Kueue-labelled jobs and logs: the same
behaviour on the test bed and on the real control plane with its controllers."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from conformance_support import GC_TIMEOUT, Cluster, until, wait_on

from kf_trainer_core.client import AsyncTrainerClient, TrainerClient
from kf_trainer_core.cluster.status import JobState
from kf_trainer_core.errors import (
    TrainJobCreationFailedError,
    TrainJobFailedError,
    TrainJobNotFoundError,
    TrainJobTimeoutError,
)
from kf_trainer_core.k8s.calls import OpenWatch
from kf_trainer_core.spec import QueueName, Suspend


# -- waits -------------------------------------------------------------------------
def test_wait_for_running(client: TrainerClient, controllers: Cluster) -> None:
    name = client.submit(controllers.spec("hold", nodes=2)).job.name
    job = client.wait_for_job_status(name, status="Running", timeout=60)
    assert job.status is JobState.RUNNING


async def test_async_wait_for_running(aclient: AsyncTrainerClient, controllers: Cluster) -> None:
    name = (await aclient.submit(controllers.spec("hold"))).job.name
    job = await aclient.wait_for_job_status(name, status="Running", timeout=60)
    assert job.status is JobState.RUNNING


@pytest.mark.parametrize("count", [5, 40])
async def test_many_async_waits_share_the_watch(
    aclient: AsyncTrainerClient, controllers: Cluster, calls: list[Any], count: int
) -> None:
    names = [(await aclient.submit(controllers.spec("hold"))).job.name for _ in range(count)]
    before = len([c for c in calls if isinstance(c, OpenWatch)])
    jobs = await asyncio.gather(
        *(aclient.wait_for_job_status(n, "Running", timeout=120) for n in names)
    )
    assert all(j.status is JobState.RUNNING for j in jobs)
    assert len([c for c in calls if isinstance(c, OpenWatch)]) - before <= 4


@pytest.mark.parametrize("face", ["sync", "async"])
async def test_wait_times_out_on_a_job_that_runs_on(
    cluster: Cluster, face: str, client: TrainerClient, aclient: AsyncTrainerClient
) -> None:
    name = client.submit(cluster.spec("hold")).job.name
    with pytest.raises(TrainJobTimeoutError, match="did not reach Complete"):
        await wait_on(face, client, aclient, name, timeout=1.0)


@pytest.mark.parametrize("face", ["sync", "async"])
async def test_wait_for_a_missing_job(
    face: str, client: TrainerClient, aclient: AsyncTrainerClient
) -> None:
    with pytest.raises(TrainJobNotFoundError):
        await wait_on(face, client, aclient, "nope", timeout=5)


@pytest.mark.parametrize("face", ["sync", "async"])
async def test_wait_for_complete(
    controllers: Cluster,
    face: str,
    client: TrainerClient,
    aclient: AsyncTrainerClient,
) -> None:
    name = client.submit(controllers.spec("succeed", nodes=2)).job.name
    if face == "sync":
        job, _ = client.wait(name, timeout=120)
    else:
        job, _ = await aclient.wait(name, timeout=120)
    assert job.status is JobState.COMPLETE
    assert all(s.status == "Succeeded" for s in job.steps)


def test_wait_for_status_complete_returns_the_job(
    client: TrainerClient, controllers: Cluster
) -> None:
    name = client.submit(controllers.spec("succeed")).job.name
    assert client.wait_for_job_status(name, timeout=120).status is JobState.COMPLETE


# -- suspend / resume / delete -----------------------------------------------------
def test_suspend_running_job_removes_pods_and_resume_brings_them_back(
    client: TrainerClient, controllers: Cluster
) -> None:
    name = client.submit(controllers.spec("hold", nodes=2)).job.name
    client.wait_for_job_status(name, "Running", timeout=60)
    # Returned once the Trainer marked it so (the API server's answer to the change
    # alone still reads Running on a real one): a read right after agrees.
    assert client.suspend_job(name).status is JobState.SUSPENDED
    assert client.get_job(name).status is JobState.SUSPENDED
    until(lambda: not controllers.owned("pods"), what="pods gone while suspended")
    client.resume_job(name)
    job = client.wait_for_job_status(name, "Running", timeout=60)
    assert job.status is JobState.RUNNING
    assert any(c["type"] == "Suspended" and c["status"] == "False" for c in job.conditions)
    until(lambda: len(controllers.owned("pods")) == 2, what="pods back after resume")


async def test_created_suspended_then_resumed(
    aclient: AsyncTrainerClient, controllers: Cluster
) -> None:
    name = (await aclient.submit(controllers.spec("hold", Suspend()))).job.name
    job = await aclient.wait_for_job_status(name, "Suspended", timeout=60)
    assert job.status is JobState.SUSPENDED
    assert controllers.owned("pods") == []
    await aclient.resume_job(name)
    job = await aclient.wait_for_job_status(name, "Running", timeout=60)
    assert job.status is JobState.RUNNING


def test_delete_collects_jobset_jobs_and_pods(client: TrainerClient, controllers: Cluster) -> None:
    name = client.submit(controllers.spec("hold", nodes=2)).job.name
    client.wait_for_job_status(name, "Running", timeout=60)
    assert controllers.owned("jobsets")
    assert len(controllers.owned("jobs")) == 1
    assert client.delete_job(name) is True
    # Deleted in the background: the TrainJob is gone at once, and the delete returned
    # once the collector had removed its JobSet; its Jobs and Pods follow.
    with pytest.raises(TrainJobNotFoundError):
        client.get_job(name)
    assert not controllers.owned("jobsets")
    until(
        lambda: not controllers.owned("jobs") and not controllers.owned("pods"),
        timeout=GC_TIMEOUT,
        what="Jobs and Pods collected",
    )
    assert client.delete_job(name) is False


async def test_cancel_actions(aclient: AsyncTrainerClient, controllers: Cluster) -> None:
    name = (await aclient.submit(controllers.spec("hold"))).job.name
    await aclient.wait_for_job_status(name, "Running", timeout=60)
    assert not await aclient.cancel_job(name, "keep")
    assert await aclient.cancel_job(name, "suspend")
    job = await aclient.wait_for_job_status(name, "Suspended", timeout=60)
    assert job.status is JobState.SUSPENDED
    assert await aclient.cancel_job(name, "delete")
    # Deleted in the background: gone at once.
    with pytest.raises(TrainJobNotFoundError):
        await aclient.get_job(name)
    assert not await aclient.cancel_job(name, "delete")


# -- events ------------------------------------------------------------------------
def test_events_of_job_pods_and_jobs(client: TrainerClient, controllers: Cluster) -> None:
    name = client.submit(controllers.spec("hold", nodes=2)).job.name
    client.wait_for_job_status(name, "Running", timeout=60)
    events = until(
        lambda: (
            (ev := client.get_job_events(name))
            and {"Pod", "Job"} <= {e.involved_object_kind for e in ev}
            and ev
        ),
        what="pod and job events",
    )
    reasons = {e.reason for e in events}
    assert "SuccessfulCreate" in reasons
    assert "Scheduled" in reasons
    assert all(name in e.involved_object_name for e in events)


# -- failures ----------------------------------------------------------------------
@pytest.mark.parametrize("exit_code", [1, 3])
def test_failed_pod_fails_the_job_with_its_reason(
    client: TrainerClient, controllers: Cluster, exit_code: int
) -> None:
    runtime = controllers.fast_fail_runtime()
    name = client.submit(controllers.spec("fail", runtime=runtime, exit_code=exit_code)).job.name
    with pytest.raises(TrainJobFailedError) as info:
        client.wait(name, timeout=120)
    failure = info.value.failure
    assert failure.step == "node-0"
    assert failure.pod
    assert failure.exit_code == exit_code
    assert failure.container_reason == "Error"
    assert f"exit code {exit_code}" in str(info.value)
    assert client.get_job(name).status is JobState.FAILED


async def test_oom_is_reported(aclient: AsyncTrainerClient, controllers: Cluster) -> None:
    runtime = controllers.fast_fail_runtime()
    name = (await aclient.submit(controllers.spec("oom", runtime=runtime))).job.name
    with pytest.raises(TrainJobFailedError) as info:
        await aclient.wait(name, timeout=120)
    assert info.value.failure.container_reason == "OOMKilled"
    assert info.value.failure.exit_code == 137


def test_explain_failure(client: TrainerClient, controllers: Cluster) -> None:
    runtime = controllers.fast_fail_runtime()
    name = client.submit(controllers.spec("fail", runtime=runtime)).job.name
    until(lambda: client.get_job(name).status is JobState.FAILED, what="Failed")
    failure = client.explain_failure(name)
    assert failure.reason
    assert failure.exit_code == 3
    assert failure.step == "node-0"


def test_fresh_attempt_after_a_failed_job(client: TrainerClient, controllers: Cluster) -> None:
    runtime = controllers.fast_fail_runtime()
    ident = ("dag", "train", "run-2", -1)
    first = client.submit(controllers.spec("fail", runtime=runtime), identity=ident)
    with pytest.raises(TrainJobFailedError):
        client.wait(first.job.name, timeout=120)
    second = client.submit(controllers.spec("fail", runtime=runtime), identity=ident)
    assert second.created
    assert second.job.name != first.job.name
    third = client.submit(
        controllers.spec("fail", runtime=runtime), identity=ident, fresh_after_failure=False
    )
    assert third.job.name == second.job.name


@pytest.mark.parametrize("face", ["sync", "async"])
async def test_creation_failure_fails_the_wait(
    controllers: Cluster, face: str, client: TrainerClient, aclient: AsyncTrainerClient
) -> None:
    # A runtime the Trainer cannot find: it says so in a TrainJobResourcesCreationFailed
    # event and retries; the client must not wait for the timeout.
    controllers.job_on_missing_runtime()
    with pytest.raises(TrainJobCreationFailedError, match="TrainJobResourcesCreationFailed"):
        await wait_on(face, client, aclient, "no-runtime", timeout=60)


# -- Kueue (CRDs only on the real server; no Kueue controller anywhere here) ----------
def test_queue_labelled_job_without_kueue_controller(
    client: TrainerClient, controllers: Cluster
) -> None:
    name = client.submit(controllers.spec("hold", QueueName("team-queue"))).job.name
    job = client.get_job(name)
    assert job.labels["kueue.x-k8s.io/queue-name"] == "team-queue"
    # Nobody admits it: it stays as submitted, and get_job says nothing of a queue it
    # cannot see.
    assert job.status in (JobState.CREATED, JobState.RUNNING, JobState.SUSPENDED)


# -- logs --------------------------------------------------------------------------
def test_logs_where_they_exist(client: TrainerClient, controllers: Cluster) -> None:
    name = client.submit(controllers.spec("succeed")).job.name
    until(lambda: client.get_job(name).status is JobState.COMPLETE, what="Complete")
    if controllers.real:
        # kwok serves no logs: reading them is an error that says so, never a hang.
        with pytest.raises(Exception, match=r"containerLogs|log"):
            list(client.get_job_logs(name, step="node-0"))
        return
    lines = list(client.get_job_logs(name, step="node-0"))
    assert lines
    assert list(client.get_job_logs(name, step="node-0", follow=True)) == lines
