"""One real Airflow 3 triggerer holding many deferred TrainJob tasks at once.

``python -m bench.triggerer [--tasks 200] [--arms ours,poll] [--json PATH]``

Airflow's api-server, scheduler (LocalExecutor), dag-processor and triggerer run as
separate processes; the jobs run on the Kubernetes-API test server in this process.
Every job runs until this process releases it, so all ``--tasks`` tasks are deferred
in one triggerer at once before any job ends; then ``--kills`` deferred tasks are
marked failed through Airflow's REST API (timed until their TrainJob's delete reaches
the server), and the other jobs are released over ``--release-over`` seconds.

Each arm gets a fresh triggerer: ``ours`` (``TrainJobOperator(deferrable=True)``) and
``poll``, the baseline (:mod:`bench.triggerer_poll`, written like
``KubernetesJobOperator``'s trigger). Measured per arm: Airflow's "async thread was
blocked" warnings and "appears deadlocked" lines in the triggerer's log, the slow
callbacks asyncio's debug mode names (``--asyncio-debug``), the triggerer's RSS (all
its processes) and CPU, API requests to the server, each job's end (its ``Complete``
condition committed) to its task's ``end_date``, kill to delete, and the scheduler's
delay in processing each deferring worker's exit (its "TaskInstance Finished ...
state=deferred" line against the trigger's creation) next to ``resume_grace``.
Nothing here asserts a time; ``tests/airflow/test_triggerer_load.py`` asserts counts.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.common import REPO, BenchServer, percentile
from bench.triggerer_watch import collect, write_sitecustomize

JSON = dict[str, Any]
NAMESPACE = "default"
CONN_ID = "kf_bench"
DAG_IDS = {"ours": "kf_bench_ours", "poll": "kf_bench_poll"}
#: The DAG file Airflow reads: the DAGs live in bench/triggerer_dags.py (this file
#: only has to mention "airflow" and "DAG" for the processor to read it).
DAG_FILE = (
    "# airflow DAG file\nfrom bench.triggerer_dags import kf_bench_ours, kf_bench_poll  # noqa\n"
)

BLOCKED = re.compile(r"async thread was blocked for ([0-9.]+) seconds")
DEADLOCKED = re.compile(r"appears deadlocked[^\n]*?for ([0-9.]+)s")
#: asyncio's debug mode: "Executing <Task ... coro=<...>> took 0.215 seconds".
SLOW_CALLBACK = re.compile(r"Executing (.*?) took ([0-9.]+) seconds")
FINISHED = re.compile(r"TaskInstance Finished: ([^\n]*)")
STAMP = re.compile(r"(\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:\.\d+)?)")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _iso(text: str | None) -> float | None:
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


@dataclass
class Options:
    """One run's parameters."""

    tasks: int = 200
    arms: tuple[str, ...] = ("ours", "poll")
    kills: int = 3
    release_over: float = 20.0
    grace: float = 10.0
    poll_interval: float = 10.0
    parallelism: int = 4
    asyncio_debug: bool = False
    block: float = 0.0
    timeout: float = 1500.0
    workdir: Path | None = None
    notes: list[str] = field(default_factory=list)

    def note(self, text: str) -> None:
        line = f"[triggerer-bench {time.strftime('%H:%M:%S')}] {text}"
        self.notes.append(line)
        print(line, file=sys.stderr, flush=True)


