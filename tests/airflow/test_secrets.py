"""Credentials reach the cluster and nothing else: not the task log, XCom, rendered
templates, trigger arguments or log files — for a bearer token and for an inline
kubeconfig, on success and on failure, in the worker and deferred."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest
from dagtest import CONN_ENV, Run, connection_json, run_dag

from kf_trainer_core.testing.server import KubeTestServer

pytestmark = pytest.mark.usefixtures("airflow_db", "_informers_stop_first")


def everything_recorded(run: Run, home: Path) -> str:
    """What Airflow kept of a run, as text."""
    parts = [repr(x) for x in run.xcoms()]
    parts += [repr(f) for f in run.rendered_fields()]
    for path in (home / "logs").rglob("*"):
        if path.is_file():
            parts.append(path.read_text(errors="replace"))
    return "\n".join(parts)


def trigger_rows() -> str:
    from airflow.models.trigger import Trigger
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        return "\n".join(repr(t.kwargs) for t in session.scalars(select(Trigger)).all())


def check(text: str, secret: str) -> None:
    assert secret not in text


@pytest.mark.parametrize(
    ("dag_id", "scenario", "state"),
    [
        ("kf_train", "exec", "success"),
        ("kf_train", "fail", "failed"),
        ("kf_train_deferred", "exec", "success"),
        ("kf_train_deferred", "fail", "failed"),
    ],
)
def test_bearer_token_stays_secret(
    kube: KubeTestServer,
    airflow_db: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    dag_id: str,
    scenario: str,
    state: str,
) -> None:
    token = f"tok-{secrets.token_hex(12)}"
    kube.require_token({token})
    monkeypatch.setenv(CONN_ENV, connection_json(host=kube.url, password=token))
    run = run_dag(dag_id, {"scenario": scenario})
    assert run.state == state  # the token did reach the cluster
    recorded = everything_recorded(run, airflow_db)
    assert "'job_name'" in recorded  # what was scanned is the run's record
    check(capfd.readouterr().out, token)
    check(recorded, token)
    check(trigger_rows(), token)


def test_inline_kubeconfig_stays_secret(
    kube: KubeTestServer,
    airflow_db: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    token = f"kc-{secrets.token_hex(12)}"
    kube.require_token({token})
    text = kube.kubeconfig(tmp_path / "kubeconfig", token=token).read_text()
    monkeypatch.setenv(CONN_ENV, connection_json(kubeconfig=text))
    run = run_dag("kf_train_deferred", {"scenario": "exec"})
    assert run.state == "success"
    recorded = capfd.readouterr().out + everything_recorded(run, airflow_db) + trigger_rows()
    check(recorded, token)
    check(recorded, text)
