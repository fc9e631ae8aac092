"""Helpers of the loop-blocking tests: run :mod:`loop_scenarios` in a fresh process and
read what its :class:`~kf_trainer_core.testing.loopwatch.LoopWatch` saw."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

SCENARIOS = Path(__file__).resolve().parent / "loop_scenarios.py"

#: A callback that keeps the process busy this long blocks every other wait of the loop.
THRESHOLD = 0.05


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
    settings_path.write_text(json.dumps({"threshold": THRESHOLD, **settings}))
    proc = subprocess.run(
        [sys.executable, str(SCENARIOS), mode, str(settings_path), str(result_path)],
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert proc.returncode == 0, (
        f"scenario {mode} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}"
    )
    result: dict[str, Any] = json.loads(result_path.read_text())
    return result


def blocking(result: dict[str, Any], only: str | None = None) -> list[dict[str, Any]]:
    """The slow callbacks (those whose sampled stacks pass through ``only``, when
    given: a path fragment such as ``/kf_trainer_``)."""
    slow = result["slow"]
    if only is None:
        return list(slow)
    return [s for s in slow if any(only in line for st in s["stacks"] for line in st)]