class Processes:
    """Airflow's processes, each in a process group of its own."""

    def __init__(self, home: Path, kubeconfig: Path, opts: Options) -> None:
        self.home = home
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.logs = home / "proc-logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        dags = home / "dags"
        dags.mkdir(exist_ok=True)
        (dags / "kf_bench_dags.py").write_text(DAG_FILE)
        conn = {"conn_type": "kubeflow_trainer", "extra": {"kubeconfig_path": str(kubeconfig)}}
        self.env = {
            **os.environ,
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
            "AIRFLOW__CORE__FERNET_KEY": "",
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(32),
            "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(home / "logs"),
            "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "120",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": str(opts.parallelism),
            "AIRFLOW__CORE__DEFAULT_POOL_TASK_SLOT_COUNT": str(opts.tasks + 64),
            "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "60",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.url}/execution/",
            "AIRFLOW__API__BASE_URL": self.url,
            "AIRFLOW__API__PORT": str(self.port),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
            "AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT": "3600",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "30",
            "AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC": "1",
            f"AIRFLOW_CONN_{CONN_ID.upper()}": json.dumps(conn),
            "KF_BENCH_TASKS": str(opts.tasks),
            "KF_BENCH_GRACE": str(opts.grace),
            "KF_BENCH_BLOCK": str(opts.block),
            "KF_BENCH_KUBECONFIG": str(kubeconfig),
            "KF_BENCH_POLL": str(opts.poll_interval),
            "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        }
        self.env.pop("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", None)
        self.airflow = str(Path(sys.executable).parent / "airflow")
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def migrate(self) -> None:
        subprocess.run(
            [self.airflow, "db", "migrate"],
            env=self.env,
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )

    def start(self, name: str, *args: str, env: dict[str, str] | None = None) -> None:
        with open(self.logs / f"{name}.log", "wb") as out:
            self.procs[name] = subprocess.Popen(
                [self.airflow, *args],
                env={**self.env, **(env or {})},
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def stop(self, name: str) -> None:
        proc = self.procs.pop(name, None)
        if proc is None:
            return
        for sig, wait in ((signal.SIGTERM, 20.0), (signal.SIGKILL, 5.0)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(wait)
                return

    def stop_all(self) -> None:
        """Workers first, the API server last (tasks report to it until they end)."""
        for name in sorted(self.procs, key=lambda n: n == "api-server"):
            self.stop(name)

    def log(self, name: str) -> str:
        path = self.logs / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""


def _group(pgid: int) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            if int(fields[2]) == pgid:  # fields: state ppid pgrp ...
                pids.append(int(entry))
    return pids


def group_usage(pgid: int, each: dict[int, float] | None = None) -> tuple[float, float]:
    """(RSS MiB, CPU seconds) summed over the live processes of a process group;
    ``each`` gets each process's peak RSS."""
    rss = cpu = 0.0
    tick = os.sysconf("SC_CLK_TCK")
    page = os.sysconf("SC_PAGE_SIZE")
    for pid in _group(pgid):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            statm = Path(f"/proc/{pid}/statm").read_text().split()
        except OSError:
            continue
        cpu += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
        mine = int(statm[1]) * page / 2**20
        rss += mine
        if each is not None:
            each[pid] = max(each.get(pid, 0.0), mine)
    return rss, cpu


class Sampler(threading.Thread):
    """The triggerer's RSS and CPU, once a second."""

    def __init__(self, pgid: int) -> None:
        super().__init__(daemon=True)
        self.pgid = pgid
        self.samples: list[tuple[float, float, float]] = []
        self.peaks: dict[int, float] = {}
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            rss, cpu = group_usage(self.pgid, self.peaks)
            self.samples.append((time.time(), rss, cpu))
            self.done.wait(1.0)

    def at(self, when: float) -> tuple[float, float]:
        before = [s for s in self.samples if s[0] <= when] or self.samples[:1]
        return before[-1][1], before[-1][2]


class Jobs:
    """Every job waits for its release (or its deletion) in a test-bed executor."""

    def __init__(self, bench: BenchServer) -> None:
        from kf_trainer_core.testing.scenarios import PodResult, Scenario

        self.bench = bench
        self.release: dict[str, threading.Event] = {}
        self.lock = threading.Lock()

        def hold(ctx: Any) -> Any:
            event = self.event(ctx.trainjob)
            while not (event.wait(0.5) or ctx.cancelled.is_set()):
                pass
            return PodResult(0, termination_message='{"ok": 1}')

        controller = bench.server.controller
        # One blocked executor thread per running job: the test bed's default pool (32)
        # would queue the rest.
        controller._cx.runner._pool = ThreadPoolExecutor(1024, "kf-bench-hold")
        controller.default_scenario = Scenario(executor=hold)

    def event(self, name: str) -> threading.Event:
        with self.lock:
            return self.release.setdefault(name, threading.Event())

    def by_index(self, dag_id: str) -> dict[int, str]:
        from kf_trainer_core.k8s.resources import TRAINJOBS
        from kf_trainer_core.manifest.builder import IDENTITY_ANNOTATION

        items, _ = self.bench.server.store.list(TRAINJOBS, NAMESPACE)
        out = {}
        for obj in items:
            ident = obj["metadata"].get("annotations", {}).get(IDENTITY_ANNOTATION, "")
            if ident.startswith(f"{dag_id}/"):
                out[int(ident.rsplit("/", 1)[1])] = obj["metadata"]["name"]
        return out

    def gone(self, name: str) -> bool:
        from kf_trainer_core.k8s.resources import TRAINJOBS

        obj = self.bench.server.store.try_get(TRAINJOBS, NAMESPACE, name)
        return obj is None or bool(obj["metadata"].get("deletionTimestamp"))


def _wait(what: str, check: Callable[[], Any], timeout: float, every: float = 1.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(Exception):
            value = check()
            if value:
                return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(every)


def _stats(values: list[float]) -> JSON:
    if not values:
        return {"n": 0}
    return {
        "n": len(values),
        "p50": round(percentile(values, 50), 2),
        "p95": round(percentile(values, 95), 2),
        "max": round(max(values), 2),
    }


def parse_triggerer_log(text: str) -> JSON:
    """Airflow's blocked-loop warnings, deadlock lines and asyncio's slow callbacks."""
    blocked = [float(m) for m in BLOCKED.findall(text)]
    slow = [(d.strip()[:300], float(s)) for d, s in SLOW_CALLBACK.findall(text)]
    return {
        "blocked_warnings": len(blocked),
        "blocked_over_0_2s": sum(b > 0.2 for b in blocked),
        "blocked_worst_s": max(blocked, default=0.0),
        "deadlocked": [float(m) for m in DEADLOCKED.findall(text)]
        or (["?"] if "appears deadlocked" in text else []),
        "slow_callbacks": len(slow),
        "slow_callbacks_over_0_2s": [c for c in slow if c[1] > 0.2],
        # A trigger's own code runs in the task Airflow makes per trigger (run_trigger);
        # TriggerRunner.arun() creates triggers (imports their module, decodes kwargs).
        "trigger_callbacks_over_0_2s": [c for c in slow if c[1] > 0.2 and "run_trigger" in c[0]],
        "runner_callbacks_over_0_2s": [c[1] for c in slow if c[1] > 0.2 and ".arun()" in c[0]],
    }


def _finished_lines(text: str, dag_id: str) -> dict[int, tuple[float, str]]:
    """When the scheduler processed each deferring worker's exit, by map index: the first
    "TaskInstance Finished" line of a task (the second is the resumed try's), and the
    state the task had then (not ``deferred``: processed after the trigger fired)."""
    out: dict[int, tuple[float, str]] = {}
    for line in text.splitlines():
        if FINISHED.search(line) is None or f"dag_id={dag_id}," not in line:
            continue
        idx = re.search(r"map_index=(-?\d+)", line)
        state = re.search(r" state=(\w+)", line)
        stamp = STAMP.search(line)
        when = _iso(stamp.group(1)) if stamp else None
        if idx and when is not None:
            out.setdefault(int(idx.group(1)), (when, state.group(1) if state else "?"))
    return out


def run_arm(arm: str, procs: Processes, jobs: Jobs, opts: Options) -> JSON:
    import httpx

    dag_id = DAG_IDS[arm]
    api = httpx.Client(base_url=f"{procs.url}/api/v2", timeout=60)
    trig_env = {"PYTHONASYNCIODEBUG": "1"} if opts.asyncio_debug else {}
    watch_dir = procs.home / f"loopwatch-{arm}"
    watch_dir.mkdir()
    site = write_sitecustomize(procs.home / "site")
    trig_env["KF_LOOPWATCH_DIR"] = str(watch_dir)
    trig_env["PYTHONPATH"] = os.pathsep.join([str(site.parent), procs.env["PYTHONPATH"]])
    name = f"triggerer-{arm}"
    procs.start(name, "triggerer", "--skip-serve-logs", env=trig_env)
    pgid = procs.procs[name].pid
    sampler = Sampler(pgid)
    sampler.start()
    # The triggerer's own start-up is outside the measured growth: its runner logs its
    # first "N triggers currently running" once it is up (a minute on 2 busy cores).
    _wait("the triggerer up", lambda: "triggers currently running" in procs.log(name), 600)
    time.sleep(5)
    rss0, cpu0 = group_usage(pgid)
    jobs.bench.server.requests.clear()
    _wait(f"{dag_id} parsed", lambda: api.get(f"/dags/{dag_id}").status_code == 200, 300)
    api.patch(f"/dags/{dag_id}", json={"is_paused": False})
    created = api.post(f"/dags/{dag_id}/dagRuns", json={"logical_date": None})
    created.raise_for_status()
    run_id = created.json()["dag_run_id"]
    t_run = time.time()
    tis_url = f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances"
    opts.note(f"{arm}: run {run_id} created; waiting for {opts.tasks} deferred tasks")

    def tis() -> list[JSON]:
        got = api.get(tis_url, params={"limit": opts.tasks + 10})
        got.raise_for_status()
        return [t for t in got.json()["task_instances"] if t["map_index"] >= 0]

    def count(state: str) -> int:
        return sum(t["state"] == state for t in tis())

    last = [0]

    def all_deferred() -> list[JSON] | None:
        now = tis()
        n = sum(
            t["state"] == "deferred" and bool((t.get("trigger") or {}).get("triggerer_id"))
            for t in now
        )
        if n != last[0]:
            last[0] = n
            opts.note(f"{arm}: {n} deferred (and claimed by the triggerer)")
        return now if n == opts.tasks else None

    deferred = _wait("every task deferred", all_deferred, opts.timeout, every=3.0)
    t_deferred = time.time()
    created_at = {
        t["map_index"]: _iso((t.get("trigger") or {}).get("created_date")) for t in deferred
    }
    time.sleep(5)  # the last triggers start running
    names = jobs.by_index(dag_id)
    kills: list[float] = []
    killed = list(range(opts.kills)) if arm == "ours" else []
    for idx in killed:
        t0 = time.monotonic()
        _wait(
            "the kill",
            lambda i=idx: (
                api.patch(  # type: ignore[misc]
                    f"{tis_url}/wait/{i}", json={"new_state": "failed"}
                ).is_success
            ),
            60,
            every=0.2,
        )
        _wait("the delete", lambda i=idx: jobs.gone(names[i]), 120, every=0.02)  # type: ignore[misc]
        kills.append(round(time.monotonic() - t0, 2))
    opts.note(f"{arm}: kill to delete {kills}; releasing {opts.tasks - len(killed)} jobs")
    rest = [i for i in sorted(names) if i not in killed]
    for n, idx in enumerate(rest):
        jobs.event(names[idx]).set()
        time.sleep(opts.release_over / max(1, len(rest)))
        if n % 50 == 49:
            opts.note(f"{arm}: released {n + 1}")
    done = ("success", "failed", "upstream_failed")
    final = _wait(
        "every task finished",
        lambda: (now := tis()) and all(t["state"] in done for t in now) and now,
        opts.timeout,
        every=3.0,
    )
    t_end = time.time()
    sampler.done.set()
    sampler.join()
    rss_end, cpu_end = group_usage(pgid)
    rss_peak = max(s[1] for s in sampler.samples)
    log = procs.log(name)
    procs.stop(name)
    completed = jobs.bench.clock.completed
    end_to_success = []
    end_to_scheduled = []
    for t in final:
        job = names.get(t["map_index"])
        end = _iso(t.get("end_date"))
        if t["state"] == "success" and job in completed and end is not None:
            end_to_success.append(end - completed[job])
            # The trigger's event moves the task to scheduled: the triggerer's share.
            resumed = _iso(t.get("scheduled_when"))
            if resumed is not None:
                end_to_scheduled.append(resumed - completed[job])
    finished_at = _finished_lines(procs.log("scheduler"), dag_id)
    exit_delay = [
        finished_at[i][0] - c for i, c in created_at.items() if c is not None and i in finished_at
    ]
    late_exits = sum(finished_at[i][1] != "deferred" for i in created_at if i in finished_at)
    reqs = [r for r in jobs.bench.server.requests.records if r.time >= t_run]
    by_verb: dict[str, int] = {}
    for r in reqs:
        key = f"{r.verb} {r.resource}" + (f"/{r.subresource}" if r.subresource else "")
        by_verb[key] = by_verb.get(key, 0) + 1
    states: dict[str, int] = {}
    for t in final:
        states[t["state"]] = states.get(t["state"], 0) + 1
    result = {
        "arm": arm,
        "tasks": opts.tasks,
        "states": states,
        "retried": sum(t["try_number"] > 1 for t in final),
        "killed": len(killed),
        "killed_deleted": sum(jobs.gone(names[i]) for i in killed),
        "kill_to_delete_s": kills,
        "end_to_success_s": _stats(end_to_success),
        "end_to_resumed_s": _stats(end_to_scheduled),
        "scheduler_defer_exit_delay_s": _stats(exit_delay),
        "defer_exits_processed_after_the_task_left_deferred": late_exits,
        "resume_grace_s": opts.grace if arm == "ours" else None,
        "poll_interval_s": opts.poll_interval if arm == "poll" else None,
        "time_to_all_deferred_s": round(t_deferred - t_run, 1),
        "run_s": round(t_end - t_run, 1),
        "triggerer_rss_mib": {
            "idle": round(rss0, 1),
            "peak": round(rss_peak, 1),
            "end": round(rss_end, 1),
            "growth_peak": round(rss_peak - rss0, 1),
            # The supervisor (the group leader) and the forked trigger runner.
            "peak_by_process": {
                ("supervisor" if pid == pgid else str(pid)): round(v, 1)
                for pid, v in sampler.peaks.items()
            },
        },
        "triggerer_cpu_s": round(cpu_end - cpu0, 2),
        "triggerer_cpu_s_while_all_deferred": round(
            sampler.at(t_end)[1] - sampler.at(t_deferred)[1], 2
        ),
        "requests": len(reqs),
        "requests_by_verb": dict(sorted(by_verb.items(), key=lambda kv: -kv[1])),
        "log": parse_triggerer_log(log),
        "loopwatch": collect(watch_dir),
    }
    opts.note(f"{arm}: {json.dumps(result)}")
    return result


@contextlib.contextmanager
def airflow_and_server(opts: Options) -> Iterator[tuple[Processes, Jobs]]:
    """The test server (jobs held until released) and Airflow minus the triggerer."""
    home = Path(tempfile.mkdtemp(prefix="kf-trig-bench-", dir=opts.workdir))
    bench = BenchServer(home)
    procs: Processes | None = None
    try:
        with bench:
            jobs = Jobs(bench)
            procs = Processes(home, bench.kubeconfig, opts)
            opts.note(f"home {home}; migrating the database")
            procs.migrate()
            procs.start("api-server", "api-server", "--port", str(procs.port), "--workers", "1")
            procs.start("scheduler", "scheduler", "--skip-serve-logs")
            procs.start("dag-processor", "dag-processor")
            yield procs, jobs
    finally:
        if procs is not None:
            procs.stop_all()
            for job in list(jobs.release.values()):
                job.set()
        if not os.environ.get("KF_BENCH_KEEP_HOME"):
            shutil.rmtree(home, ignore_errors=True)


def run(opts: Options) -> JSON:
    """Every arm, in one Airflow, one after the other (each with a fresh triggerer)."""
    started = time.time()
    load_before = os.getloadavg()
    arms = {}
    with airflow_and_server(opts) as (procs, jobs):
        for arm in opts.arms:
            arms[arm] = run_arm(arm, procs, jobs, opts)
    result: JSON = {
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
        "cpus": os.cpu_count(),
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in os.getloadavg()],
        "options": {k: v for k, v in vars(opts).items() if k not in ("notes", "workdir")},
        "arms": arms,
        "wall_s": round(time.time() - started, 1),
    }
    if "ours" in arms and "poll" in arms:
        o, p = arms["ours"], arms["poll"]

        def ratio(a: float, b: float) -> float | None:
            return round(a / b, 3) if b else None

        result["ratios_ours_over_poll"] = {
            "requests": ratio(o["requests"], p["requests"]),
            "triggerer_cpu_s": ratio(o["triggerer_cpu_s"], p["triggerer_cpu_s"]),
            "rss_growth": ratio(
                o["triggerer_rss_mib"]["growth_peak"], p["triggerer_rss_mib"]["growth_peak"]
            ),
            "end_to_success_p50": ratio(
                o["end_to_success_s"].get("p50", 0), p["end_to_success_s"].get("p50", 0)
            ),
            "end_to_success_p95": ratio(
                o["end_to_success_s"].get("p95", 0), p["end_to_success_s"].get("p95", 0)
            ),
        }
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.triggerer", description=__doc__)
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--arms", default="ours,poll")
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--release-over", type=float, default=20.0)
    parser.add_argument("--grace", type=float, default=10.0)
    parser.add_argument("--poll-interval", type=float, default=10.0)
    parser.add_argument("--parallelism", type=int, default=4)
    parser.add_argument("--asyncio-debug", action="store_true")
    parser.add_argument("--block", type=float, default=0.0, help="a blocking trigger (check)")
    parser.add_argument("--timeout", type=float, default=1500.0)
    parser.add_argument("--json", type=Path, default=REPO / "bench" / "triggerer.json")
    parser.add_argument(
        "--record",
        action="store_true",
        help="also put the result in bench/results.json and render BENCHMARKS.md again",
    )
    parser.add_argument("--note", default="", help="a sentence for the report's section")
    args = parser.parse_args(argv)
    opts = Options(
        tasks=args.tasks,
        arms=tuple(a for a in args.arms.split(",") if a),
        kills=args.kills,
        release_over=args.release_over,
        grace=args.grace,
        poll_interval=args.poll_interval,
        parallelism=args.parallelism,
        asyncio_debug=args.asyncio_debug,
        block=args.block,
        timeout=args.timeout,
    )
    started = time.time()
    result = run(opts)
    result["ran_at"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started))
    result["seconds"] = round(time.time() - started)
    result["command"] = "python -m bench.triggerer " + " ".join(argv or sys.argv[1:])
    if args.note:
        result["note"] = args.note
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    if args.record:
        record(result)
    return 0


def record(result: JSON, out: Path = REPO) -> None:
    """Put ``result`` in ``bench/results.json`` as section ``triggerer`` and write its
    section of ``BENCHMARKS.md`` in place (the file has hand-written parts that a full
    render would drop; ``python -m bench`` renders this section from the JSON too)."""
    from bench.report import table
    from bench.triggerer_report import TITLE, section_triggerer

    path = out / "bench" / "results.json"
    results = json.loads(path.read_text())
    results.setdefault("sections", {})["triggerer"] = result
    # As python -m bench writes it (a small diff).
    path.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    text, targets = section_triggerer(result, out)
    stamp = f"_Measured {result['ran_at']} in {result['seconds']} s with `{result['command']}`._"
    goals = table(["goal (issue 25)", "measured", "verdict"], targets) if targets else ""
    block = f"## {TITLE}\n\n{stamp}\n\n{text}\n{goals}\n"
    md = out / "BENCHMARKS.md"
    current = md.read_text()
    head = f"## {TITLE}\n"
    if head in current:
        start = current.index(head)
        nxt = current.find("\n## ", start + len(head))
        current = current[:start] + block + (current[nxt + 1 :] if nxt >= 0 else "")
    else:
        current = current.rstrip() + "\n\n" + block
    md.write_text(current.rstrip() + "\n")


if __name__ == "__main__":
    sys.exit(main())
