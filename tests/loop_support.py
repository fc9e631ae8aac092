"""Helpers of the loop-blocking tests: run :mod:`loop_scenarios` in a fresh process and
read what its :class:`~kf_trainer_core.testing.loopwatch.LoopWatch` saw."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

SCENARIOS = Path(__file__).resolve().parent / "loop_scenarios.py"

#: A callback that keeps the process busy this long blocks every other wait of the loop.
THRESHOLD = 0.05

#: The frame of :class:`LoopWatch` that runs each callback: at the root of every sample.
WATCH_FRAME = "/testing/loopwatch.py"


def run_scenario(
    mode: str,
    settings: dict[str, Any],
    workdir: Path,
    *,
    env: dict[str, str] | None = None,
    timeout: float = 420,
) -> dict[str, Any]:
    """Run one scenario in a fresh interpreter and return its result (the waits'
    results, the loop's callbacks, the slow ones with their stacks)."""
    settings_path = workdir / f"{mode}-settings.json"
    result_path = workdir / f"{mode}-result.json"
    # Its stacks are dumped shortly before the limit: a hang says where it waits.
    dump_after = max(timeout - 20, timeout / 2)
    settings_path.write_text(
        json.dumps({"threshold": THRESHOLD, "dump_after": dump_after, **settings})
    )
    try:
        proc = subprocess.run(
            [sys.executable, str(SCENARIOS), mode, str(settings_path), str(result_path)],
            env={**os.environ, **(env or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as hung:
        stderr = hung.stderr.decode(errors="replace") if isinstance(hung.stderr, bytes) else ""
        stderr = stderr or str(hung.stderr or "")
        raise AssertionError(
            f"scenario {mode} did not end within {timeout:g}s; its stacks:\n{stderr[-12000:]}"
        ) from None
    assert proc.returncode == 0, (
        f"scenario {mode} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}"
    )
    result: dict[str, Any] = json.loads(result_path.read_text())
    if os.environ.get("KF_LOOP_REPORT"):  # keep the full report, for finding the cause
        Path(os.environ["KF_LOOP_REPORT"]).write_text(json.dumps(result["slow"], indent=1))
    return result


def once_more_if_slow(run: Callable[[int], dict[str, Any]]) -> dict[str, Any]:
    """Run a scenario (``run(0)``); if a callback blocked, run it once more (``run(1)``)
    and return that run, with the first one's report kept. A path that blocks the loop
    (an import, a synchronous read) blocks it in every run; a callback that a busy
    machine stretched once (page faults, another process's I/O on shared cores) seldom
    does twice, and a check that fails on noise teaches people to ignore it."""
    first = run(0)
    if not blocking(first):
        return first
    second = run(1)
    second["report"] = f"{second['report']}\n(first run:)\n{first['report']}"
    return second


def blocking(result: dict[str, Any], only: str | None = None) -> list[dict[str, Any]]:
    """The slow callbacks (those whose sampled stacks pass through ``only``, when
    given: a path fragment such as ``/kf_trainer_``; the watch's own frame, in every
    stack, does not count)."""
    slow = result["slow"]
    if only is None:
        return list(slow)
    return [
        s
        for s in slow
        if any(only in line and WATCH_FRAME not in line for st in s["stacks"] for line in st)
    ]


def pending_jobs(store: Any, count: int, prefix: str) -> list[str]:
    """``count`` suspended TrainJobs of the suite, stored directly (no HTTP, no
    controller work): waits on them stay pending until :func:`finish_jobs`."""
    from kf_trainer_core.k8s.resources import TRAINJOBS
    from kf_trainer_core.testing.population import finished_trainjob

    names = [f"{prefix}-{i}" for i in range(count)]
    for name in names:
        obj = finished_trainjob(name, program_bytes=256, suite=True)
        obj.pop("status")
        obj["spec"]["suspend"] = True
        store.create(TRAINJOBS, obj, namespace="default")
    return names


def finish_jobs(store: Any, names: list[str], per_second: float = 200.0) -> None:
    """Mark the jobs complete, paced (the informer's events arrive as a cluster's
    would, not in one burst)."""
    import time

    from kf_trainer_core.k8s.resources import TRAINJOBS
    from kf_trainer_core.testing.population import finished_trainjob

    status = finished_trainjob("x")["status"]
    for i, name in enumerate(names):
        store.patch(TRAINJOBS, "default", name, {"status": status}, subresource="status")
        if i % 20 == 19:
            time.sleep(20 / per_second)


def run_with_completions(
    mode: str,
    settings: dict[str, Any],
    workdir: Path,
    store: Any,
    names: list[str],
    *,
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """:func:`run_scenario` in the background; once the scenario says its waits are
    pending, the jobs are completed."""
    import threading
    import time

    ready = workdir / f"{mode}.ready"
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["result"] = run_scenario(mode, {**settings, "ready": str(ready)}, workdir, env=env)
        except BaseException as exc:  # reported by the caller
            out["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    deadline = time.monotonic() + 300
    while not ready.exists() and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.2)
    if ready.exists():
        time.sleep(settings.get("finish_after", 0.0))
        finish_jobs(store, names)
    thread.join()
    if "error" in out:
        raise out["error"]
    result: dict[str, Any] = out["result"]
    return result
