"""Deleting a job that has not finished, on both servers.

Trainer v2.3 re-applies the JobSet of an unfinished TrainJob that is being deleted in
the foreground, so a foreground delete of a running job takes from seconds to minutes.
The suite suspends the job, deletes it in the background (the TrainJob goes at once) and
returns once the garbage collector has removed its JobSet: a job submitted again under
the name would otherwise be run by the Trainer on the old JobSet. These tests count the
pods created after the delete call, by uid, through a watch that replays the namespace's
pod events from before the call."""

from __future__ import annotations

from typing import Any

import pytest
from conformance_support import GC_TIMEOUT, Cluster, until, until_collected
from kubernetes import client as k8s
from kubernetes import watch as k8s_watch

from kf_trainer_core.client import AsyncTrainerClient, TrainerClient
from kf_trainer_core.errors import TrainJobNotFoundError


def pods_now(cluster: Cluster) -> tuple[set[str], str]:
    """The uids of the namespace's pods and the list's resourceVersion."""
    listing = k8s.CoreV1Api(cluster.api()).list_namespaced_pod(cluster.namespace)
    return {p.metadata.uid for p in listing.items}, str(listing.metadata.resource_version)


def pods_added_since(cluster: Cluster, resource_version: str) -> dict[str, dict[str, Any]]:
    """Every pod created after ``resource_version`` (uid -> the pod as last seen),
    including those already deleted again."""
    api = cluster.api()
    core = k8s.CoreV1Api(api)
    seen: dict[str, dict[str, Any]] = {}
    stream = k8s_watch.Watch().stream(
        core.list_namespaced_pod,
        cluster.namespace,
        resource_version=resource_version,
        timeout_seconds=2,
    )
    for event in stream:
        pod = event["object"]
        if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
            seen[pod.metadata.uid] = api.sanitize_for_serialization(pod)
    return seen


def owner_uid(obj: dict[str, Any]) -> str | None:
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return str(refs[0]["uid"]) if refs else None


def test_deleting_a_running_job_starts_no_new_pods(
    client: TrainerClient, controllers: Cluster
) -> None:
    name = client.submit(controllers.spec("hold", nodes=2)).job.name
    client.wait_for_job_status(name, "Running", timeout=60)
    until(lambda: len(controllers.owned("pods")) == 2, what="2 pods")
    before, rv = pods_now(controllers)
    assert client.delete_job(name) is True

    def gone() -> bool:
        try:
            client.get_job(name)
        except TrainJobNotFoundError:
            return True
        return False

    assert gone()  # deleted in the background: at once
    until(lambda: not controllers.owned("pods"), timeout=GC_TIMEOUT, what="pods collected")
    added = set(pods_added_since(controllers, rv)) - before
    # Without the suspend, Trainer's re-applied JobSet made the Job controller start
    # the pods again (a running job restarted, several times on a real cluster).
    assert added == set(), f"{len(added)} pods were created after the delete"
    assert not controllers.owned("jobsets")
    assert not controllers.owned("jobs")


async def test_same_name_resubmit_after_delete_runs_only_the_new_jobs_pods(
    aclient: AsyncTrainerClient, controllers: Cluster
) -> None:
    spec = controllers.spec("hold", nodes=2)
    old = (await aclient.submit(spec)).job
    await aclient.wait_for_job_status(old.name, "Running", timeout=60)
    until(lambda: len(controllers.owned("pods")) == 2, what="2 pods")
    before, rv = pods_now(controllers)
    assert await aclient.delete_job(old.name) is True
    # The same spec gets the same name: the old TrainJob and its JobSet are gone, the
    # submit creates at once.
    new = (await aclient.submit(spec)).job
    assert new.name == old.name
    assert new.uid
    assert new.uid != old.uid

    def of_new_job(pod: dict[str, Any]) -> bool:
        jobsets = {j["metadata"]["uid"]: j for j in controllers.owned("jobsets")}
        jobs = {j["metadata"]["uid"]: j for j in controllers.owned("jobs")}
        job = jobs.get(owner_uid(pod) or "")
        jobset = jobsets.get(owner_uid(job) or "") if job else None
        return jobset is not None and owner_uid(jobset) == new.uid

    # Polled rather than waited for: on the real server the Trainer refuses the new job
    # while the old job's runtime-snapshot ConfigMap is not yet collected, and builds
    # it on its retry.
    def new_pods() -> list[dict[str, Any]]:
        live = controllers.owned("pods")
        return live if len(live) == 2 and all(of_new_job(p) for p in live) else []

    live = until(new_pods, timeout=GC_TIMEOUT, what="the new job's 2 pods")
    assert not {p["metadata"]["uid"] for p in live} & before, "an old pod was adopted"
    # Every pod created since the delete is the new job's: none of the old job was
    # started again while it was being deleted.
    added = {u: p for u, p in pods_added_since(controllers, rv).items() if u not in before}
    strays = [p["metadata"]["name"] for p in added.values() if not of_new_job(p)]
    assert strays == [], f"pods of the deleted job started after the delete: {strays}"
    assert await aclient.delete_job(new.name) is True
    await until_collected(aclient, new.name)


@pytest.mark.parametrize("face", ["sync", "async"])
async def test_delete_returns_once_the_old_jobset_is_gone(
    face: str, client: TrainerClient, aclient: AsyncTrainerClient, controllers: Cluster
) -> None:
    # Deleted in the background, the TrainJob goes at once and its JobSet a moment later
    # (0.3-0.4 s on a real control plane). A job submitted under the name in between is
    # run by the real Trainer on the old JobSet (it takes it over once the old runtime
    # snapshot is collected), so the delete returns only once that JobSet is gone.
    name = client.submit(controllers.spec("hold", nodes=2)).job.name
    client.wait_for_job_status(name, "Running", timeout=60)
    (jobset,) = controllers.owned("jobsets")
    uid = owner_uid(jobset)
    assert uid
    deleted = client.delete_job(name) if face == "sync" else await aclient.delete_job(name)
    assert deleted is True
    with pytest.raises(TrainJobNotFoundError):
        client.get_job(name)
    assert [j for j in controllers.owned("jobsets") if owner_uid(j) == uid] == []
    # Submitted again at once, the job runs on a JobSet of its own.
    new = client.submit(controllers.spec("hold", nodes=2)).job
    assert new.name == name
    client.wait_for_job_status(name, "Running", timeout=60)
    fresh = until(lambda: controllers.owned("jobsets"), what="the new JobSet")
    assert [owner_uid(j) for j in fresh] == [new.uid]
    assert fresh[0]["metadata"]["uid"] != jobset["metadata"]["uid"]
    assert client.delete_job(name) is True


def test_delete_without_read_access_to_jobsets_pauses_instead(
    cluster: Cluster, client: TrainerClient, calls: list[Any]
) -> None:
    # Where RBAC refuses to read JobSets the delete cannot check that the old JobSet is
    # gone: it reads once, then pauses (UNREADABLE_PAUSE_SECONDS) instead of polling.
    from kf_trainer_core.k8s.calls import Get
    from kf_trainer_core.k8s.resources import JOBSETS

    if cluster.kube is None:
        pytest.skip("the test bed's RBAC fault; the real server's RBAC: docs/troubleshooting.md")
    name = client.submit(cluster.spec("hold")).job.name
    cluster.kube.faults.forbid("get", "jobsets")
    calls.clear()
    assert client.delete_job(name) is True
    assert len([c for c in calls if isinstance(c, Get) and c.resource == JOBSETS]) == 1
    with pytest.raises(TrainJobNotFoundError):
        client.get_job(name)
