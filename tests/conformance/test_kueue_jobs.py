"""Jobs under Kueue, on the real Kueue and the simulated one (one body for both, see
``test_kueue_queues.py``): priorities and preemption (the evicted job's queue status and
failure class), requeueing, Kueue's webhooks (a queued job created suspended, a
resumed one left to Kueue, what every TrainJob gets), delete and prune of queued and
admitted jobs (their Workloads go), identities and attempts of queued jobs."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from conformance_support import FAST, GC_TIMEOUT, Cluster, until
from kubernetes import client as k8s
from kueue_support import GPU, Queues, gpu_job

from kf_trainer_core.client import TrainerClient
from kf_trainer_core.cluster.failures import failure_class_of
from kf_trainer_core.cluster.kueue import QUEUE_NAME_LABEL
from kf_trainer_core.cluster.status import JobState
from kf_trainer_core.errors import FailureClass, TrainJobAdmissionTimeoutError
from kf_trainer_core.k8s.calls import Delete
from kf_trainer_core.k8s.resources import TRAINJOBS
from kf_trainer_core.manifest.builder import ATTEMPT_ANNOTATION
from kf_trainer_core.testing.kueue.rules import RUNTIME_PATCH_MANAGER


@pytest.fixture
def cluster(kueue_cluster: Cluster) -> Cluster:
    """Each test once on the test bed (the simulated Kueue) and once on the real
    control plane with the real Kueue."""
    return kueue_cluster


def state(client: TrainerClient, name: str, wanted: JobState) -> None:
    until(lambda: client.get_job(name).status is wanted, 60, f"{name} {wanted.value}")


def workload_owners(queues: Queues) -> set[str]:
    return {
        ref["name"]
        for wl in queues.workloads()
        for ref in wl["metadata"].get("ownerReferences") or []
    }


def test_priority_preemption_and_requeueing(
    client: TrainerClient, cluster: Cluster, queues: Queues
) -> None:
    cq = queues.cluster_queue("prio", {GPU: 4}, preempt=True)
    queues.local_queue("prio-q", cq)
    high_class = queues.priority_class("high", 1000)
    low = client.submit(gpu_job(cluster, "prio-q", behaviour="hold")).job.name
    state(client, low, JobState.RUNNING)
    high = client.submit(gpu_job(cluster, "prio-q", behaviour="hold", priority=high_class)).job.name
    state(client, high, JobState.RUNNING)

    # Kueue evicted the lower-priority job to admit the higher one: suspended again,
    # its Workload evicted (Preempted, InClusterQueue) and requeued.
    victim = client.get_job(low)
    assert victim.status is JobState.SUSPENDED
    q = victim.queue
    assert q is not None
    assert not q.admitted
    assert q.priority == 0
    assert q.requeue_count == 1
    assert [e.reason for e in q.evictions] == ["Preempted"]
    assert q.evictions[0].preemption_reason == "InClusterQueue"
    assert q.evictions[0].message.startswith("Preempted to accommodate a workload (UID: ")
    assert f"due to prioritization in the ClusterQueue; preemptor path: /{cq}" in (
        q.evictions[0].message
    )
    assert "evicted 1x (last: Preempted: Preempted to accommodate" in q.line()
    assert not q.never_admissible  # it fits once the quota frees
    winner = client.get_job(high).queue
    assert winner is not None
    assert winner.admitted
    assert winner.priority == 1000
    assert winner.evictions == []

    # Its failure class while it waits again: capacity (an admission timeout), the
    # eviction in what it says.
    with pytest.raises(TrainJobAdmissionTimeoutError) as caught:
        client.wait(low, timeout=60, admission_timeout=0.5)
    assert failure_class_of(caught.value) is FailureClass.CAPACITY
    assert "evicted 1x (last: Preempted" in str(caught.value)

    # Requeued: the preemptor gone, Kueue admits the evicted job again and it runs; its
    # Workload keeps the eviction in its history.
    client.delete_job(high)
    state(client, low, JobState.RUNNING)
    again = client.get_job(low).queue
    assert again is not None
    assert again.admitted
    assert again.requeue_count == 1
    assert "evicted 1x" in again.line()
    client.delete_job(low)


def test_webhook_suspends_queued_jobs_and_leaves_their_resume_to_kueue(
    client: TrainerClient, cluster: Cluster, queues: Queues
) -> None:
    cq = queues.cluster_queue("gpus", {GPU: 4})
    queues.local_queue("team-a", cq)
    blocker = client.submit(gpu_job(cluster, "team-a", behaviour="hold")).job.name
    state(client, blocker, JobState.RUNNING)
    # Submitted running (no Suspend option): Kueue's webhook returns it suspended.
    sub = client.submit(gpu_job(cluster, "team-a"))
    assert sub.obj["spec"]["suspend"] is True
    name = sub.job.name
    state(client, name, JobState.SUSPENDED)
    # Resumed by hand, it stays Kueue's: resume_job leaves it suspended (Kueue would
    # suspend it again) and says where it waits.
    job = client.resume_job(name)
    assert job.status is JobState.SUSPENDED
    assert job.queue is not None
    assert job.queue.waiting
    assert client.get_job(name).status is JobState.SUSPENDED
    # Resumed behind the suite's back, Kueue suspends it again: it was not admitted.
    custom = k8s.CustomObjectsApi(cluster.api())
    group = ("trainer.kubeflow.org", "v1alpha1", cluster.namespace, "trainjobs")
    custom.patch_namespaced_custom_object(*group, name, {"spec": {"suspend": False}})
    until(lambda: custom.get_namespaced_custom_object(*group, name)["spec"]["suspend"], 30)
    pods = {
        p["metadata"]["labels"]["jobset.sigs.k8s.io/jobset-name"] for p in cluster.owned("pods")
    }
    assert pods <= {blocker, name}
    # An unlabelled job is not Kueue's: it runs at once, with no Workload.
    free = client.submit(gpu_job(cluster, None, gpus=1, behaviour="hold")).job.name
    running = client.wait_for_job_status(free, "Running", timeout=120)
    assert running.queue is None
    assert free not in workload_owners(queues)
    # Once admitted, resume_job is a plain resume again (nothing to leave to Kueue).
    client.delete_job(blocker)
    done, _ = client.wait(name, timeout=120)
    assert done.status is JobState.COMPLETE


def test_kueue_webhooks_touch_every_trainjob(
    client: TrainerClient, cluster: Cluster, queues: Queues
) -> None:
    # Kueue's TrainJob webhook appends its own (empty) RuntimePatch to every TrainJob,
    # labelled or not; the suite's own job is still adopted by its identity.
    sub = client.submit(gpu_job(cluster, None, gpus=1), identity="kueue/plain/run-1")
    managers = [p["manager"] for p in sub.obj["spec"].get("runtimePatches") or []]
    assert managers[-1] == RUNTIME_PATCH_MANAGER
    again = client.submit(gpu_job(cluster, None, gpus=1), identity="kueue/plain/run-1")
    assert not again.created
    assert again.job.uid == sub.job.uid
    # And refuses one whose runtime does not exist (it reads the runtime for its pod
    # sets): at create, 403, whatever the queue label.
    body: dict[str, Any] = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "no-runtime"},
        "spec": {"runtimeRef": {"name": "no-such-runtime"}, "trainer": {"numNodes": 1}},
    }
    custom = k8s.CustomObjectsApi(cluster.api())
    with pytest.raises(k8s.ApiException) as refused:
        custom.create_namespaced_custom_object(
            "trainer.kubeflow.org", "v1alpha1", cluster.namespace, "trainjobs", body
        )
    assert refused.value.status == 403
    message = json.loads(refused.value.body)["message"]
    assert message == (
        'admission webhook "vtrainjob.kb.io" denied the request: '
        "runtime 'no-such-runtime' not found"
    )


def stays(client: TrainerClient, name: str, wanted: JobState, seconds: float = 2.0) -> None:
    """``name`` reads ``wanted`` at every look for ``seconds`` (Kueue undoes a suspend
    it disagrees with within a fraction of a second)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        assert client.get_job(name).status is wanted
        time.sleep(0.1)


