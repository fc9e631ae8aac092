"""Kueue over real HTTP: the test server's simulated Kueue (Workload CRD, quota per
ClusterQueue, pending reasons, admission by unsuspending, preemption, eviction, the
visibility API) and what both clients report of it."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from train_functions import train_linear

from kf_trainer_core.client import AsyncTrainerClient, TrainerClient
from kf_trainer_core.cluster.failures import failure_class_of
from kf_trainer_core.cluster.kueue import QUEUE_NAME_LABEL, WORKLOADS, QueueStatus
from kf_trainer_core.cluster.status import JobState, TrainJob
from kf_trainer_core.errors import FailureClass, TrainJobAdmissionTimeoutError
from kf_trainer_core.k8s.calls import Create
from kf_trainer_core.k8s.errors import ApiError
from kf_trainer_core.spec import Annotations, CustomTrainer, Labels, TrainJobSpec
from kf_trainer_core.testing.kueue import PRIORITY_CLASS_LABEL, KueueSimulator
from kf_trainer_core.testing.scenarios import SCENARIO_ANNOTATION
from kf_trainer_core.testing.server import KubeTestServer
from raw_calls import raw


def gpu_job(
    queue: str | None = "team-a", gpus: int = 4, scenario: str = "success", **labels: str
) -> TrainJobSpec:
    all_labels = {QUEUE_NAME_LABEL: queue, **labels} if queue else dict(labels)
    return TrainJobSpec(
        trainer=CustomTrainer(train_linear, num_nodes=1, resources_per_node={"gpu": gpus}),
        options=[Labels(all_labels), Annotations({SCENARIO_ANNOTATION: scenario})],
    )


@pytest.fixture
def kueue(server: KubeTestServer) -> KueueSimulator:
    sim: KueueSimulator = server.install_kueue()
    sim.add_cluster_queue("gpus", {"nvidia.com/gpu": 4, "cpu": 64})
    sim.add_local_queue("default", "team-a", "gpus")
    return sim


def until(check: Callable[[], Any], timeout: float = 15) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def kueue_requests(server: KubeTestServer) -> list[Any]:
    return [r for r in server.requests.records if "kueue.x-k8s.io" in r.path]


def test_queued_job_explains_itself_then_runs(
    client: TrainerClient, server: KubeTestServer, kueue: KueueSimulator
) -> None:
    first = client.submit(gpu_job(scenario="never-finish")).job.name
    until(lambda: client.get_job(first).queue and client.get_job(first).queue.admitted)
    second = client.submit(gpu_job()).job.name
    # Kueue's webhook created it suspended; its Workload says why it waits.
    queued = until(lambda: (q := client.get_job(second).queue) and q.pending_message and q)
    job = client.get_job(second)
    assert job.status is JobState.SUSPENDED
    assert queued.queue == "team-a"
    assert not queued.admitted
    assert queued.pending_reason == "Pending"
    assert queued.pending_message == (
        "couldn't assign flavors to pod set node: insufficient unused quota for "
        "nvidia.com/gpu in flavor default-flavor, 4 more needed"
    )
    assert queued.position == 0  # first in its LocalQueue (the visibility API)
    assert queued.workload
    assert queued.workload.startswith(f"trainjob-{second}-")
    text = queued.line()
    assert "queued in team-a" in text
    assert "position 1" in text
    assert "4 more needed" in text

    seen: list[QueueStatus | None] = []

    def record(update: TrainJob) -> None:
        seen.append(update.queue)

    # Freeing the quota admits it: Kueue unsuspends the job, which then runs.
    client.delete_job(first)
    done, _ = client.wait(second, timeout=30, callbacks=[record])
    assert done.status is JobState.COMPLETE
    assert done.queue is not None
    assert done.queue.admitted
    assert done.queue.cluster_queue == "gpus"
    assert done.queue.queued_seconds is not None
    assert any(q is not None and q.admitted for q in seen)
    outputs = client.get_job_outputs(second)
    assert outputs.queue is not None
    assert outputs.queue.finished


def test_admission_timeout_says_what_the_queue_waits_for(
    client: TrainerClient, kueue: KueueSimulator
) -> None:
    name = client.submit(gpu_job(gpus=8)).job.name  # more than the queue will ever have
    with pytest.raises(TrainJobAdmissionTimeoutError) as caught:
        client.wait(name, timeout=30, admission_timeout=1.0)
    err = caught.value
    message = str(err)
    assert f"TrainJob {name} was not admitted by Kueue (queue team-a) within 1s" in message
    assert "insufficient quota for nvidia.com/gpu in flavor default-flavor" in message
    assert "request > maximum capacity (8 > 4)" in message
    assert err.queue is not None
    assert err.queue.pending_reason == "Pending"
    assert failure_class_of(err) is FailureClass.CAPACITY
    # The startup timeout is not used up by queueing: without an admission timeout a
    # startup timeout does not fire for a suspended job.
    with pytest.raises(TimeoutError) as plain:
        client.wait(name, timeout=1.0, startup_timeout=0.2)
    assert not isinstance(plain.value, TrainJobAdmissionTimeoutError)
    assert "insufficient quota" in str(plain.value)


def test_missing_local_queue_is_inadmissible(client: TrainerClient, kueue: KueueSimulator) -> None:
    name = client.submit(gpu_job(queue="no-such-queue")).job.name
    queued = until(lambda: (q := client.get_job(name).queue) and q.pending_reason and q)
    assert queued.pending_reason == "Inadmissible"
    assert queued.pending_message == "LocalQueue no-such-queue doesn't exist"
    assert queued.position is None  # the visibility API has no such queue


def test_preemption_and_eviction_are_reported(
    client: TrainerClient, server: KubeTestServer, kueue: KueueSimulator
) -> None:
    kueue.add_cluster_queue("prio", {"nvidia.com/gpu": 4}, preempt_lower_priority=True)
    kueue.add_local_queue("default", "prio-q", "prio")
    kueue.add_priority_class("high", 1000)
    low = client.submit(gpu_job("prio-q", scenario="never-finish")).job.name
    until(lambda: client.get_job(low).status is JobState.RUNNING)
    high = client.submit(
        gpu_job("prio-q", scenario="never-finish", **{PRIORITY_CLASS_LABEL: "high"})
    ).job.name
    until(lambda: client.get_job(high).status is JobState.RUNNING)
    victim = client.get_job(low)
    assert victim.status is JobState.SUSPENDED  # Kueue suspended it again
    queue = victim.queue
    assert queue is not None
    assert not queue.admitted
    assert queue.requeue_count == 1
    assert [e.reason for e in queue.evictions] == ["Preempted"]
    assert queue.evictions[0].preemption_reason == "InClusterQueue"
    assert "Preempted to accommodate a workload" in queue.evictions[0].message
    assert "evicted 1x (last: Preempted" in queue.line()
    # An eviction on demand (a PodsReady timeout) is reported the same way.
    kueue.evict("default", high)
    assert kueue.wait_idle()
    evicted = until(lambda: (q := client.get_job(high).queue) and q.evictions and q)
    assert evicted.evictions[-1].reason == "PodsReadyTimeout"


def test_without_kueue_nothing_is_said_and_nothing_asked_again(
    client: TrainerClient, server: KubeTestServer
) -> None:
    # No Workload CRD: a labelled job runs as any other (no webhook suspends it).
    name = client.submit(gpu_job()).job.name
    job, _ = client.wait(name, timeout=30)
    assert job.status is JobState.COMPLETE
    assert job.queue is None
    assert client.get_job(name).queue is None
    asked = kueue_requests(server)
    assert len(asked) == 1
    assert asked[0].status == 404
    other = client.submit(gpu_job(scenario="progress")).job.name
    client.wait(other, timeout=30)
    client.get_job(other)
    assert len(kueue_requests(server)) == 1  # ... and remembered


def test_unlabelled_jobs_cost_no_kueue_request(
    client: TrainerClient, server: KubeTestServer, kueue: KueueSimulator
) -> None:
    name = client.submit(gpu_job(queue=None, gpus=1)).job.name
    job, _ = client.wait(name, timeout=30)
    assert job.queue is None
    client.get_job(name)
    client.get_job_outputs(name)
    assert kueue_requests(server) == []


def test_rbac_without_workloads_fails_nothing(
    client: TrainerClient, server: KubeTestServer, kueue: KueueSimulator
) -> None:
    server.faults.forbid("list", "workloads")
    name = client.submit(gpu_job(gpus=1)).job.name
    job, _ = client.wait(name, timeout=30)  # admitted (quota allows), runs
    assert job.status is JobState.COMPLETE
    assert job.queue is None
    client.get_job(name)
    denied = [r for r in kueue_requests(server) if r.status == 403]
    assert len(denied) == 1
    assert len(kueue_requests(server)) == 1


def test_visibility_forbidden_keeps_the_rest(
    client: TrainerClient, server: KubeTestServer, kueue: KueueSimulator
) -> None:
    server.faults.forbid("get", "localqueues")
    name = client.submit(gpu_job(gpus=8)).job.name
    queued = until(lambda: (q := client.get_job(name).queue) and q.pending_message and q)
    assert queued.position is None
    assert "maximum capacity" in str(queued.pending_message)
    client.get_job(name)
    visibility = [r for r in kueue_requests(server) if "visibility" in r.path]
    assert len(visibility) == 1  # denied once, not asked again


def test_workloads_follow_the_upstream_crd(
    client: TrainerClient, server: KubeTestServer, kueue: KueueSimulator
) -> None:
    name = client.submit(gpu_job()).job.name
    until(lambda: client.get_job(name).status is JobState.COMPLETE)
    schema = server._schemas[WORKLOADS]
    items, _ = server.store.list(WORKLOADS, "default")
    assert items
    for wl in items:
        assert schema.validate(wl) == []
        owner = wl["metadata"]["ownerReferences"][0]
        assert owner["kind"] == "TrainJob"
        assert owner["name"] == name
    # Written through the API, a Workload is checked against the CRD (422).
    workload = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": "x"},
        "spec": {
            "podSets": [{"name": "main", "count": -1, "template": {"spec": {"containers": []}}}]
        },
    }
    with pytest.raises(ApiError) as bad:
        raw(client, Create(WORKLOADS, "default", workload))
    assert bad.value.code == 422


async def test_async_client_reports_the_queue(
    aclient: AsyncTrainerClient, server: KubeTestServer, kueue: KueueSimulator
) -> None:
    blocker = (await aclient.submit(gpu_job(scenario="never-finish"))).job.name
    name = (await aclient.submit(gpu_job())).job.name
    seen: list[QueueStatus] = []

    def record(update: TrainJob) -> None:
        if update.queue is not None:
            seen.append(update.queue)

    with pytest.raises(TrainJobAdmissionTimeoutError):
        await aclient.wait(name, timeout=30, admission_timeout=0.8, callbacks=[record])
    assert seen
    assert seen[-1].pending_message
    assert "4 more needed" in seen[-1].pending_message
    job = await aclient.get_job(name)
    assert job.queue is not None
    assert job.queue.position == 0
    await aclient.delete_job(blocker)
    done, _ = await aclient.wait(name, timeout=30)
    assert done.status is JobState.COMPLETE
