"""DAG tests: real Airflow 3 (``dag.test()`` on SQLite: tasks run in this process, a
deferred task's trigger runs inline) against the Kubernetes-API test server and its
simulated Trainer, over real HTTP."""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from dagtest import run_dag

from kf_trainer_core.k8s.resources import TRAINJOBS
from kf_trainer_core.manifest.builder import (
    ATTEMPT_ANNOTATION,
    IDENTITY_ANNOTATION,
    SPEC_HASH_ANNOTATION,
)
from kf_trainer_core.testing.server import KubeTestServer

pytestmark = pytest.mark.usefixtures("airflow_db", "kf_conn")


def jobs(kube: KubeTestServer) -> list[dict[str, Any]]:
    """Every TrainJob on the server, oldest first (timestamps have whole seconds: the
    attempt number orders the attempts of one task)."""
    items, _ = kube.store.list(TRAINJOBS, "default")

    def order(obj: dict[str, Any]) -> tuple[str, int]:
        meta = obj["metadata"]
        return meta["creationTimestamp"], int(meta["annotations"].get(ATTEMPT_ANNOTATION, 0))

    return sorted(items, key=order)


def state(job: dict[str, Any]) -> str:
    for cond in job.get("status", {}).get("conditions", []):
        if cond["type"] in ("Complete", "Failed") and cond["status"] == "True":
            return str(cond["type"])
    return "Active"


def test_train_in_worker(kube: KubeTestServer, capfd: pytest.CaptureFixture[str]) -> None:
    run = run_dag("kf_train")
    assert run.state == "success"
    out = run.xcom("train")
    assert out["status"] == "Complete"
    assert out["result"] == {"double": 42}
    assert run.xcom("train", "result") == {"double": 42}
    assert run.xcom("train", "job_name") == out["name"]
    assert run.xcom("train", "namespace") == "default"
    assert run.xcom("train", "status") == "Complete"
    assert [s["name"] for s in run.xcom("train", "steps")] == ["node-0"]
    (job,) = jobs(kube)
    assert job["metadata"]["name"] == out["name"]
    ident = job["metadata"]["annotations"][IDENTITY_ANNOTATION]
    assert ident == f"kf_train/train/{run.run_id}/-1"
    # The step's log streamed into the task log.
    assert "[node-0] doubling 21" in capfd.readouterr().out


def test_train_deferred(kube: KubeTestServer) -> None:
    run = run_dag("kf_train_deferred")
    assert run.state == "success"
    out = run.xcom("train")
    assert out["result"] == {"double": 42}
    assert run.xcom("train", "trainjob_url") == f"https://kubeflow.example/default/{out['name']}"
    assert len(jobs(kube)) == 1


def test_failure_reports_reason_step_pod_and_log(
    kube: KubeTestServer, capfd: pytest.CaptureFixture[str]
) -> None:
    run = run_dag("kf_train", {"scenario": "fail"})
    assert run.state == "failed"
    assert run.state_of("train") == "failed"
    text = capfd.readouterr().out
    (job,) = jobs(kube)
    name = job["metadata"]["name"]
    assert f"TrainJob default/{name} failed" in text
    assert "failing step node-0 (pod " in text
    assert "exit code 1" in text
    # The log is in the task log once (streamed); the error points at it instead of
    # repeating its tail, and no chained traceback says it all again.
    assert "[node-0] " in text
    assert "(its log and events are above)" in text
    assert " log lines:" not in text
    assert "During handling of the above exception" not in text
    assert state(job) == "Failed"  # on_finish_action="keep": kept for inspection


def test_failure_when_deferred(kube: KubeTestServer, capfd: pytest.CaptureFixture[str]) -> None:
    run = run_dag("kf_train_deferred", {"scenario": "oom"})
    assert run.state == "failed"
    text = capfd.readouterr().out
    assert "OOMKilled" in text
    assert "exit code 137" in text


def test_retry_after_failure_submits_a_fresh_job(kube: KubeTestServer) -> None:
    run = run_dag("kf_retry_after_failure")
    assert run.state == "success"
    assert run.try_number("train") == 2
    first, second = jobs(kube)
    assert state(first) == "Failed"
    assert state(second) == "Complete"
    assert first["metadata"]["name"] != second["metadata"]["name"]
    # Both attempts carry the task's identity: a later retry finds them together.
    idents = {j["metadata"]["annotations"][IDENTITY_ANNOTATION] for j in (first, second)}
    assert len(idents) == 1
    assert run.xcom("train", "job_name") == second["metadata"]["name"]


@pytest.mark.parametrize("dag_id", ["kf_retry_after_crash", "kf_retry_after_crash_not_durable"])
def test_retry_after_crash_reattaches(
    kube: KubeTestServer, dag_id: str, capfd: pytest.CaptureFixture[str]
) -> None:
    run = run_dag(dag_id)
    assert run.state == "success"
    assert run.try_number("train") == 2
    (job,) = jobs(kube)  # the retry waited for the job its crashed try started
    assert state(job) == "Complete"
    assert kube.requests.count(verb="create", resource="trainjobs", status=201) == 1
    assert run.xcom("train", "job_name") == job["metadata"]["name"]
    text = capfd.readouterr().out
    if dag_id.endswith("not_durable"):
        assert "started by an earlier try of this task" in text  # found by identity
    else:
        assert "Reconnecting to existing job" in text  # found in the task state store