def test_suspend_and_resume_of_jobs_kueue_holds_go_through_their_workloads(
    client: TrainerClient, cluster: Cluster, queues: Queues
) -> None:
    """Kueue unsuspends an admitted job whose spec.suspend someone else set (its pods
    restarted meanwhile) and would admit a queued one: the suite's suspend deactivates
    the Workload, which frees the quota and holds the job until it is resumed."""
    cq = queues.cluster_queue("gpus", {GPU: 4})
    queues.local_queue("team-a", cq)
    running = client.submit(gpu_job(cluster, "team-a", behaviour="hold")).job.name
    state(client, running, JobState.RUNNING)
    # (3 GPUs: Kueue says nothing of a Workload equal to an admitted one.)
    queued = client.submit(gpu_job(cluster, "team-a", gpus=3, behaviour="hold")).job.name
    until(lambda: (q := client.get_job(queued).queue) is not None and q.pending_message)

    # The admitted one: suspended for good, and its quota goes to the queued one.
    # (cancel_job returns once Kueue suspended the job; the Trainer marks it a moment
    # later.)
    assert client.cancel_job(running, "suspend")
    state(client, running, JobState.SUSPENDED)
    stays(client, running, JobState.SUSPENDED)
    state(client, queued, JobState.RUNNING)
    held = client.get_job(running).queue
    assert held is not None
    assert not held.active
    assert not held.admitted
    assert "deactivated" in held.line()

    # A queued one suspended stays so when quota frees; resumed, it is admitted.
    assert client.suspend_job(running).status is JobState.SUSPENDED  # already: no change
    assert client.delete_job(queued)
    stays(client, running, JobState.SUSPENDED)
    client.resume_job(running)
    state(client, running, JobState.RUNNING)
    assert client.delete_job(running)


