"""The same DAGs on the local backend (``backend: local`` in the connection): jobs run as
processes on this machine, the training function for real. Only the connection
changes."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from dagtest import CONN_ENV, connection_json, run_dag

from kf_trainer_core.client import TrainerClient
from kf_trainer_core.config import LocalConfig

pytestmark = pytest.mark.usefixtures("airflow_db")


@pytest.fixture
def local(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[TrainerClient]:
    """Connection ``kf_test`` on a local backend of this test's own; every job is
    deleted afterwards, and none of their processes may outlive the test."""
    from kf_trainer_core.backends.local.procs import processes_of_job

    state = tmp_path / "state"
    monkeypatch.setenv(CONN_ENV, connection_json(backend="local", state_dir=str(state)))
    with TrainerClient(LocalConfig(state_dir=str(state))) as client:
        yield client
        jobs = client.list_jobs()
        for job in jobs:
            client.delete_job(job.name)
        deadline = time.monotonic() + 30
        while any(processes_of_job(str(job.uid)) for job in jobs):
            assert time.monotonic() < deadline, "processes of deleted jobs are still running"
            time.sleep(0.1)


def test_train_in_worker(local: TrainerClient, capfd: pytest.CaptureFixture[str]) -> None:
    run = run_dag("kf_train")
    assert run.state == "success"
    assert run.xcom("train", "result") == {"double": 42}
    assert run.xcom("train", "namespace") == "local"
    assert "[node-0] doubling 21" in capfd.readouterr().out
    (job,) = local.list_jobs()
    assert job.status.value == "Complete"


def test_train_deferred(local: TrainerClient) -> None:
    run = run_dag("kf_train_deferred")
    assert run.state == "success"
    assert run.xcom("train")["result"] == {"double": 42}


def test_failure_shows_the_training_error(
    local: TrainerClient, capfd: pytest.CaptureFixture[str]
) -> None:
    run = run_dag("kf_explode")
    assert run.state == "failed"
    text = capfd.readouterr().out
    assert "ValueError: loss diverged at lr=10.0" in text
    assert "failing step node-0" in text
    # Said once in the log and once in the error's reason, not three times over (the
    # streamed log, the error's log tail, a chained traceback repeating both).
    assert text.count("ValueError: loss diverged at lr=10.0") == 2
    assert "During handling of the above exception" not in text


@pytest.mark.parametrize("dag_id", ["kf_hostile", "kf_hostile_deferred"])
def test_a_hostile_job_reaches_the_task_log_harmlessly(
    dag_id: str, local: TrainerClient, capfd: pytest.CaptureFixture[str]
) -> None:
    # Issue 24 defects 1, 5, 15 and issue 26 item 5: streamed (in the worker) or its
    # "Last N log lines" (deferred), and the failure the task raises.
    run = run_dag(dag_id)
    assert run.state == "failed"
    captured = capfd.readouterr()
    text = captured.out + captured.err
    assert "\x1b" not in text
    assert "\x07" not in text
    assert "##kf-trainer-progress##" not in text
    assert "##kf-trainer-result##" not in text
    assert "hello [bold]markup[/x]" in text
    assert "cut at 4,032 of 100,000 characters" in text
    assert "A" * 4033 not in text
    assert "ValueError: boom  end" in text


def test_failure_before_submission_logs_no_missing_xcom(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """A task that fails before a job exists (here: a state directory that cannot be
    created) reports that failure only; the extra link's XCom is there, empty."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv(CONN_ENV, connection_json(backend="local", state_dir=str(blocker / "state")))
    run = run_dag("kf_train")
    assert run.state == "failed"
    text = capfd.readouterr().out
    assert "XCom not found" not in text
    assert run.xcom("train", "trainjob_url") == ""


def test_decorator_and_mapping(local: TrainerClient) -> None:
    run = run_dag("kf_decorated")
    assert run.state == "success"
    assert run.xcom("train") == {"double": 42, "mode": "test"}
    mapped = run_dag("kf_mapped")
    assert mapped.state == "success"
    assert mapped.xcom("total") == 14
