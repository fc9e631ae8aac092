"""Namespace size: what one waiting process pays for the TrainJobs already in its
namespace.

Kubeflow Trainer keeps every finished TrainJob, each embedding its program, so real
namespaces hold thousands. For each population — 0, 1,000 and 10,000 finished
"foreign" TrainJobs of ~20 KiB (made by others: no label of this suite) and, apart,
10,000 finished jobs this suite created — a fresh process waits for a few suspended
jobs of its own, which are then resumed; we take, side by side for our sync client, our
async client and the Kubeflow SDK:

* RSS growth: the peak of the process's RSS (sampled from outside every 50 ms) over its
  RSS before the waits started (after one API call, so that imports and connections
  are not counted);
* bytes received: the response bodies the server sent it;
* requests the process sent;
* notice latency p50/p95, from Complete on the server to ``wait`` returning.

The namespace is filled straight into the test server's store
(:func:`kf_trainer_core.testing.population.populate`): the client sees the same
objects as if they had been created over HTTP, in seconds rather than minutes.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from bench.common import (
    JSON,
    NAMESPACE,
    BenchServer,
    DriverError,
    Follower,
    Settings,
    driver,
    latencies,
    process_probe,
    sdk_python,
    sdk_unavailable_reason,
    summary,
)

#: (key, driver side, mode, label)
SIDES = [
    ("sync", "ours", "wait-sync", "ours: TrainerClient.wait (sync)"),
    ("async", "ours", "wait-async", "ours: AsyncTrainerClient.wait"),
    ("sdk", "sdk", "wait", "Kubeflow SDK: wait_for_job_status (2 s poll)"),
]

#: Size of each populated job's program: the issue's "~20 KiB each".
PROGRAM_BYTES = 20 * 1024


def populations(quick: bool) -> list[tuple[str, int]]:
    """(whose jobs, how many) in the order measured."""
    if quick:
        return [("foreign", 300), ("suite", 300)]
    return [("foreign", 0), ("foreign", 1000), ("foreign", 10000), ("suite", 10000)]


def run(settings: Settings, srv: BenchServer, workdir: Path) -> JSON:
    """Measure every side at every population."""
    from kf_trainer_core.testing.population import populate

    waits = 3 if settings.quick else 8
    out: JSON = {"waits_per_process": waits, "program_bytes": PROGRAM_BYTES, "rows": []}
    sdk_ok = sdk_python(settings) is not None and not settings.quick
    if not sdk_ok:
        out["sdk_skipped"] = sdk_unavailable_reason() or "quick mode"
    for whose, n in populations(settings.quick):
        srv.reset()
        t0 = time.monotonic()
        populate(
            srv.server.store,
            NAMESPACE,
            n,
            prefix=f"{whose}-done",
            program_bytes=PROGRAM_BYTES,
            suite=whose == "suite",
        )
        row: JSON = {"whose": whose, "jobs": n, "seed_seconds": round(time.monotonic() - t0, 1)}
        for key, side, mode, label in SIDES:
            if (side == "sdk" and not sdk_ok) or (settings.quick and key == "sync"):
                continue
            settings.note(f"namespace: {label}, {n} {whose} jobs")
            row[key] = measure(srv, workdir, settings, f"{key}-{whose}-{n}", side, mode, waits)
            row[key]["label"] = label
        out["rows"].append(row)
    return out


def _settled(srv: BenchServer, since: float, side: str, deadline: float) -> None:
    """Until the process has done its start-up work: for ours, the informer's list is
    over once its watch is open; the SDK only polls by name."""
    if side == "sdk":
        time.sleep(2.0)
        return
    while time.time() < deadline:
        if any(
            r.verb == "watch" and r.resource == "trainjobs" and r.time >= since
            for r in srv.requests.records
        ):
            break
        time.sleep(0.2)
    time.sleep(0.5)


def measure(
    srv: BenchServer, workdir: Path, settings: Settings, key: str, side: str, mode: str, n: int
) -> JSON:
    names = [f"ns-{key}-{i}" for i in range(n)]
    srv.clock.clear()
    srv.create_suspended(names, [1.0 + 2.0 * i / n for i in range(n)])
    config = {
        "kubeconfig": str(srv.kubeconfig),
        "namespace": NAMESPACE,
        "names": names,
        "timeout": 600,
        "polling_interval": 2,
    }
    start = time.time()
    sent = srv.server.bytes_sent
    try:
        with driver(side, mode, config, workdir, settings) as d:
            d.wait_ready(timeout=600)
            # READY comes after the driver took its "before" RSS: sample from here on.
            sampler = Follower(process_probe(d.pid), lambda p: p.memory_info().rss, max)
            _settled(srv, start, side, time.time() + 300)
            srv.resume(names)
            result: dict[str, Any] = d.result(timeout=600)
            peak = int(sampler.stop())
    except DriverError as exc:
        return {"error": str(exc)}
    end = time.time()
    time.sleep(0.5)  # the process has ended: its streams' last bytes are counted
    rss_before = int(result.get("rss_before") or 0)
    return {
        "rss_before_mb": rss_before / 2**20,
        "rss_growth_mb": max(0, peak - rss_before) / 2**20 if rss_before and peak else None,
        "rss_end_growth_mb": (int(result.get("rss_after") or 0) - rss_before) / 2**20
        if rss_before
        else None,
        "received_mb": (srv.server.bytes_sent - sent) / 2**20,
        "requests": srv.count_in(start, end),
        "latency": summary(latencies(result["returned"], srv.clock.completed)),
        "errors": len(result["errors"]),
        "error_sample": list(result["errors"].values())[:3],
    }
