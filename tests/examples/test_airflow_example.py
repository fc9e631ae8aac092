"""``examples/airflow_retraining.py`` end to end with ``dag.test()``: the tasks run in
this process, the deferred training wait in an inline trigger; the TrainJob runs on the
local backend, then on the Kubernetes-API test server (the training function really
runs there too). Only the connection ``kf_retraining`` (and, for the test server, the
profile's scenario annotation) changes between the two."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from examples_support import (
    DAY,
    DRIFTED_DAY,
    EXAMPLES,
    EXEC_PROFILE,
    assert_no_secret,
    local_jobs,
    registry,
)

from kf_trainer_core.k8s.resources import TRAINJOBS
from kf_trainer_core.testing.server import KubeTestServer

pytestmark = [
    pytest.mark.usefixtures("examples_bundle"),
    # Airflow's own reading of examples/.airflowignore uses a deprecated pathspec class.
    pytest.mark.filterwarnings("ignore:GitWildMatchPattern:DeprecationWarning"),
]

CONN_ENV = "AIRFLOW_CONN_KF_RETRAINING"


def load_dag(monkeypatch: pytest.MonkeyPatch, profile: Any = None) -> Any:
    """The example DAG as Airflow parses it, with ``KF_RETRAIN_PROFILE`` set."""
    from airflow.dag_processing.dagbag import DagBag

    if profile is None:
        monkeypatch.delenv("KF_RETRAIN_PROFILE", raising=False)
    else:
        monkeypatch.setenv("KF_RETRAIN_PROFILE", json.dumps(profile))
    bag = DagBag(dag_folder=str(EXAMPLES))
    assert not bag.import_errors, bag.import_errors
    # .airflowignore keeps Airflow out of the other examples.
    assert {Path(d.fileloc).name for d in bag.dags.values()} == {"airflow_retraining.py"}
    dag = bag.get_dag("kf_retraining")
    assert dag is not None
    return dag


def run(dag: Any, day: int, shared: Path) -> dict[str, str]:
    """One DAG run for ``day``; the states of its tasks."""
    dag_run = dag.test(run_conf={"day": day, "shared_dir": str(shared)})
    assert str(dag_run.state) == "success"
    return {ti.task_id: str(ti.state) for ti in dag_run.get_task_instances()}


def xcoms(dag_id: str) -> list[Any]:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        return [
            x.value for x in session.scalars(select(XComModel).where(XComModel.dag_id == dag_id))
        ]


def rendered(dag_id: str) -> list[Any]:
    from airflow.models.renderedtifields import RenderedTaskInstanceFields as RTIF
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        return [
            r.rendered_fields for r in session.scalars(select(RTIF).where(RTIF.dag_id == dag_id))
        ]


def test_local_backend_promotes_then_keeps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    shared = tmp_path / "shared"
    state = shared / "trainjobs"
    monkeypatch.setenv(
        CONN_ENV,
        json.dumps(
            {
                "conn_type": "kubeflow_trainer",
                "extra": {"backend": "local", "state_dir": str(state)},
            }
        ),
    )
    dag = load_dag(monkeypatch)
    with local_jobs(state) as client:
        first = run(dag, DAY, shared)
        assert first["promote_model"] == "success"
        assert first["keep_promoted"] == "skipped"
        promoted = registry(shared)
        assert promoted is not None
        assert promoted["day"] == DAY
        # The same day again, as `python examples/airflow_retraining.py` runs it: the
        # same data make the same model, which is not better; the run ends with a
        # summary, after Airflow's logging.
        import airflow_laptop

        code = airflow_laptop.run(dag, ["--day", str(DAY), "--shared-dir", str(shared)])
        assert code == 0
        assert registry(shared) == promoted
        jobs = client.list_jobs()
        assert [j.status.value for j in jobs] == ["Complete", "Complete"]
        assert all(j.namespace == "local" for j in jobs)
    out = capfd.readouterr().out
    # No quiet seconds unexplained: the database set-up and the DAG run are announced.
    assert "preparing its metadata database" in out
    assert out.index("preparing its metadata database") < out.index("Running the DAG ")
    # The training log reached the task log (the last lines, after the deferred wait).
    assert "[node-0] epoch 20: loss=" in out
    summary = out[out.rindex("Summary: ") :]
    assert summary.startswith("Summary: kept the promoted model")
    assert f"model:   {shared / 'registry' / 'model.json'} (accuracy=" in summary
    assert f"--state-dir {state} jobs get " in summary
    assert any(f"TrainJob {j.name}" in summary for j in jobs), summary


def test_test_server_promotes_a_drifted_day(
    kube: KubeTestServer,
    token: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    shared = tmp_path / "shared"
    # A cluster behind a bearer token: the connection's password.
    monkeypatch.setenv(
        CONN_ENV,
        json.dumps(
            {
                "conn_type": "kubeflow_trainer",
                "host": kube.url,
                "password": token,
                "extra": {"namespace": "default", "watch_timeout": 30, "poll_interval": 0.1},
            }
        ),
    )
    dag = load_dag(monkeypatch, EXEC_PROFILE)
    first = run(dag, DAY, shared)
    assert first["promote_model"] == "success"
    assert registry(shared)["day"] == DAY  # type: ignore[index]
    # A few days later the data have drifted: the fresh model beats the promoted one.
    later = run(dag, DRIFTED_DAY, shared)
    assert later["promote_model"] == "success"
    assert later["keep_promoted"] == "skipped"
    assert registry(shared)["day"] == DRIFTED_DAY  # type: ignore[index]
    items, _ = kube.store.list(TRAINJOBS, "default")
    assert len(items) == 2
    for job in items:
        labels = job["metadata"]["labels"]
        assert labels["app.kubernetes.io/part-of"] == "kf-retraining"
    # The token reaches the server only: not the logs, XComs, rendered fields or jobs.
    assert_no_secret(token, capfd.readouterr().out, xcoms("kf_retraining"))
    assert_no_secret(token, rendered("kf_retraining"), items)
