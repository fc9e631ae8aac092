"""``status`` is a subresource: written through the object it is dropped; written
through ``/status`` it is checked against the CRD (``trainerStatus`` needs its
``lastUpdatedTime``, a percentage is 0-100) and the client reads what a job reported
there as its progress. Defaulting (``spec.managedBy``) is the server's. Same on the
test bed and the real kube-apiserver."""

from __future__ import annotations

import json
from typing import Any

import pytest
from conformance_support import Cluster
from kubernetes import client as k8s
from test_api_validation import GROUP, PLURAL, VERSION, _create, _job

from kf_trainer_core.client import TrainerClient

REPORT = {
    "progressPercentage": 40,
    "estimatedRemainingSeconds": 90,
    "metrics": [{"name": "loss", "value": "0.25"}],
    "lastUpdatedTime": "2026-01-02T03:04:05Z",
}


def _api(cluster: Cluster) -> k8s.CustomObjectsApi:
    return k8s.CustomObjectsApi(cluster.api())


def _patch_status(cluster: Cluster, name: str, status: dict[str, Any]) -> dict[str, Any]:
    return dict(
        _api(cluster).patch_namespaced_custom_object_status(
            GROUP, VERSION, cluster.namespace, PLURAL, name, {"status": status}
        )
    )


def test_managed_by_is_defaulted(cluster: Cluster) -> None:
    created = _create(cluster, _job("defaulted"))
    assert created["spec"]["managedBy"] == "trainer.kubeflow.org/trainjob-controller"


def test_status_written_through_the_object_is_dropped(cluster: Cluster) -> None:
    _create(cluster, _job("status-dropped"))
    patched = _api(cluster).patch_namespaced_custom_object(
        GROUP,
        VERSION,
        cluster.namespace,
        PLURAL,
        "status-dropped",
        {"status": {"trainerStatus": REPORT}},
    )
    assert "trainerStatus" not in (patched.get("status") or {})


def test_trainer_status_needs_its_last_updated_time(cluster: Cluster) -> None:
    _create(cluster, _job("no-timestamp"))
    with pytest.raises(k8s.ApiException) as info:
        _patch_status(cluster, "no-timestamp", {"trainerStatus": {"progressPercentage": 5}})
    assert info.value.status == 422
    assert (
        "lastUpdatedTime is required when trainerStatus is present"
        in json.loads(info.value.body)["message"]
    )


def test_a_percentage_over_100_is_refused(cluster: Cluster) -> None:
    _create(cluster, _job("over-100"))
    with pytest.raises(k8s.ApiException) as info:
        _patch_status(cluster, "over-100", {"trainerStatus": {**REPORT, "progressPercentage": 101}})
    assert info.value.status == 422
    assert "status.trainerStatus.progressPercentage" in json.loads(info.value.body)["message"]


def test_reported_progress_is_what_get_job_shows(cluster: Cluster, client: TrainerClient) -> None:
    _create(cluster, _job("reports-progress"))
    _patch_status(cluster, "reports-progress", {"trainerStatus": REPORT})
    progress = client.get_job("reports-progress").progress
    assert progress is not None
    assert progress.percentage == 40
    assert progress.metrics == {"loss": 0.25}
    assert progress.last_updated == "2026-01-02T03:04:05Z"
