"""Watches: an expired resourceVersion answers 410 Gone inside a successful watch (an
ERROR event), on both servers; and the client's shared watch keeps serving waits."""

from __future__ import annotations

import json
from typing import Any

from conformance_support import Cluster
from kubernetes import client as k8s

from kf_trainer_core.client import TrainerClient
from kf_trainer_core.cluster.status import JobState


def _watch_from(cluster: Cluster, rv: str) -> list[dict[str, Any]]:
    resp = k8s.CustomObjectsApi(cluster.api()).list_namespaced_custom_object(
        "trainer.kubeflow.org",
        "v1alpha1",
        cluster.namespace,
        "trainjobs",
        watch=True,
        resource_version=rv,
        timeout_seconds=2,
        _preload_content=False,
    )
    try:
        return [json.loads(line) for line in resp.data.decode().splitlines() if line.strip()]
    finally:
        resp.release_conn()


def test_a_too_old_resource_version_is_410_inside_the_watch(cluster: Cluster) -> None:
    # Real: etcd compacted, and version 2 predates the apiserver's watch cache (a
    # compaction alone does not expire versions the watch cache still holds). Test bed:
    # its history compacted.
    if cluster.kube is not None:
        cluster.kube.faults.expire_resource_versions()
    else:
        assert cluster.cp is not None
        cluster.cp.compact()
    events = _watch_from(cluster, "2")
    assert len(events) == 1
    (event,) = events
    assert event["type"] == "ERROR"
    status = event["object"]
    assert status["code"] == 410
    assert status["reason"] == "Expired"
    assert "too old resource version" in status["message"]


def test_a_current_resource_version_streams_changes(
    cluster: Cluster, client: TrainerClient
) -> None:
    listed = k8s.CustomObjectsApi(cluster.api()).list_namespaced_custom_object(
        "trainer.kubeflow.org", "v1alpha1", cluster.namespace, "trainjobs"
    )
    rv = listed["metadata"]["resourceVersion"]
    name = client.submit(cluster.spec("hold")).job.name
    events = _watch_from(cluster, rv)
    assert events
    assert events[0]["type"] == "ADDED"
    assert events[0]["object"]["metadata"]["name"] == name


def test_waits_share_the_watch_across_jobs_started_later(
    client: TrainerClient, controllers: Cluster
) -> None:
    first = client.submit(controllers.spec("hold")).job.name
    assert client.wait_for_job_status(first, "Running", timeout=60).status is JobState.RUNNING
    second = client.submit(controllers.spec("hold")).job.name
    assert client.wait_for_job_status(second, "Running", timeout=60).status is JobState.RUNNING
