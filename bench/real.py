"""The real control plane beside the test server (issue 23 item 6, issue 27 section 2).

On kube-apiserver 1.36 + etcd from ``../shared/control-plane`` (API only: statuses
are written through the ``/status`` subresource by this orchestrator process, as the
Trainer controller writes them, never by the process under test):

* requests per submit: a fresh orchestrator identity, and a rerun of one;
* submit throughput at 1, 10 and 100 concurrent submitters, ours (explicit names,
  and a fresh identity per job) beside the Kubeflow SDK (:mod:`bench.submit`);
* scale of waiting: 1,000 and 10,000 concurrent ``AsyncTrainerClient.wait()`` calls
  in one process, completions written at 200 a second: notice latency (from the
  status write's answer to the wait's return), RSS growth while waiting, connections.

The rows are skipped, with the reason, where the package is absent and in ``--quick``
(a cold start costs ~15 s and ~500 MiB). The control plane is always stopped.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from bench import submit
from bench.api_requests import SDK_POLL_SECONDS, SDK_REQUESTS_PER_POLL
from bench.common import (
    JSON,
    DriverError,
    Settings,
    cpu_seconds,
    driver,
    process_probe,
    summary,
)
from bench.realcp import NAMESPACE, RealControlPlane, unavailable_reason
from bench.realwait import _settle

#: Completions a second in the scale rows (the issue's figure).
RATE = 200.0


def _counts(settings: Settings) -> list[int]:
    given = os.environ.get("KF_BENCH_REAL_COUNTS")
    return [int(n) for n in given.split(",")] if given else [1000, 10000]


def run(settings: Settings, workdir: Path) -> JSON:
    reason = unavailable_reason()
    if reason is None and settings.quick:
        reason = "not in --quick: a real control plane costs ~15 s to start and ~500 MiB"
    if reason is not None:
        settings.note(f"real: skipped ({reason})")
        return {"skipped": reason}
    out: JSON = {"rate": RATE}
    cp = RealControlPlane(workdir, controllers=False)
    settings.note("real: starting the control plane (API only)")
    with cp:
        out["start_seconds"] = cp.started_in
        out["submit_requests"] = submit_requests(cp)
        settings.note("real: submit throughput")
        # Nothing is deleted between measurements (a collection delete of thousands of
        # jobs outlasts the apiserver's request timeout on this machine): every side,
        # round and row has names of its own, and the control plane goes at the end.
        out["submit"] = submit.measure(
            settings, workdir, str(cp.kubeconfig), lambda: None, jobs=100, rounds=1
        )
        rows = []
        for n in _counts(settings):
            settings.note(f"real: {n} concurrent waits, completions at {RATE:g}/s")
            rows.append(scale_row(cp, settings, workdir, n))
        out["scale"] = rows
        out["apiserver_rss_mb"] = cp.apiserver_rss_mb()
    return out


def submit_requests(cp: RealControlPlane) -> JSON:
    """Requests our sync client makes for a fresh identity's submit and for a rerun."""
    from kf_trainer_core.client import TrainerClient
    from kf_trainer_core.config import KubernetesConfig
    from kf_trainer_core.spec import CustomTrainer, TrainJobSpec

    calls: list[Any] = []
    spec = TrainJobSpec(trainer=CustomTrainer(_noop))
    config = KubernetesConfig(kubeconfig=str(cp.kubeconfig), namespace=NAMESPACE)
    fresh, rerun = [], []
    with TrainerClient(config, request_hook=calls.append) as client:
        client.submit(spec, identity=("bench", "real", "warm-up"))  # runtime lookup
        for i in range(10):
            ident = ("bench", "real", f"fresh-{i}")
            calls.clear()
            client.submit(spec, identity=ident)
            fresh.append(len(calls))
            calls.clear()
            client.submit(spec, identity=ident)
            rerun.append(len(calls))
    return {"fresh": max(fresh), "rerun": max(rerun), "target_fresh": 1}


def _noop() -> int:
    return 1


def scale_row(cp: RealControlPlane, settings: Settings, workdir: Path, n: int) -> JSON:
    from kf_trainer_core.manifest.builder import build_trainjob
    from kf_trainer_core.spec import CustomTrainer, Name, TrainJobSpec

    built = build_trainjob(
        TrainJobSpec(trainer=CustomTrainer(_noop), options=[Name("scale")]), namespace=NAMESPACE
    )
    names = [f"scale-{n}-{i}" for i in range(n)]
    t0 = time.monotonic()
    cp.create_jobs(names, built.manifest)
    created_in = time.monotonic() - t0
    config: JSON = {
        "kubeconfig": str(cp.kubeconfig),
        "namespace": NAMESPACE,
        "names": names,
        "timeout": 900,
    }
    row: JSON = {"jobs": n, "create_seconds": created_in}
    try:
        with driver("ours", "wait-async", config, workdir, settings) as d:
            d.wait_ready(timeout=600)
            proc = process_probe(d.pid)
            # The waits' first looks and the informer's list: not what waiting costs.
            # Until the process has done them (its CPU quiet), not a fixed pause: on a
            # loaded machine 10,000 first looks outlast any guess, and completions
            # written meanwhile measured the start-up instead (a p95 of 35 s beside a
            # p50 of 0.16 s).
            settle_start = time.monotonic()
            time.sleep(3.0)
            _settle(proc, limit=300.0)
            settled_in = time.monotonic() - settle_start
            rss_waiting = int(proc.memory_info().rss)
            port = str(cp.port_base)
            connections = sum(
                1
                for c in proc.net_connections(kind="tcp")
                if c.raddr and str(c.raddr.port) == port and c.status == "ESTABLISHED"
            )
            load = os.getloadavg()[0]
            cpu_before = cpu_seconds(proc)
            done = cp.complete_paced(names, RATE)
            result = d.result(timeout=900)
            # The waiting process's CPU from the first completion to its last wait's
            # return (it reports its own: it exits right after its result).
            cpu_used = float(result.get("cpu_after") or cpu_before) - cpu_before
    except DriverError as exc:
        return {**row, "error": str(exc)}
    values = [result["returned"][k] - done[k] for k in result["returned"] if k in done]
    rss_before = int(result.get("rss_before") or 0)
    row.update(
        {
            "latency": summary(values),
            # The rate the writer reached (it may fall short of RATE on a busy machine).
            "completion_seconds": max(done.values()) - min(done.values()) if done else None,
            "rss_before_mb": rss_before / 2**20,
            "rss_waiting_mb": rss_waiting / 2**20,
            "rss_growth_mb": (rss_waiting - rss_before) / 2**20 if rss_before else None,
            "rss_after_mb": int(result.get("rss_after") or 0) / 2**20,
            "connections": connections,
            "errors": len(result["errors"]),
            "error_sample": list(result["errors"].values())[:3],
            "load_average": load,
            "settle_seconds": settled_in,
            "waiter_cpu_ms_per_completion": 1000 * cpu_used / n,
            "sdk_rate_estimate": n * SDK_REQUESTS_PER_POLL / SDK_POLL_SECONDS,
        }
    )
    return row
