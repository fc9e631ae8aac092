"""``prune_jobs`` on the real control plane of ``../shared/control-plane`` (kube-apiserver
1.36, its garbage collector, JobSet v0.12, Trainer v2.3; issue 27, section 1): a pruned
finished job's JobSet, Jobs, pods and the Kueue Workload it owns are removed by the
garbage collector; a running job is never deleted; the API server's delete
preconditions stop a delete of a job that changed after it was listed, and prune then
reads it again. On the session's control plane (the ``control_plane`` fixture: skipped
where it cannot start, a fresh namespace per test).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_client_sync import spec

from kf_trainer_core.client import AsyncTrainerClient, TrainerClient
from kf_trainer_core.cluster.kueue import WORKLOADS
from kf_trainer_core.config import KubernetesConfig
from kf_trainer_core.k8s.calls import Create, Delete, Get, ListObjects, Patch
from kf_trainer_core.k8s.errors import ApiError
from kf_trainer_core.k8s.resources import JOBSETS, PODS, TRAINJOBS
from kf_trainer_core.manifest.builder import build_trainjob
from kf_trainer_core.spec import RuntimePatch
from kf_trainer_core.testing.control_plane import ControlPlane
from raw_calls import raw, raw_aside

pytestmark = pytest.mark.control_plane


@pytest.fixture
def client(control_plane: ControlPlane, control_plane_kubeconfig: Path) -> Iterator[TrainerClient]:
    control_plane.require_controllers()
    with TrainerClient(KubernetesConfig(kubeconfig=str(control_plane_kubeconfig))) as c:
        yield c


def held() -> RuntimePatch:
    """Node pods that kwok keeps Running until they are deleted."""
    pod = {"metadata": {"annotations": {"kwok.x-k8s.io/hold": "true"}}}
    rjob = {"name": "node", "template": {"spec": {"template": pod}}}
    return RuntimePatch.model_validate(
        {"training_runtime_spec": {"template": {"spec": {"replicated_jobs": [rjob]}}}}
    )


def finished_attempts(client: TrainerClient, identity: str, count: int) -> list[str]:
    """``count`` attempts of ``identity`` as the suite numbers them, each run to the end
    by the real controllers."""
    names = []
    for attempt in range(count):
        built = build_trainjob(
            spec(None), namespace=client.namespace, identity=identity, attempt=attempt
        )
        raw(client, Create(TRAINJOBS, client.namespace, built.manifest))
        names.append(built.name)
    for name in names:
        reach(client, name, "Complete")
    return names


def reach(client: TrainerClient, name: str, state: str, timeout: float = 120) -> None:
    """Poll until the job is in ``state``. (Not ``wait_for_job_status``: at the end of
    a wait the client reads node-0's log for the result, and kwok's pods have no log —
    the API server answers 500, which the wait raises.)"""
    deadline = time.monotonic() + timeout
    while client.get_job(name).status.value != state:
        assert time.monotonic() < deadline, f"{name} did not reach {state}"
        time.sleep(0.5)


def left(client: TrainerClient, job: str) -> set[str]:
    """Which kinds still hold an object of ``job``."""
    found = set()
    for res in (TRAINJOBS, JOBSETS, PODS, WORKLOADS):
        listing = raw(client, ListObjects(res, client.namespace))
        if any(o["metadata"]["name"].startswith(job) for o in listing["items"]):
            found.add(res.plural)
    return found


def gone(client: TrainerClient, jobs: list[str], timeout: float = 90) -> dict[str, set[str]]:
    deadline = time.monotonic() + timeout
    while True:
        rest = {j: left(client, j) for j in jobs}
        rest = {j: kinds for j, kinds in rest.items() if kinds}
        if not rest or time.monotonic() > deadline:
            return rest
        time.sleep(0.5)


def workload_of(client: TrainerClient, job: str) -> None:
    """A Workload owned by ``job``, as Kueue makes one (no Kueue controller runs here:
    the object and its owner reference are what the garbage collector acts on)."""
    obj = raw(client, Get(TRAINJOBS, client.namespace, job))
    body = {
        "apiVersion": WORKLOADS.api_version,
        "kind": "Workload",
        "metadata": {
            "name": f"{job}-wl",
            "ownerReferences": [
                {
                    "apiVersion": TRAINJOBS.api_version,
                    "kind": "TrainJob",
                    "name": job,
                    "uid": obj["metadata"]["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "queueName": "q",
            "podSets": [
                {
                    "name": "node",
                    "count": 1,
                    "template": {"spec": {"containers": [{"name": "node", "image": "x"}]}},
                }
            ],
        },
    }
    raw(client, Create(WORKLOADS, client.namespace, body))


def test_prune_on_the_real_control_plane(client: TrainerClient) -> None:
    attempts = finished_attempts(client, "cp/train/run-1", 3)
    running = client.submit(spec(None, held()), identity="cp/held/run-1").job.name
    reach(client, running, "Running")
    workload_of(client, attempts[1])
    assert left(client, attempts[1]) == {"trainjobs", "jobsets", "pods", "workloads"}

    # Attempt 0 holds the identity's name while attempt 2 stays: only attempt 1 is due.
    plan = client.prune_jobs(keep_last=1, dry_run=True)
    assert [e.name for e in plan.selected] == [attempts[1]]
    # The widest rules still never reach the running job.
    report = client.prune_jobs(keep_last=1, older_than=0)
    assert report.deleted == [attempts[1]]
    assert report.unfinished == 1
    assert gone(client, [attempts[1]]) == {}  # the garbage collector took everything
    assert left(client, attempts[2]) >= {"trainjobs", "jobsets"}
    assert client.get_job(running).status.value == "Running"

    # The async client, on the same server: nothing of the identity stays, all go.
    async def prune_rest() -> list[str]:
        async with AsyncTrainerClient(client.config, namespace=client.namespace) as aclient:
            return (await aclient.prune_jobs(older_than=0, identity_prefix="cp/train/")).deleted

    assert sorted(asyncio.run(prune_rest())) == sorted([attempts[0], attempts[2]])
    assert gone(client, [attempts[0], attempts[2]]) == {}
    client.delete_job(running)


def test_the_api_servers_preconditions_guard_the_delete(client: TrainerClient) -> None:
    (name,) = finished_attempts(client, "cp/changing/run-1", 1)
    obj = raw(client, Get(TRAINJOBS, client.namespace, name))
    meta = obj["metadata"]
    with pytest.raises(ApiError) as stale:
        raw(client, Delete(TRAINJOBS, client.namespace, name, resource_version="1"))
    assert stale.value.conflict
    with pytest.raises(ApiError) as other:
        raw(client, Delete(TRAINJOBS, client.namespace, name, uid="0000-other"))
    assert other.value.conflict
    assert client.get_job(name).uid == meta["uid"]  # still there

    # A job touched between prune's list and its delete: read again, still finished
    # and due, deleted under its new resourceVersion.
    touched: list[str] = []

    def touch(call: Any) -> None:
        if isinstance(call, Delete) and not touched:
            touched.append(call.name)
            patch = {"metadata": {"labels": {"touched": "yes"}}}
            raw_aside(client, Patch(TRAINJOBS, client.namespace, name, patch))

    with TrainerClient(client.config, namespace=client.namespace, request_hook=touch) as hooked:
        report = hooked.prune_jobs(older_than=0, identity_prefix="cp/changing/")
    assert touched == [name]
    assert report.deleted == [name]
    assert gone(client, [name]) == {}