def test_templates_render_arguments_not_the_function(kube: KubeTestServer) -> None:
    run = run_dag("kf_templated", {"word": "rendered", "scenario": "exec"})
    assert run.state == "success"
    # The function's {{ }} and {# #} reached the pod untouched; func_args were rendered.
    assert run.xcom("train", "result") == "{{ rendered }} {# not a comment #}"
    (job,) = jobs(kube)
    assert SPEC_HASH_ANNOTATION in job["metadata"]["annotations"]


def test_sensors_on_steps(kube: KubeTestServer) -> None:
    run = run_dag("kf_steps")
    assert run.state == "success", {k: t.state for k, t in run.tis().items()}
    assert run.reschedules("dataset_ready") >= 1  # it gave its worker slot back meanwhile
    dataset = run.xcom("dataset_ready")
    assert dataset["name"] == "dataset-initializer"
    assert dataset["status"] == "Succeeded"
    node = run.xcom("training_started")
    assert node["name"] == "node-0"
    assert node["status"] in ("Running", "Succeeded")
    assert run.xcom("job_done")["status"] == "Complete"
    (job,) = jobs(kube)
    assert state(job) == "Complete"


def test_decorator_passes_xcoms_in_and_out(kube: KubeTestServer) -> None:
    run = run_dag("kf_decorated")
    assert run.state == "success"
    assert run.xcom("train") == {"double": 42, "mode": "test"}
    assert run.xcom("report") == 42
    (job,) = jobs(kube)
    assert job["spec"]["trainer"]["numNodes"] == 1


def test_mapped_tasks_run_one_job_each(kube: KubeTestServer) -> None:
    run = run_dag("kf_mapped")
    assert run.state == "success"
    assert [run.xcom("square", map_index=i) for i in range(3)] == [1, 4, 9]
    assert run.xcom("total") == 14
    assert [run.xcom("grid", "result", map_index=i) for i in range(2)] == [
        {"double": 2},
        {"double": 10},
    ]
    idents = [j["metadata"]["annotations"][IDENTITY_ANNOTATION] for j in jobs(kube)]
    assert len(idents) == len(set(idents)) == 5  # one job per mapped task instance
    assert sorted(i.split("/")[1] + i.rsplit("/", 1)[1] for i in idents) == [
        "grid0",
        "grid1",
        "square0",
        "square1",
        "square2",
    ]


def test_dag_file_paths_are_in_the_dag_folder() -> None:
    from dagtest import DAGS, load_dag

    assert Path(load_dag("kf_train").fileloc).parent == DAGS


def chatty_lines(n: int) -> list[str]:
    return [f"[node-0] chatty line {i}" for i in range(n)]


def rows_of(text: str, line: str) -> list[str]:
    """The task-log rows that say ``line`` (``chatty line 1`` is not ``... 10``)."""
    return [row for row in text.splitlines() if re.search(re.escape(line) + r"(?!\d)", row)]


def logged_at(row: str) -> datetime:
    return datetime.fromisoformat(row.split(" ", 1)[0].replace("Z", "+00:00"))


def test_a_deferred_task_streams_the_log_while_deferred(
    kube: KubeTestServer, capfd: pytest.CaptureFixture[str]
) -> None:
    run = run_dag("kf_deferred_log")
    assert run.state == "success"
    assert run.xcom("train")["result"] == {"n": 12}
    text = capfd.readouterr().out
    resumed = text.index(" is Complete after")  # the operator, once the task resumed
    rows = []
    for line in chatty_lines(12):
        # Once, written by the trigger while the task was deferred; not again at resume.
        (row,) = rows_of(text, line)
        assert "TrainJobTrigger" in row, row
        assert text.index(line) < resumed
        rows.append(row)
    # As it was written (a line a second), not all at once when the job ended.
    assert (logged_at(rows[-1]) - logged_at(rows[0])).total_seconds() >= 3, rows
    assert "log lines of TrainJob" not in text  # no tail printed at the resume
    # Cleaned and capped like every log line the suite shows.
    assert chr(27) not in text
    (long,) = [row for row in text.splitlines() if "cleared BBBB" in row]
    assert "[kf-trainer: cut at" in long
    assert len(long) < 4500


def test_a_deferred_task_can_print_the_tail_at_the_end_instead(
    kube: KubeTestServer, capfd: pytest.CaptureFixture[str]
) -> None:
    run = run_dag("kf_deferred_log_tail")
    assert run.state == "success"
    text = capfd.readouterr().out
    tail = text.index("log lines of TrainJob")
    for line in chatty_lines(3):
        assert len(rows_of(text, line)) == 1, text
        assert text.index(line) > tail  # printed by the task when it resumed
    assert "Following the log of" not in text
