"""MultiKueue on the test bed: a manager (the session's server, its simulated Kueue
queueing the job) and a worker (a second :class:`KubeTestServer`). The test bed has no
MultiKueue: the test plays it — it names the worker in the manager's Workload
(``status.clusterName``) and creates the worker's copy itself. The real pair is
``tests/realcluster/test_multikueue_real.py``."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from train_functions import train_linear

from kf_trainer_core.backends.kubernetes.workers import RoutedTransport
from kf_trainer_core.client import TrainerClient
from kf_trainer_core.cluster.kueue import QUEUE_NAME_LABEL, WORKLOADS
from kf_trainer_core.cluster.multikueue import (
    WorkerCluster,
    kubeconfig_of,
    secret_location,
    worker_result_missing,
)
from kf_trainer_core.cluster.results import gone_pod
from kf_trainer_core.cluster.status import JobState, job_state
from kf_trainer_core.config import KubernetesConfig
from kf_trainer_core.errors import SpecError
from kf_trainer_core.k8s.calls import Get, ListObjects, OpenLogStream, ReadLog
from kf_trainer_core.k8s.resources import EVENTS, JOBSETS, PODS, SECRETS, TRAINJOBS
from kf_trainer_core.spec import (
    MANAGED_BY_MULTIKUEUE,
    Annotations,
    CustomTrainer,
    Labels,
    ManagedBy,
    TrainJobSpec,
)
from kf_trainer_core.testing.kueue import KueueSimulator
from kf_trainer_core.testing.scenarios import SCENARIO_ANNOTATION, SIMULATED_RESULT
from kf_trainer_core.testing.server import KubeTestServer

CLUSTER = "w1"


def mk_job(*, managed: bool = True, scenario: str = "success") -> TrainJobSpec:
    options: list[Any] = [
        Labels({QUEUE_NAME_LABEL: "team-a"}),
        Annotations({SCENARIO_ANNOTATION: scenario}),
    ]
    if managed:
        options.append(ManagedBy(MANAGED_BY_MULTIKUEUE))
    return TrainJobSpec(
        trainer=CustomTrainer(train_linear, num_nodes=2, resources_per_node={"gpu": 1}),
        options=options,
    )


@pytest.fixture
def worker(tmp_path: Path) -> Iterator[tuple[KubeTestServer, Path]]:
    server = KubeTestServer(default_scenario="success")
    server.start(controller=True)
    try:
        yield server, server.kubeconfig(tmp_path / "worker-kubeconfig", namespace="default")
    finally:
        from kf_trainer_core.programs.informer import shutdown_informers

        shutdown_informers()
        server.stop()


@pytest.fixture
def kueue(server: KubeTestServer) -> KueueSimulator:
    sim: KueueSimulator = server.install_kueue()
    sim.add_cluster_queue("gpus", {"nvidia.com/gpu": 8, "cpu": 64})
    sim.add_local_queue("default", "team-a", "gpus")
    return sim


def until(check: Any, timeout: float = 15) -> Any:
    end = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < end, "condition not met in time"
        time.sleep(0.05)


def dispatch(server: KubeTestServer, worker: KubeTestServer, name: str, scenario: str) -> None:
    """What MultiKueue does: the worker's copy of the job (its own controller runs it),
    and the manager's Workload naming the worker."""
    obj = server.store.get(TRAINJOBS, "default", name)
    copy = {
        "apiVersion": obj["apiVersion"],
        "kind": "TrainJob",
        "metadata": {
            "name": name,
            "namespace": "default",
            "labels": obj["metadata"].get("labels") or {},
            "annotations": {**(obj["metadata"].get("annotations") or {}),
                            SCENARIO_ANNOTATION: scenario},
        },
        "spec": {k: v for k, v in obj["spec"].items() if k not in ("managedBy", "suspend")},
    }  # fmt: skip
    worker.store.create(TRAINJOBS, copy)
    uid = obj["metadata"]["uid"]
    mine = until(lambda: [
        w for w in server.store.list(WORKLOADS, "default")[0]
        if any(r.get("uid") == uid for r in w["metadata"].get("ownerReferences") or [])
    ])  # fmt: skip
    server.store.patch(
        WORKLOADS,
        "default",
        mine[0]["metadata"]["name"],
        {"status": {"clusterName": CLUSTER}},
        subresource="status",
    )