def test_a_slow_delete_of_an_admitted_job_is_not_undone_by_kueue(
    cluster: Cluster, queues: Queues
) -> None:
    """A client slow between its requests (a loaded machine, a far API server): the
    delete's own suspend gave Kueue the time to unsuspend the job, the delete lost every
    round to it, and ``delete_job`` returned False — "already gone" — while it ran on."""
    cq = queues.cluster_queue("gpus", {GPU: 4})
    queues.local_queue("team-a", cq)

    def slow(call: Any) -> None:
        if isinstance(call, Delete) and call.resource == TRAINJOBS and not call.dry_run:
            time.sleep(0.5)

    with TrainerClient(cluster.config(), retry=FAST, request_hook=slow) as client:
        name = client.submit(gpu_job(cluster, "team-a", behaviour="hold")).job.name
        state(client, name, JobState.RUNNING)
        assert client.delete_job(name)
        assert client.list_jobs() == []


def test_delete_and_prune_take_the_workloads_of_queued_and_admitted_jobs(
    client: TrainerClient, cluster: Cluster, queues: Queues
) -> None:
    cq = queues.cluster_queue("gpus", {GPU: 4})
    queues.local_queue("team-a", cq)
    finished = client.submit(gpu_job(cluster, "team-a"), identity="kueue/done/run-1").job.name
    done, _ = client.wait(finished, timeout=120)
    assert done.status is JobState.COMPLETE
    running = client.submit(gpu_job(cluster, "team-a", behaviour="hold")).job.name
    state(client, running, JobState.RUNNING)
    waiting = client.submit(gpu_job(cluster, "team-a")).job.name
    until(lambda: (q := client.get_job(waiting).queue) is not None and q.pending_message)
    assert workload_owners(queues) == {finished, running, waiting}

    assert client.delete_job(waiting)
    assert client.delete_job(running)
    until(lambda: workload_owners(queues) == {finished}, GC_TIMEOUT, "their Workloads gone")
    report = client.prune_jobs(older_than=0, identity_prefix="kueue/done/")
    assert report.deleted == [finished]
    until(lambda: not queues.workloads(), GC_TIMEOUT, "every Workload gone")
    assert client.list_jobs() == []


def test_identities_and_attempts_of_queued_jobs(
    client: TrainerClient, cluster: Cluster, queues: Queues
) -> None:
    cq = queues.cluster_queue("gpus", {GPU: 4})
    queues.local_queue("team-a", cq)
    blocker = client.submit(gpu_job(cluster, "team-a", behaviour="hold")).job.name
    state(client, blocker, JobState.RUNNING)
    ident = "kueue/queued/run-1"
    first = client.submit(gpu_job(cluster, "team-a"), identity=ident)
    assert first.created
    state(client, first.job.name, JobState.SUSPENDED)
    # The same identity again, queued or not: the queued job is adopted, not doubled.
    for fresh in (True, False):
        again = client.submit(gpu_job(cluster, "team-a"), identity=ident, fresh_after_failure=fresh)
        assert not again.created
        assert (again.job.name, again.job.uid) == (first.job.name, first.job.uid)
    assert len(client.list_jobs(label_selector=f"{QUEUE_NAME_LABEL}=team-a")) == 2
    assert workload_owners(queues) == {blocker, first.job.name}
    # Stopped by its identity while queued: deleted, its Workload with it.
    assert client.stop_unfinished(identity=ident, action="delete") == [first.job.name]
    until(lambda: workload_owners(queues) == {blocker}, GC_TIMEOUT, "its Workload gone")

    # A failed attempt's next attempt is queued too: its own Workload, admitted in turn.
    client.delete_job(blocker)
    runtime = cluster.fast_fail_runtime()
    failing = "kueue/failing/run-1"
    spec = gpu_job(cluster, "team-a", gpus=1, behaviour="fail", runtime=runtime)
    zero = client.submit(spec, identity=failing).job.name
    ended, _ = client.wait(zero, ("Failed", "Complete"), timeout=120)
    assert ended.status is JobState.FAILED
    nxt = client.submit(spec, identity=failing)
    assert nxt.created
    assert nxt.job.name != zero
    annotations = (nxt.obj.get("metadata") or {}).get("annotations") or {}
    assert annotations[ATTEMPT_ANNOTATION] == "1"
    assert nxt.obj["spec"]["suspend"] is True  # Kueue's webhook, again
    until(lambda: nxt.job.name in workload_owners(queues), 60, "the attempt's Workload")
    assert {zero, nxt.job.name} <= workload_owners(queues)
    ended, _ = client.wait(nxt.job.name, ("Failed", "Complete"), timeout=120)
    assert ended.status is JobState.FAILED
    assert ended.queue is not None
    assert ended.queue.admitted or ended.queue.finished
