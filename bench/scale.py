"""Scale of waiting: 10, 100 and 1,000 concurrent waits in one process (the Airflow
triggerer case, where every deferred task of a deployment waits in one event loop).

For each count, jobs are created suspended; the waiting process starts its waits; once
they are all pending we read, from the outside, the watch connections open on the
server, the process's RSS, its CPU time over an idle window and the requests it made
in that window; then the jobs are resumed and the completion latency is taken as in
:mod:`bench.latency`.

Completions are paced to what the test server can serve. The server and its simulated
controller are one Python process, spending ~10 ms of CPU per job (resume, JobSet, Jobs,
pods, events, status); 1,000 completions over 5 s would need two cores' worth of it, so
the notice latency would measure the server's backlog, not the waiting client. The
first completion therefore comes after the resume burst has been absorbed
(:func:`pacing`), and the completions arrive at most 50 a second; both sides' CPU over
the completions is reported next to the latency.

Sides: ours (``AsyncTrainerClient.wait``, a task per job), the SDK-style alternative
in the same event loop (a ``kubernetes_asyncio`` task per job making the SDK's four
requests every 2 s) and, in the full run, the Kubeflow SDK itself (a thread and a
client per job). The alternatives run at 10 and 100 jobs only; at 1,000 their request
rate is computed (1,000 jobs x 4 requests / 2 s), not imposed on a shared machine.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from bench.api_requests import SDK_POLL_SECONDS, SDK_REQUESTS_PER_POLL
from bench.common import (
    JSON,
    BenchServer,
    DriverError,
    Follower,
    Settings,
    cpu_seconds,
    driver,
    latencies,
    process_probe,
    sdk_python,
    sdk_unavailable_reason,
    summary,
)

#: (key, driver side, mode, label, largest job count it runs at)
SIDES = [
    ("ours", "ours", "wait-async", "ours: AsyncTrainerClient.wait, a task per job", 1000),
    (
        "poll",
        "poll",
        "poll-async",
        "SDK-style: a kubernetes_asyncio task per job, the SDK's 4 requests / 2 s",
        100,
    ),
    ("sdk", "sdk", "wait", "Kubeflow SDK: a thread + client per job, 2 s poll", 100),
]


def run(settings: Settings, srv: BenchServer, workdir: Path) -> JSON:
    """Measure each side at each job count."""
    counts = settings.scale_counts or ([20] if settings.quick else [10, 100, 1000])
    window = 2.0 if settings.quick else 10.0
    sides = SIDES if not settings.quick else SIDES[:2]
    out: JSON = {"counts": counts, "idle_window_seconds": window, "rows": []}
    sdk_ok = sdk_python(settings) is not None
    if not sdk_ok:
        out["sdk_skipped"] = sdk_unavailable_reason()
    for n in counts:
        row: JSON = {"jobs": n}
        for key, side, mode, label, limit in sides:
            if n > limit or (side == "sdk" and not sdk_ok):
                continue
            settings.note(f"scale: {label}, {n} jobs")
            row[key] = measure(srv, workdir, settings, key, side, mode, n, window)
            row[key]["label"] = label
        row["sdk_rate_estimate"] = n * SDK_REQUESTS_PER_POLL / SDK_POLL_SECONDS
        out["rows"].append(row)
    # Memory per additional wait: the slope between the two largest counts a side ran
    # at (the first wait also pays for the client's connections, the informers...).
    marginal: JSON = {}
    for key, *_ in SIDES:
        points = [
            (r["jobs"], r[key]["rss_mb"])
            for r in out["rows"]
            if isinstance(r.get(key), dict) and "rss_mb" in r[key]
        ]
        if len(points) >= 2:
            (n1, m1), (n2, m2) = points[-2], points[-1]
            marginal[key] = {"from": n1, "to": n2, "kb_per_wait": (m2 - m1) * 1024 / (n2 - n1)}
    out["marginal_memory"] = marginal
    return out


def pacing(n: int, quick: bool) -> tuple[float, float]:
    """When the first of ``n`` resumed jobs completes and over how many seconds the rest
    follow: after the server has started them all (~20 ms each on a loaded machine), and
    at most 50 completions a second (5 s at the least, as before for small counts)."""
    if quick:
        return 1.0, 2.0
    return 1.0 + n / 50, max(5.0, n / 50)


def measure(
    srv: BenchServer,
    workdir: Path,
    settings: Settings,
    key: str,
    side: str,
    mode: str,
    n: int,
    window: float,
) -> JSON:
    srv.reset()
    names = [f"scale-{key}-{n}-{i}" for i in range(n)]
    first, spread = pacing(n, settings.quick)
    srv.create_suspended(names, [first + spread * i / n for i in range(n)])
    config = {
        "kubeconfig": str(srv.kubeconfig),
        "namespace": "default",
        "names": names,
        "timeout": 600,
        "polling_interval": SDK_POLL_SECONDS,
    }
    try:
        with driver(side, mode, config, workdir, settings) as d:
            d.wait_ready(timeout=300)
            # Let start-up work (first looks, the informers' initial list) finish: the
            # window should see only what waiting costs.
            time.sleep((1.0 if settings.quick else 2.0) + n / 1000)
            proc = process_probe(d.pid)
            rss = int(proc.memory_info().rss)
            threads = int(proc.num_threads())
            watches = srv.server.open_watches
            cpu0 = cpu_seconds(proc)
            t0 = time.time()
            time.sleep(window)
            t1 = time.time()
            cpu1 = cpu_seconds(proc)
            requests = srv.count_in(t0, t1)
            # CPU over the completions, both sides (the server is this process): what
            # a wall-clock latency on a shared machine cannot show.
            follower = Follower(proc, cpu_seconds)
            here = process_probe(os.getpid())
            client0, server0 = follower.value, cpu_seconds(here)
            load = os.getloadavg()[0]
            srv.resume(names)
            result = d.result(timeout=first + spread + 300)
            server_cpu = cpu_seconds(here) - server0
            client_cpu = follower.stop() - client0
    except DriverError as exc:
        return {"error": str(exc)}
    values = latencies(result["returned"], srv.clock.completed)
    rss_before = int(result.get("rss_before") or 0)
    return {
        "open_watches": watches,
        "rss_mb": rss / 2**20,
        "rss_before_mb": rss_before / 2**20,
        "rss_growth_mb": (rss - rss_before) / 2**20 if rss_before else None,
        "threads": threads,
        "idle_cpu_seconds": cpu1 - cpu0,
        "idle_cpu_percent": 100 * (cpu1 - cpu0) / (t1 - t0),
        "idle_requests_per_second": requests / (t1 - t0),
        "latency": summary(values),
        "first_completion_seconds": first,
        "spread_seconds": spread,
        "completion_cpu_seconds": {"client": client_cpu, "server": server_cpu},
        "load_average": load,
        "errors": len(result["errors"]),
        "error_sample": list(result["errors"].values())[:3],
    }
