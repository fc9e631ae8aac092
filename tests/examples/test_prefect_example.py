"""``examples/prefect_retraining.py`` end to end on an ephemeral Prefect server: the
TrainJob on the local backend (no block: the flow's default), then on the
Kubernetes-API test server through a saved ``KubeflowTrainerCredentials`` block — only
the flow's parameters change."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from examples_support import (
    DAY,
    DRIFTED_DAY,
    EXEC_PROFILE,
    assert_no_secret,
    local_jobs,
    registry,
)

from kf_trainer_core.k8s.resources import TRAINJOBS
from kf_trainer_core.testing.server import KubeTestServer

pytestmark = pytest.mark.usefixtures("prefect_server")


def flow_logs(flow_run_id: Any) -> list[str]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.logging.handlers import APILogWorker

    APILogWorker.drain_all(timeout=10)
    with get_client(sync_client=True) as client:
        logs = client.read_logs(
            log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id])), limit=200
        )
    return [log.message for log in logs]


def flow_artifacts(flow_run_id: Any) -> list[Any]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    with get_client(sync_client=True) as client:
        found = client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id]))
        )
    return [a.model_dump(mode="json") for a in found]


def test_local_backend_promotes_then_keeps(tmp_path: Path) -> None:
    from prefect_retraining import retraining

    shared = tmp_path / "shared"
    with local_jobs(shared / "trainjobs") as client:
        state = retraining(day=DAY, shared_dir=str(shared), return_state=True)
        first = state.result()
        assert first["decision"] == "promoted"
        assert first["promoted_accuracy"] == 0.0
        assert registry(shared) == {
            "accuracy": first["accuracy"],
            "loss": first["loss"],
            "day": DAY,
        }
        again = retraining(day=DAY, shared_dir=str(shared))
        assert again["decision"] == "kept"
        assert again["accuracy"] == again["promoted_accuracy"] == first["accuracy"]
        assert [j.name for j in client.list_jobs()] == sorted(
            [first["trainjob"], again["trainjob"]]
        )
    logs = flow_logs(state.state_details.flow_run_id)
    assert any(f"Submitted TrainJob local/{first['trainjob']}" in line for line in logs)
    assert any(line.startswith("candidate {'accuracy'") for line in logs)


def test_test_server_through_a_block(kube: KubeTestServer, token: str, tmp_path: Path) -> None:
    from kf_trainer_prefect import KubeflowTrainerCredentials
    from prefect_retraining import retraining

    KubeflowTrainerCredentials(
        host=kube.url, token=token, namespace="default", watch_timeout=30, poll_interval=0.1
    ).save("kf-examples-cluster", overwrite=True)
    shared = tmp_path / "shared"
    params = {
        "credentials": "kf-examples-cluster",
        "profile": EXEC_PROFILE,
        "shared_dir": str(shared),
    }
    state = retraining(day=DAY, **params, return_state=True)
    first = state.result()
    assert first["decision"] == "promoted"
    later = retraining(day=DRIFTED_DAY, **params)
    assert later["decision"] == "promoted"
    assert later["accuracy"] > later["promoted_accuracy"] > 0
    assert registry(shared)["day"] == DRIFTED_DAY  # type: ignore[index]
    items, _ = kube.store.list(TRAINJOBS, "default")
    assert sorted(j["metadata"]["name"] for j in items) == sorted(
        [first["trainjob"], later["trainjob"]]
    )
    flow_run_id = state.state_details.flow_run_id
    # The token stays in the (encrypted) block: not in logs, artifacts, results or jobs.
    assert_no_secret(token, flow_logs(flow_run_id), flow_artifacts(flow_run_id), first, items)


def test_a_job_without_a_readable_result_fails_the_flow_saying_why(
    kube: KubeTestServer, token: str, tmp_path: Path
) -> None:
    """The flow read ``outputs.result["model_uri"]``: a job whose result cannot be read
    (nodes that serve no log) ended in ``TypeError: 'NoneType' object is not
    subscriptable`` (issue 35, item 5); ``require_result()`` says why."""
    from kf_trainer_core.errors import TrainJobResultUnavailableError
    from kf_trainer_core.testing.scenarios import SCENARIO_ANNOTATION
    from kf_trainer_prefect import KubeflowTrainerCredentials
    from prefect_retraining import retraining

    KubeflowTrainerCredentials(
        host=kube.url, token=token, namespace="default", watch_timeout=30, poll_interval=0.1
    ).save("kf-examples-no-result", overwrite=True)
    log_less = {
        "options": [{"type": "Annotations", "annotations": {SCENARIO_ANNOTATION: "log-less"}}]
    }
    state = retraining(
        day=DAY,
        credentials="kf-examples-no-result",
        profile=log_less,
        shared_dir=str(tmp_path / "shared"),
        return_state=True,
    )
    assert state.is_failed()
    with pytest.raises(TrainJobResultUnavailableError, match="its result cannot be read"):
        state.result()
    assert registry(tmp_path / "shared") is None  # nothing promoted