def mapped(k8s_config: KubernetesConfig, worker_kubeconfig: Path) -> KubernetesConfig:
    return k8s_config.model_copy(
        update={
            "multikueue_workers": KubernetesConfig(
                multikueue_workers={CLUSTER: {"kubeconfig": str(worker_kubeconfig)}}
            ).multikueue_workers
        }
    )


def test_a_dispatched_job_is_read_and_waited_for_on_its_worker(
    server: KubeTestServer,
    kueue: KueueSimulator,
    worker: tuple[KubeTestServer, Path],
    k8s_config: KubernetesConfig,
) -> None:
    wserver, wconfig = worker
    with TrainerClient(mapped(k8s_config, wconfig)) as client:
        name = client.submit(mk_job()).job.name
        until(lambda: client.get_job(name).queue and client.get_job(name).queue.admitted)
        # Admitted on the manager, no pods there (its Trainer leaves managedBy jobs).
        assert client.get_job(name).steps == []
        dispatch(server, wserver, name, "never-finish")
        before = len(server.requests.records)
        job = until(lambda: len((j := client.get_job(name)).steps) == 2 and j)
        assert job.worker == WorkerCluster(name=CLUSTER, reachable=True)
        assert {s.name for s in job.steps} == {"node-0", "node-1"}
        assert job.status is not JobState.COMPLETE
        events = client.get_job_events(name)
        assert events  # the worker's (its controllers'); the manager has none of pods
        assert all(e.involved_object_kind for e in events)
    # Once dispatched, its pods are read on the worker only (events on both: the
    # manager's TrainJob has Kueue's).
    later = server.requests.records[before:]
    assert not [r for r in later if "/pods" in r.path]
    assert [r for r in wserver.requests.records if "/pods" in r.path]
    assert [r for r in later if "/trainjobs/" in r.path]  # the job itself: the manager's


def test_the_wait_reads_the_result_on_the_worker(
    server: KubeTestServer,
    kueue: KueueSimulator,
    worker: tuple[KubeTestServer, Path],
    k8s_config: KubernetesConfig,
) -> None:
    wserver, wconfig = worker
    with TrainerClient(mapped(k8s_config, wconfig)) as client:
        name = client.submit(mk_job()).job.name
        until(lambda: client.get_job(name).queue and client.get_job(name).queue.admitted)
        dispatch(server, wserver, name, "success")
        # The manager's copy never finishes here (no MultiKueue to copy the status back):
        # only a wait that follows the job to its worker ends.
        job, result = client.wait(name, timeout=30)
    assert job.status is JobState.COMPLETE
    assert result == json.loads(SIMULATED_RESULT)
    assert job.worker is not None
    assert job.worker.name == CLUSTER


def test_an_unmapped_worker_without_a_readable_secret_says_so(
    server: KubeTestServer, kueue: KueueSimulator, k8s_config: KubernetesConfig
) -> None:
    told: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: told.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger("kf_trainer_core.backends.kubernetes.workers")
    logger.addHandler(handler)
    with TrainerClient(k8s_config) as client:
        name = client.submit(mk_job()).job.name

        # The simulated Kueue makes the Workload on its own thread, after the create.
        workloads = until(lambda: server.store.list(WORKLOADS, "default")[0])
        server.store.patch(
            WORKLOADS, "default", workloads[0]["metadata"]["name"],
            {"status": {"clusterName": CLUSTER}}, subresource="status",
        )  # fmt: skip
        first = client.get_job(name)
        again = client.get_job(name)
    assert first.worker is not None
    assert not first.worker.reachable
    problem = first.worker.problem or ""
    # The test bed has no MultiKueueCluster kind: the manager cannot say where it is.
    assert f"cannot reach worker cluster {CLUSTER!r}" in problem
    assert "multikueue_workers" in problem
    assert again.worker == first.worker
    logger.removeHandler(handler)
    assert len([m for m in told if CLUSTER in m]) == 1  # said once


