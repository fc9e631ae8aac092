"""The Airflow adapter once on the real control plane (issue 23, item 5): the operator
deferred to the triggerer through ``dag.test()``, the JobSet and Trainer controllers
running the job on kwok's nodes; and a succeeded job whose result cannot be read
(kwok's nodes serve no log) — a success for the operator, an error saying why for the
decorated task, whose return value is its XCom (item 4)."""

from __future__ import annotations

from pathlib import Path

import pytest
from dagtest import CONN_ENV, connection_json, run_dag

from kf_trainer_core.testing.control_plane import ControlPlane
from kf_trainer_core.testing.control_plane.multikueue import MultiKueuePair

pytestmark = [pytest.mark.control_plane, pytest.mark.usefixtures("airflow_db")]

#: What the API server answers for a kwok node's log: the log was asked of the worker's
#: kubelet (the manager has no pod to ask; tests/realcluster/test_multikueue_real.py).
KUBELET_LOG = ":10250/containerLogs/"
#: How a task's log follower says why the log ended.
FOLLOWED = "Could not follow the log of"


@pytest.fixture
def real_conn(
    control_plane: ControlPlane, control_plane_kubeconfig: Path, monkeypatch: pytest.MonkeyPatch
) -> Path:
    control_plane.require_controllers()
    monkeypatch.setenv(CONN_ENV, connection_json(kubeconfig_path=str(control_plane_kubeconfig)))
    return control_plane_kubeconfig


@pytest.mark.usefixtures("real_conn")
def test_operator_deferred_on_the_real_controllers(control_plane_namespace: str) -> None:
    run = run_dag("kf_real_deferred")
    assert run.state == "success"
    out = run.xcom("train")
    assert out["status"] == "Complete"
    assert out["namespace"] == control_plane_namespace
    assert out["result"] == {"double": 42}
    assert out["result_missing"] is None
    assert [s["status"] for s in out["steps"]] == ["Succeeded", "Succeeded"]
    log_less = run.xcom("log_less")
    assert log_less["status"] == "Complete"
    assert log_less["result"] is None
    assert log_less["result_missing"]["cause"] == "log-unreadable"
    assert log_less["result_missing"]["failure_class"] == "infrastructure"


@pytest.mark.usefixtures("real_conn")
def test_decorated_task_says_why_its_value_is_missing(
    capfd: pytest.CaptureFixture[str],
) -> None:
    run = run_dag("kf_real_decorated")
    assert run.state == "failed"
    assert run.state_of("square") == "failed"
    text = capfd.readouterr()
    said = text.out + text.err
    assert "TrainJobResultUnreachableError" in said
    assert "succeeded, but its result cannot be read" in said
    assert "connection refused" in said


@pytest.fixture
def multikueue_conn(
    multikueue: MultiKueuePair, multikueue_namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The worker by the connection's mapping (the adapter passes it through).
    monkeypatch.setenv(
        CONN_ENV,
        connection_json(
            kubeconfig_path=str(multikueue.manager.kubeconfig),
            namespace=multikueue_namespace,
            multikueue_workers={
                multikueue.cluster: {"kubeconfig": str(multikueue.worker.kubeconfig)}
            },
        ),
    )


@pytest.mark.usefixtures("multikueue_conn")
def test_operator_follows_a_multikueue_job_to_its_worker(
    multikueue: MultiKueuePair, capfd: pytest.CaptureFixture[str]
) -> None:
    run = run_dag("kf_real_multikueue")
    assert run.state == "success"
    out = run.xcom("train")
    assert out["status"] == "Complete"
    assert out["result"] == {"double": 42}
    assert out["worker"]["name"] == multikueue.cluster
    assert out["worker"]["reachable"] is True
    # Its log, followed from the triggerer, was asked of the worker's kubelet (kwok
    # serves none: the API server's answer names it, in the task's log).
    text = capfd.readouterr()
    said = (text.out + text.err).splitlines()
    assert any(FOLLOWED in line and KUBELET_LOG in line for line in said), said


@pytest.mark.usefixtures("multikueue_conn")
def test_execution_timeout_cancels_a_multikueue_job_on_both_clusters(
    multikueue: MultiKueuePair, multikueue_namespace: str
) -> None:
    ns = multikueue_namespace
    with multikueue.watching(ns) as seen:
        run = run_dag("kf_real_multikueue_timeout")
        assert run.state == "failed"
        assert seen.on_worker.is_set(), seen  # it ran on the worker before the timeout
        # on_kill deleted the manager's job; MultiKueue removes the worker's copy.
        assert not any(n.startswith("trainjob/") for n in multikueue.manager_has(ns))
        assert multikueue.left_over(ns) == []
    assert not seen.manager_jobsets  # the manager never ran it
