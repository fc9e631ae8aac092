"""Deleting a job that has not finished, on both servers.

Trainer v2.3 re-applies the JobSet of an unfinished TrainJob that is being deleted in
the foreground, so a plain foreground delete of a running job starts its pods again
(new uids) each time the garbage collector removes them, and the TrainJob takes from
seconds to minutes to go. The suite suspends such a job before deleting it: these tests
count the pods created after the delete call, by uid, through a watch that replays the
namespace's pod events from before the call."""

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


@pytest.mark.usefixtures("delete_race")
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

    until(gone, timeout=GC_TIMEOUT, what="TrainJob collected")
    until(lambda: not controllers.owned("pods"), timeout=GC_TIMEOUT, what="pods collected")
    added = set(pods_added_since(controllers, rv)) - before
    # Without the suspend, Trainer's re-applied JobSet made the Job controller start
    # the pods again (a running job restarted, several times on a real cluster).
    assert added == set(), f"{len(added)} pods were created after the delete"
    assert not controllers.owned("jobsets")
    assert not controllers.owned("jobs")


@pytest.mark.usefixtures("delete_race")
async def test_same_name_resubmit_after_delete_runs_only_the_new_jobs_pods(
    aclient: AsyncTrainerClient, controllers: Cluster
) -> None:
    spec = controllers.spec("hold", nodes=2)
    old = (await aclient.submit(spec)).job
    await aclient.wait_for_job_status(old.name, "Running", timeout=60)
    until(lambda: len(controllers.owned("pods")) == 2, what="2 pods")
    before, rv = pods_now(controllers)
    assert await aclient.delete_job(old.name) is True
    # The same spec gets the same name: the submit waits the old job out, then creates.
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

    # Polled rather than waited for: on the real server the Trainer may refuse the new
    # job once (a runtime-snapshot ConfigMap its old reconcile re-made after the old
    # TrainJob went, not yet collected) and build it on its retry.
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