def test_a_job_not_managed_by_multikueue_is_read_as_before(
    server: KubeTestServer, kueue: KueueSimulator, k8s_config: KubernetesConfig
) -> None:
    with TrainerClient(k8s_config) as client:
        name = client.submit(mk_job(managed=False)).job.name
        job, _ = client.wait(name, timeout=30)
    assert job.worker is None
    assert job.status is JobState.COMPLETE


# ---------------------------------------------------------------- pure parts


class _T:
    def __init__(self, name: str) -> None:
        self.name = name
        self.seen: list[Any] = []

    async def perform(self, call: Any) -> Any:
        self.seen.append(call)
        return self.name


async def test_the_routed_transport_sends_what_runs_to_the_worker() -> None:
    manager, worker = _T("manager"), _T("worker")
    routed = RoutedTransport(manager, worker)  # type: ignore[arg-type]
    to_worker = [
        ListObjects(PODS, "ns", label_selector="x"),
        ListObjects(EVENTS, "ns"),
        Get(JOBSETS, "ns", "j"),
        ReadLog("ns", "p", "node"),
    ]
    to_manager = [Get(TRAINJOBS, "ns", "j"), ListObjects(WORKLOADS, "ns"), Get(SECRETS, "s", "x")]
    for call in to_worker:
        assert await routed.perform(call) == "worker"
    for call in to_manager:
        assert await routed.perform(call) == "manager"
    assert routed._pick(OpenLogStream("ns", "p", "node")) is worker


def test_the_configuration_of_workers() -> None:
    cfg = KubernetesConfig.parse(
        {"kubeconfig": "/k", "multikueue_workers": '{"w1": "ctx-1", "w2": {"kubeconfig": "/w2"}}'}
    )
    assert cfg.worker_config("w1").context == "ctx-1"
    assert cfg.worker_config("w1").kubeconfig == "/k"
    assert cfg.worker_config("w2").kubeconfig == "/w2"
    with pytest.raises(SpecError, match="names neither a kubeconfig file nor a context"):
        KubernetesConfig(multikueue_workers={"w1": {}})
    with pytest.raises(SpecError, match="is not a MultiKueueCluster name"):
        KubernetesConfig(multikueue_workers={"Not_A_Name": "ctx"})
    with pytest.raises(SpecError, match="is not JSON"):
        KubernetesConfig.parse({"multikueue_workers": "{oops"})
    # A Secret's document is kept as a secret: never in a repr or a dump.
    doc = "apiVersion: v1\nkind: Config\nusers: [{name: u, user: {token: s3cr3t-t0ken}}]\n"
    from_secret = cfg.worker_config("w9", doc)
    assert "s3cr3t" not in repr(from_secret)
    assert "s3cr3t" not in str(from_secret.model_dump())


def test_where_a_multikueue_cluster_keeps_its_kubeconfig() -> None:
    import base64

    spec = {"spec": {"clusterSource": {"kubeConfig": {"locationType": "Secret", "location": "s"}}}}
    assert secret_location(spec) == ("Secret", "s")
    assert secret_location(
        {"spec": {"kubeConfig": {"location": "/p", "locationType": "Path"}}}
    ) == (
        "Path",
        "/p",
    )
    assert secret_location({}) is None
    assert kubeconfig_of({"data": {"kubeconfig": base64.b64encode(b"doc").decode()}}) == "doc"
    assert kubeconfig_of({"data": {"kubeconfig": "%%%"}}) is None
    assert kubeconfig_of({"data": {}}) is None


def test_a_result_lost_with_the_workers_copy_says_why() -> None:
    gone = gone_pod("ns/j", None)
    said = worker_result_missing(gone, "ns/j", WorkerCluster(name=CLUSTER, reachable=True))
    assert said is not None
    assert "MultiKueue removed the job's copy" in said.message
    out_of_reach = WorkerCluster(name=CLUSTER, problem="no route. Fix: map it.")
    said = worker_result_missing(gone, "ns/j", out_of_reach)
    assert said is not None
    assert "no route. Fix: map it." in said.message
    assert said.failure_class.value == "infrastructure"
    assert worker_result_missing(None, "ns/j", out_of_reach) is None


