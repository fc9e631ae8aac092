"""API requests per job, for jobs of 10 s, 1 min and 10 min.

Long jobs are simulated by scaling time by ``s``: a job of duration ``D`` runs for
``D * s`` real seconds, and the SDK polls every ``2 s * s`` instead of every 2 s, so that
it makes as many polls as it would over the real duration. Requests are counted by the
test server: ``requests.count(job=name)`` (the TrainJob, its pods, their logs and
events, or a selector naming it) per job, and every request of the driver's process
during the measurement, divided by its jobs (this adds what is not about one job: our
informers' list and watch connections, which serve every job of the namespace, and the
SDK's runtime lookups on each poll).

(This module is not called ``requests``: the SDK driver runs with ``bench/`` beside it,
and a ``requests.py`` there would shadow the HTTP library.)
"""

from __future__ import annotations

import math
import time
from pathlib import Path

from bench.common import (
    JSON,
    BenchServer,
    DriverError,
    Settings,
    driver,
    sdk_python,
    sdk_unavailable_reason,
)

#: Simulated durations (seconds) and how they are labelled.
DURATIONS = [(10, "10 s"), (60, "1 min"), (600, "10 min")]
#: The SDK's default poll and what each poll costs it (see bench.driver_ours poll-async):
#: GET TrainJob, GET TrainingRuntime (404), GET ClusterTrainingRuntime, LIST pods.
SDK_POLL_SECONDS = 2.0
SDK_REQUESTS_PER_POLL = 4
SDK_JOB_REQUESTS_PER_POLL = 2  # of which about the job: the TrainJob and its pods


def sdk_unscaled(duration: float) -> JSON:
    """What the SDK does over a real ``duration`` at its 2 s poll: one create, then a poll
    every 2 s until the poll that sees the job complete."""
    polls = math.floor(duration / SDK_POLL_SECONDS) + 1
    return {
        "polls": polls,
        "per_job": 1 + SDK_JOB_REQUESTS_PER_POLL * polls,
        "all_per_job": 2 + SDK_REQUESTS_PER_POLL * polls,  # + runtime lookup before create
    }


def run(settings: Settings, srv: BenchServer, workdir: Path) -> JSON:
    """Measure ours and the SDK: one process per side, the durations in turn."""
    scale = 1 / 200 if settings.quick else 1 / 40
    per_duration = 1 if settings.quick else 3
    out: JSON = {
        "scale": scale,
        "jobs_per_duration": per_duration,
        "sdk_polling_interval": SDK_POLL_SECONDS * scale,
        "rows": [
            {
                "duration": d,
                "label": label,
                "real_seconds": d * scale,
                "sdk_unscaled": sdk_unscaled(d),
            }
            for d, label in DURATIONS
        ],
        "setup": {},
    }
    sdk_ok = sdk_python(settings) is not None
    if not sdk_ok:
        out["sdk_skipped"] = sdk_unavailable_reason()
    for side in ("ours", "sdk"):
        if side == "sdk" and not sdk_ok:
            continue
        settings.note(f"requests: {side}, jobs of " + ", ".join(lb for _, lb in DURATIONS))
        srv.reset()

        def job(key: str, duration: float, side: str = side) -> JSON:
            return {
                "key": key,
                "name": f"req-{side}-{key}",
                "duration": duration,
                "polling_interval": SDK_POLL_SECONDS * scale,
            }

        config = {
            "kubeconfig": str(srv.kubeconfig),
            "namespace": "default",
            "timeout": 600,
            "warmup": job("warmup", 0.05),
            "groups": [
                {"jobs": [job(f"{d}-{j}", d * scale) for j in range(per_duration)]}
                for d, _ in DURATIONS
            ],
        }
        launched = time.time()
        budget = sum(d * scale for d, _ in DURATIONS) + 240
        try:
            with driver(side, "requests", config, workdir, settings) as d:
                result = d.result(timeout=budget)
        except DriverError as exc:
            out[f"{side}_error"] = str(exc)
            continue
        setup = result["setup"]
        out["setup"][side] = {
            "requests": srv.count_in(launched, setup["end"]),
            "watches": srv.count_in(launched, setup["end"], verb="watch"),
            "lists": srv.count_in(launched, setup["end"], verb="list"),
        }
        for row, group in zip(out["rows"], result["groups"], strict=True):
            names = list(group["names"].values())
            per_job = [srv.requests.count(job=n) for n in names]
            polls = [srv.requests.count(job=n, verb="get", resource="trainjobs") for n in names]
            total = srv.count_in(group["start"], group["end"])
            jobs = max(len(names), 1)
            row[side] = {
                "per_job_mean": sum(per_job) / jobs if per_job else math.nan,
                "per_job_max": max(per_job) if per_job else math.nan,
                "polls_mean": sum(polls) / jobs if polls else math.nan,
                "all_per_job": total / jobs,
                "watches": srv.count_in(group["start"], group["end"], verb="watch"),
                "errors": len(group["errors"]),
                "error_sample": list(group["errors"].values())[:3],
            }
    total_jobs = per_duration * len(DURATIONS) + 1
    for setup in out["setup"].values():
        setup["amortised_per_job"] = setup["requests"] / total_jobs
    out["jobs_per_process"] = total_jobs
    return out
