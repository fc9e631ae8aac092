"""Completion latency: from the moment the test server commits a TrainJob's ``Complete``
condition to the moment ``wait`` returns in the waiting process.

The jobs are created suspended and resumed together once every wait is in place, each
with its own running time, so that completions are spread over a window rather than
arriving at once. The clock starts in the server process (a ``store.subscribe``
callback, ``time.time()``) and stops in the driver process (``time.time()`` right after
``wait`` returns): same machine, same clock.
"""

from __future__ import annotations

import time
from pathlib import Path

from bench.common import (
    JSON,
    BenchServer,
    DriverError,
    Settings,
    driver,
    latencies,
    percentile,
    ratio,
    sdk_python,
    sdk_unavailable_reason,
    summary,
)

#: (result key, driver side, driver mode, what it is)
SIDES = [
    ("ours_sync", "ours", "wait-sync", "ours: TrainerClient.wait, a thread per job"),
    ("ours_async", "ours", "wait-async", "ours: AsyncTrainerClient.wait, a task per job"),
    ("sdk", "sdk", "wait", "Kubeflow SDK: wait_for_job_status (2 s poll), a thread per job"),
]


def run(settings: Settings, srv: BenchServer, workdir: Path) -> JSON:
    """Measure every side; returns the section's results."""
    # Jobs go in waves, each a fresh waiting process: 200 SDK threads at once would make
    # 400 requests/s, which saturates the (Python) test server and would inflate the
    # SDK's latency with queueing that a real apiserver would not add.
    waves, per_wave = (1, 20) if settings.quick else (4, 50)
    spread = 2.0 if settings.quick else 5.0  # seconds over which a wave's completions arrive
    first = 0.5 if settings.quick else 1.0  # the first completion, after the resume
    out: JSON = {
        "jobs": waves * per_wave,
        "waves": waves,
        "per_wave": per_wave,
        "spread_seconds": spread,
        "clock": srv.clock_source,
        "sides": {},
    }
    for key, side, mode, label in SIDES:
        if side == "sdk" and sdk_python(settings) is None:
            out["sides"][key] = {"label": label, "skipped": sdk_unavailable_reason()}
            continue
        settings.note(f"latency: {label}, {waves} x {per_wave} jobs")
        values: list[float] = []
        errors: list[str] = []
        load: list[JSON] = []
        try:
            for wave in range(waves):
                srv.reset()
                names = [f"lat-{key.replace('_', '-')}-{wave}-{i}" for i in range(per_wave)]
                srv.create_suspended(
                    names, [first + spread * i / per_wave for i in range(per_wave)]
                )
                config = {
                    "kubeconfig": str(srv.kubeconfig),
                    "namespace": "default",
                    "names": names,
                    "timeout": 600,
                    "polling_interval": 2,
                }
                with driver(side, mode, config, workdir, settings) as d:
                    d.wait_ready(timeout=180)
                    time.sleep(0.5 if settings.quick else 1.0)  # every wait has looked once
                    resumed = srv.resume(names)
                    result = d.result(timeout=spread + 120)
                load.append(server_load(srv, resumed, time.time()))
                values += latencies(result["returned"], srv.clock.completed)
                errors += list(result["errors"].values())
        except DriverError as exc:
            out["sides"][key] = {"label": label, "error": str(exc)}
            continue
        out["sides"][key] = {
            "label": label,
            **summary(values),
            "errors": len(errors),
            "error_sample": errors[:3],
            "latencies": sorted(values),
            "server_requests_per_second": max(x["requests_per_second"] for x in load),
            "server_p95_request_ms": max(x["p95_request_ms"] for x in load),
        }
    sides = out["sides"]
    sdk_p95 = sides.get("sdk", {}).get("p95")
    for key in ("ours_sync", "ours_async"):
        ours = sides.get(key, {})
        ours["ratio_p95"] = ratio(sdk_p95, ours.get("p95"))
        ours["ratio_p50"] = ratio(sides.get("sdk", {}).get("p50"), ours.get("p50"))
    return out


def server_load(srv: BenchServer, since: float, until: float) -> JSON:
    """How busy the server was while the jobs ran: request rate and the p95 time to
    answer (streams: to their start), so that a reader can tell the baseline's polls
    were not slowed by a saturated server."""
    records = [r for r in srv.requests.records if since <= r.time <= until and r.verb != "watch"]
    span = max(until - since, 1e-9)
    return {
        "requests_per_second": len(records) / span,
        "p95_request_ms": percentile([r.duration * 1000 for r in records], 95) if records else 0.0,
    }
