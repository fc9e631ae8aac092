"""Running ``kf-trainer`` as users do: the installed script in a subprocess (its real
stdout, stderr and exit code), or its ``main`` in this process (cheaper, same code)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kf_trainer_core.testing.scenarios import SCENARIO_ANNOTATION

#: The installed console script (beside this interpreter).
SCRIPT = shutil.which("kf-trainer", path=str(Path(sys.executable).parent)) or "kf-trainer"


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


def cli_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KF_TRAINER_")}
    env.update(extra)
    return env


def run_script(*args: str, timeout: float = 120, **env: str) -> Result:
    """``kf-trainer ARGS`` as a subprocess."""
    done = subprocess.run(
        [SCRIPT, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=cli_env(**env),
        check=False,
    )
    return Result(done.returncode, done.stdout, done.stderr)


def run_main(capsys: pytest.CaptureFixture[str], *args: str) -> Result:
    """``kf-trainer ARGS`` in this process."""
    from kf_trainer_core.cli import main

    capsys.readouterr()
    code = main(list(args))
    captured = capsys.readouterr()
    return Result(code, captured.out, captured.err)


def scenario(**fields: Any) -> dict[str, Any]:
    """A spec option that scripts the job on the test server."""
    return {"type": "Annotations", "annotations": {SCENARIO_ANNOTATION: json.dumps(fields)}}


def spec(*options: dict[str, Any], labels: dict[str, str] | None = None) -> dict[str, Any]:
    opts = list(options)
    if labels:
        opts.append({"type": "Labels", "labels": labels})
    return {
        "runtime": "torch-distributed",
        "trainer": {"type": "CustomTrainerContainer", "image": "busybox", "num_nodes": 1},
        "options": opts,
    }