def test_a_suspended_multikueue_job_reads_suspended() -> None:
    # Evicted by Kueue: the status copied from the worker says it ran; spec.suspend rules.
    obj = {
        "spec": {"managedBy": MANAGED_BY_MULTIKUEUE, "suspend": True},
        "status": {"jobsStatus": [{"name": "node", "ready": 2}]},
    }
    assert job_state(obj) is JobState.SUSPENDED
    obj["spec"]["managedBy"] = "trainer.kubeflow.org/trainjob-controller"
    assert job_state(obj) is JobState.RUNNING


def test_suspend_and_resume_go_through_the_workload(
    server: KubeTestServer, kueue: KueueSimulator, k8s_config: KubernetesConfig
) -> None:
    # Kueue undoes spec.suspend on an admitted job (the worker's copy would run on):
    # every suspend of the suite — suspend_job, cancel_job, stop_unfinished — sets the
    # Workload's spec.active, Kueue's switch (the real Kueue's answer:
    # tests/realcluster/test_multikueue_real.py).
    def active() -> Any:
        workloads, _ = server.store.list(WORKLOADS, "default")
        return [(w.get("spec") or {}).get("active") for w in workloads]

    with TrainerClient(k8s_config) as client:
        name = client.submit(mk_job()).job.name
        until(lambda: active())
        client.suspend_job(name)
        assert active() == [False]
        client.resume_job(name)
        assert active() == [True]
        assert client.cancel_job(name, "suspend")
        assert active() == [False]
        client.resume_job(name)
        assert client.stop_unfinished(name, action="suspend") == [name]
        assert active() == [False]
        # A Kueue job of this cluster the same way: Kueue undoes a spec.suspend there
        # too (tests/conformance/test_kueue_jobs.py, both Kueues).
        local = client.submit(mk_job(managed=False, scenario="never-finish")).job.name
        until(lambda: len(active()) == 2)
        client.suspend_job(local)
        assert active() == [False, False]
        assert server.store.get(TRAINJOBS, "default", local)["spec"]["suspend"] is True


def test_a_wait_handed_to_the_worker_ends_with_the_queue_as_it_is_then(
    server: KubeTestServer,
    kueue: KueueSimulator,
    worker: tuple[KubeTestServer, Path],
    k8s_config: KubernetesConfig,
) -> None:
    # Kueue names the worker (status.clusterName) before the Workload reads Admitted: a
    # wait hands over to the worker while the queue status says "queued". When it ends,
    # what it says of the queue is read again: admitted by then, not "queued" (seen on
    # the real pair: "did not reach Complete within 8s (it is Running; queued in …)").
    import threading

    from kf_trainer_core.errors import TrainJobTimeoutError

    wserver, wconfig = worker
    kueue.stop_queue("gpus")  # Kueue holds the Workload: not admitted yet
    with TrainerClient(mapped(k8s_config, wconfig)) as client:
        name = client.submit(mk_job()).job.name
        until(lambda: server.store.list(WORKLOADS, "default")[0])
        dispatch(server, wserver, name, "never-finish")
        raised: list[BaseException] = []

        def wait() -> None:
            try:
                client.wait(name, timeout=3)
            except BaseException as exc:
                raised.append(exc)

        waiting = threading.Thread(target=wait)
        waiting.start()
        # Handed over: the wait reads the worker's copy.
        until(lambda: any("/trainjobs" in r.path for r in wserver.requests.records))
        kueue.stop_queue("gpus", False)  # now Kueue admits it
        waiting.join(30)
    (err,) = raised
    assert isinstance(err, TrainJobTimeoutError), err
    assert "it is Running" in str(err)
    assert "queued in" not in str(err), err
    assert err.job is not None
    assert err.job.queue is not None
    assert err.job.queue.admitted, err.job.queue
