"""Airflow for real: API server, scheduler (LocalExecutor), DAG processor and triggerer as
separate processes, against the Kubernetes-API test server in this process.

Deferral crosses processes (worker → triggerer → worker), a kill while deferred runs the
trigger's ``on_kill`` in the triggerer, a kill while running runs the operator's
``on_kill`` in the worker, a worker that dies after submitting is retried onto the
same job, deferred tasks whose jobs end within seconds of the deferral all succeed,
without retries (Airflow 3.3's stale defer-exit race, held off by ``resume_grace``), and
a deferred task's log reaches its trigger log while it is deferred, not again at resume.
The time from a kill to the job's deletion is printed, never asserted. Run it alone with
``pytest -m airflow_live``; every process it starts is stopped (by process group) before
it returns.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from dagtest import DAGS
from kf_live_dag import GRACE
from kf_live_dag import SHORT_DURATIONS as SHORT

from kf_trainer_core.k8s.resources import TRAINJOBS
from kf_trainer_core.manifest.builder import IDENTITY_ANNOTATION
from kf_trainer_core.testing.server import KubeTestServer

pytestmark = [
    pytest.mark.airflow_live,
    pytest.mark.slow,
    pytest.mark.timeout(600),
    pytest.mark.usefixtures("airflow_db", "kf_conn"),
]

DAG_ID = "kf_live"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Airflow:
    """The Airflow processes of one test, each in its own process group."""

    def __init__(self, home: Path) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.logs = home / "live"
        self.logs.mkdir(exist_ok=True)
        self.procs: list[tuple[str, subprocess.Popen[bytes]]] = []
        self.milestones: list[tuple[str, float]] = [("start", time.monotonic())]
        self.env = {
            **os.environ,
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            # LocalExecutor starts this many workers up front.
            "AIRFLOW__CORE__PARALLELISM": "3",
            # The API server (one worker, SQLite) answers slowly on 2 busy cores: a task
            # whose calls time out 5 times in a row is killed.
            "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "60",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.url}/execution/",
            "AIRFLOW__API__BASE_URL": self.url,
            "AIRFLOW__API__PORT": str(self.port),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
            # A queued task's token lives this long: a dozen tasks on 2 cores queue for minutes.
            "AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT": "900",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC": "1",
            # The triggerer does not put the DAG folder on sys.path.
            "PYTHONPATH": os.pathsep.join([str(DAGS), os.environ.get("PYTHONPATH", "")]),
        }
        self.airflow = str(Path(sys.executable).parent / "airflow")

    def start(self, name: str, *args: str) -> None:
        out = open(self.logs / f"{name}.log", "wb")  # noqa: SIM115 - closed in stop()
        proc = subprocess.Popen(
            [self.airflow, *args],
            env=self.env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        out.close()
        self.procs.append((name, proc))

    def stop(self) -> None:
        """Workers first, the API server last (tasks report to it until they end)."""
        for _name, proc in sorted(self.procs, key=lambda p: p[0] == "api-server"):
            self._end(proc, signal.SIGTERM, 20)
        for _, proc in self.procs:
            self._end(proc, signal.SIGKILL, 5)

    @staticmethod
    def _end(proc: subprocess.Popen[bytes], sig: int, wait: float) -> None:
        try:
            os.killpg(proc.pid, sig)  # the process group we created: its children too
        except ProcessLookupError:
            return
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(wait)

    def tail(self) -> str:
        text = []
        for path in sorted(self.logs.glob("*.log")):
            lines = path.read_text(errors="replace").splitlines()[-25:]
            text.append(f"==> {path.name}\n" + "\n".join(lines))
        return "\n".join(text)


@pytest.fixture
def airflow(airflow_db: Path) -> Iterator[Airflow]:
    af = Airflow(airflow_db)
    try:
        af.start("api-server", "api-server", "--port", str(af.port), "--workers", "1")
        af.start("scheduler", "scheduler", "--skip-serve-logs")
        af.start("dag-processor", "dag-processor")
        af.start("triggerer", "triggerer", "--skip-serve-logs")
        yield af
    finally:
        af.stop()


def eventually(
    what: str, check: Callable[[], Any], timeout: float, af: Airflow, every: float = 0.5
) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = check()
        except httpx.HTTPError:
            value = None
        if value:
            af.milestones.append((what, time.monotonic()))
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}\n{af.tail()}")
        time.sleep(every)


def job_of(kube: KubeTestServer, run_id: str, task_id: str) -> list[dict[str, Any]]:
    items, _ = kube.store.list(TRAINJOBS, "default")
    prefix = f"{DAG_ID}/{task_id}/{run_id}/"
    return [
        o
        for o in items
        if o["metadata"]["annotations"].get(IDENTITY_ANNOTATION, "").startswith(prefix)
    ]


def running(job: dict[str, Any]) -> bool:
    return any((j.get("ready") or 0) > 0 for j in (job.get("status") or {}).get("jobsStatus") or [])


def gone(kube: KubeTestServer, name: str) -> bool:
    obj = kube.store.try_get(TRAINJOBS, "default", name)
    return obj is None or bool(obj["metadata"].get("deletionTimestamp"))


def test_deferral_kill_and_crash_across_processes(
    airflow: Airflow, kube: KubeTestServer, airflow_db: Path
) -> None:
    airflow_home = airflow_db
    started = time.monotonic()
    api = httpx.Client(base_url=f"{airflow.url}/api/v2", timeout=10)
    eventually(
        "the API server", lambda: api.get("/monitor/health").status_code == 200, 180, airflow
    )
    eventually(
        "the DAG to be parsed", lambda: api.get(f"/dags/{DAG_ID}").status_code == 200, 180, airflow
    )
    assert api.patch(f"/dags/{DAG_ID}", json={"is_paused": False}).status_code == 200
    created = api.post(f"/dags/{DAG_ID}/dagRuns", json={"logical_date": None})
    assert created.status_code == 200, created.text
    run_id = created.json()["dag_run_id"]
    tis_url = f"/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances"

    def all_tis() -> list[dict[str, Any]]:
        return list(api.get(tis_url, params={"limit": 100}).json()["task_instances"])

    def states() -> dict[str, str | None]:
        return {t["task_id"]: t["state"] for t in all_tis() if t["map_index"] < 0}

    def short_tis() -> list[dict[str, Any]]:
        return [t for t in all_tis() if t["task_id"] == "short" and t["map_index"] >= 0]

    def in_state(task_id: str, state: str) -> bool:
        jobs = job_of(kube, run_id, task_id)
        return states().get(task_id) == state and len(jobs) == 1 and running(jobs[0])

    # Killing a task whose trigger has not started yet reaches no on_kill at all: wait
    # until the triggerer runs it (its progress line is in the task's trigger log).
    logs = airflow_home / "logs" / f"dag_id={DAG_ID}" / f"run_id={run_id}"

    def watching() -> bool:
        found = (logs / "task_id=kill_deferred").glob("*.trigger.*.log")
        return any(": Running" in p.read_text() for p in found)

    eventually(
        "kill_deferred to be deferred", lambda: in_state("kill_deferred", "deferred"), 180, airflow
    )
    eventually("the trigger to watch kill_deferred's job", watching, 120, airflow)
    eventually("kill_running to run", lambda: in_state("kill_running", "running"), 180, airflow)
    # The short jobs end 0-6 s after their tasks defer: with no retries, every one of them
    # must succeed (a task failed by the stale defer-exit race ends "failed").
    done = ("success", "failed", "upstream_failed")
    short = eventually(
        "the short deferred tasks",
        lambda: (
            (tis := short_tis())
            and len(tis) == len(SHORT)
            and all(t["state"] in done for t in tis)
            and tis
        ),
        300,
        airflow,
    )
    deferred_job = job_of(kube, run_id, "kill_deferred")[0]["metadata"]["name"]
    running_job = job_of(kube, run_id, "kill_running")[0]["metadata"]["name"]
    killed_at: dict[str, float] = {}
    for task_id in ("kill_deferred", "kill_running"):
        # SQLite serialises writers: a busy database answers 500 now and then.
        eventually(
            f"{task_id} marked failed",
            lambda t=task_id: api.patch(f"{tis_url}/{t}", json={"new_state": "failed"}).is_success,
            30,
            airflow,
        )
        killed_at[task_id] = time.monotonic()
    eventually("the trigger's on_kill", lambda: gone(kube, deferred_job), 60, airflow, every=0.05)
    kill_to_delete = time.monotonic() - killed_at["kill_deferred"]
    eventually("the operator's on_kill", lambda: gone(kube, running_job), 60, airflow)

    finished = eventually(
        "the other tasks",
        lambda: (s := states())["deferred"] == "success" and s["crash"] == "success" and s,
        180,
        airflow,
    )
    assert finished["kill_deferred"] == "failed"
    assert finished["kill_running"] == "failed"
    result = api.get(f"{tis_url}/deferred/xcomEntries/result").json()
    assert result["value"] == {"double": 8}
    # The step's log went into the task's log from the triggerer while the task was
    # deferred (its trigger log), and was not printed again when it resumed.
    deferred_logs = list((logs / "task_id=deferred").glob("*.log"))
    trigger_text = "".join(p.read_text() for p in deferred_logs if ".trigger." in p.name)
    task_text = "".join(p.read_text() for p in deferred_logs if ".trigger." not in p.name)
    assert "[node-0] doubling 4" in trigger_text, airflow.tail()
    assert "[node-0] doubling 4" not in task_text, task_text
    crash = api.get(f"{tis_url}/crash").json()
    assert crash["try_number"] == 2
    assert len(job_of(kube, run_id, "crash")) == 1  # the retry found the first try's job
    failed_short = [(t["map_index"], t["state"]) for t in short if t["state"] != "success"]
    held = sum(
        "(resume_grace)" in p.read_text() for p in (logs / "task_id=short").rglob("*.trigger.*.log")
    )
    # Timings are reported, never asserted.
    t0 = airflow.milestones[0][1]
    steps = ", ".join(f"{what} +{when - t0:.1f}s" for what, when in airflow.milestones[1:])
    print(f"live Airflow run: {time.monotonic() - started:.1f}s ({steps})")
    print(
        f"short deferred jobs: {len(short)} run, {len(failed_short)} failed "
        f"(resume_grace={GRACE}s held {held} events); "
        f"kill of a deferred task to its job's deletion: {kill_to_delete:.1f}s"
    )
    assert not failed_short, f"short deferred tasks failed: {failed_short}\n{airflow.tail()}"
    assert all(t["try_number"] == 1 for t in short)  # no retries were needed (or configured)
