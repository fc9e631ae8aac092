"""Kueue over real HTTP, what only the test bed shows: a cluster without Kueue (nothing
asked again), RBAC that hides Workloads or positions, Workloads checked against the
upstream CRD, an eviction on demand (``KueueSimulator.evict``), the async client's
queue callbacks. What both servers show — queues, positions, pending reasons,
admission and its timeout, a job that can never be admitted, a missing queue,
preemption, requeueing, Kueue's webhooks, deletes — is proven on the real Kueue and the
simulated one by ``tests/conformance/test_kueue_queues.py`` and ``test_kueue_jobs.py``."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from train_functions import train_linear

from kf_trainer_core.client import AsyncTrainerClient, TrainerClient
from kf_trainer_core.cluster.kueue import QUEUE_NAME_LABEL, WORKLOADS, QueueStatus
from kf_trainer_core.cluster.status import JobState, TrainJob
from kf_trainer_core.errors import TrainJobAdmissionTimeoutError
from kf_trainer_core.k8s.calls import Create
from kf_trainer_core.k8s.errors import ApiError
from kf_trainer_core.spec import Annotations, CustomTrainer, Labels, TrainJobSpec
from kf_trainer_core.testing.kueue import KueueSimulator
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


def test_an_eviction_on_demand_is_reported(
    client: TrainerClient, server: KubeTestServer, kueue: KueueSimulator
) -> None:
    # Kueue evicts on a PodsReady timeout, an admission check, a deactivation: the
    # simulator's evict() plays them (preemption itself: tests/conformance).
    name = client.submit(gpu_job(scenario="never-finish")).job.name
    until(lambda: client.get_job(name).status is JobState.RUNNING)
    kueue.evict("default", name)
    assert kueue.wait_idle()
    evicted = until(lambda: (q := client.get_job(name).queue) and q.evictions and q)
    assert evicted.evictions[-1].reason == "PodsReadyTimeout"
    assert evicted.requeue_count == 1
    assert "evicted 1x (last: PodsReadyTimeout" in evicted.line()


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
    # Admitted before the next is made: two jobs of the same second are admitted in the
    # order of their names (Kueue's FIFO goes by creationTimestamp), which a random
    # suffix decides; the blocker came second once in about 40 runs.
    await aclient.wait(blocker, "Running", timeout=30)
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


async def test_a_step_wait_ends_at_once_on_a_job_kueue_can_never_admit(
    aclient: AsyncTrainerClient, kueue: KueueSimulator
) -> None:
    # The step's own reads see only pods; the job's wait beside it knows Kueue, and its
    # verdict ends the step wait too (it used to be taken for "the job ended").
    from kf_trainer_core.errors import TrainJobNotAdmissibleError
    from kf_trainer_core.tasks.step_waits import StepGoal, await_step

    name = (await aclient.submit(gpu_job(gpus=8))).job.name
    with pytest.raises(TrainJobNotAdmissibleError, match="maximum capacity of 4"):
        await await_step(
            aclient, name, StepGoal.of("node-0", "Running"), timeout=60, recheck_interval=0.2
        )


def test_the_simulated_kueue_reads_quantities_in_every_kubernetes_unit() -> None:
    """A quota or a request in any unit Kubernetes accepts (``Pi``, ``E``, micro, an
    exponent) is summed as the real Kueue sums it, never refused by the simulation."""
    from kf_trainer_core.testing.kueue.rules import request_of

    requests = {"memory": "1Pi", "cpu": "500000u", "example.com/fpga": "1e1", "storage": "1E"}
    pod = {"containers": [{"resources": {"requests": requests}}]}
    workload = {"spec": {"podSets": [{"count": 2, "template": {"spec": pod}}]}}
    assert request_of(workload) == {
        "memory": 2 * 1024**5,
        "cpu": 1,
        "example.com/fpga": 20,
        "storage": 2 * 10**18,
    }
    kueue = KueueSimulator(KubeTestServer().store)
    assert kueue.add_cluster_queue("big", {"memory": "4Pi"}).quota == {"memory": 4 * 1024**5}
