"""Submit throughput: TrainJobs created per second at 1, 10 and 100 concurrent
submitters — our sync client (threads), our async client (tasks) and the Kubeflow
SDK's ``train()`` (threads, a client each).

Each submit builds the manifest and creates it (ours: explicit names, or a fresh
orchestrator identity per job — one request since the create-first submit; the runtime
looked up once per client before the clock starts; the SDK: its runtime object passed
in, so it also skips the lookup). The simulated controller runs the created jobs
meanwhile, as a cluster would.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from bench.common import (
    JSON,
    BenchServer,
    DriverError,
    Settings,
    driver,
    median,
    ratio,
    sdk_python,
    sdk_unavailable_reason,
)

SIDES = [
    ("ours_sync", "ours", "submit-sync", "ours: TrainerClient.submit (threads)"),
    (
        "ours_identity",
        "ours",
        "submit-sync",
        "ours: TrainerClient.submit with an identity (threads)",
    ),
    ("ours_async", "ours", "submit-async", "ours: AsyncTrainerClient.submit (tasks)"),
    ("sdk", "sdk", "submit", "Kubeflow SDK: train() (threads, a client each)"),
]


def run(settings: Settings, srv: BenchServer, workdir: Path) -> JSON:
    """Measure every side at every concurrency on the test server (see :func:`measure`)."""
    return measure(settings, workdir, str(srv.kubeconfig), srv.reset)


def measure(
    settings: Settings,
    workdir: Path,
    kubeconfig: str,
    reset: Callable[[], None],
    *,
    jobs: int | None = None,
    rounds: int | None = None,
) -> JSON:
    """Measure every side at every concurrency, in rounds that alternate the sides (so
    that a burst of load from elsewhere on the machine does not hit one side only);
    the median round per concurrency is reported. ``reset`` empties the server
    between sides."""
    levels = [1, 10] if settings.quick else [1, 10, 100]
    jobs = jobs or (20 if settings.quick else 200)
    rounds = rounds or (1 if settings.quick else 3)
    out: JSON = {"levels": levels, "jobs_per_level": jobs, "rounds": rounds, "sides": {}}
    samples: dict[str, dict[int, list[JSON]]] = {}
    for r in range(rounds):
        for key, side, mode, label in SIDES:
            if side == "sdk" and sdk_python(settings) is None:
                out["sides"][key] = {"label": label, "skipped": sdk_unavailable_reason()}
                continue
            if "error" in out["sides"].get(key, {}):
                continue
            settings.note(f"submit: {label}, round {r + 1}/{rounds}")
            reset()
            prefix = f"sub-{key.replace('_', '-')}-{r}"
            config = {
                "kubeconfig": kubeconfig,
                "namespace": "default",
                "warmup_name": f"{prefix}-warmup",
                "identity": key == "ours_identity",
                "levels": [
                    {"concurrency": c, "names": [f"{prefix}-{c}-{i}" for i in range(jobs)]}
                    for c in levels
                ],
            }
            try:
                with driver(side, mode, config, workdir, settings) as d:
                    result = d.result(timeout=600)
            except DriverError as exc:
                out["sides"][key] = {"label": label, "error": str(exc)}
                continue
            for level in result["levels"]:
                created = level["jobs"] - level["error_count"]
                level["jobs_per_second"] = created / level["seconds"]
                samples.setdefault(key, {}).setdefault(level["concurrency"], []).append(level)
            out["sides"][key] = {"label": label}
    for key, by_level in samples.items():
        if "error" in out["sides"][key]:
            continue
        rows = []
        for c in levels:
            runs = by_level.get(c) or []
            rates = [x["jobs_per_second"] for x in runs]
            rows.append(
                {
                    "concurrency": c,
                    "jobs_per_second": median(rates),
                    "rounds": [round(x, 1) for x in rates],
                    "error_count": sum(x["error_count"] for x in runs),
                    "errors": [e for x in runs for e in x["errors"]][:3],
                }
            )
        out["sides"][key]["levels"] = rows
    # Ratios per concurrency: async over sync, and each of ours over the SDK.
    ratios: dict[str, dict[str, float | None]] = {}
    for i, c in enumerate(levels):

        def rate(key: str, i: int = i) -> float | None:
            side = out["sides"].get(key, {})
            rows = side.get("levels") or []
            return rows[i]["jobs_per_second"] if i < len(rows) else None

        sync, async_, sdk = rate("ours_sync"), rate("ours_async"), rate("sdk")
        ident = rate("ours_identity")
        ratios[str(c)] = {
            "async_over_sync": ratio(async_, sync),
            "sync_over_sdk": ratio(sync, sdk),
            "async_over_sdk": ratio(async_, sdk),
            "identity_over_sdk": ratio(ident, sdk),
        }
    out["ratios"] = ratios
    return out
