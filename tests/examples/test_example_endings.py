"""Each example ends by saying what happened and where the result is, with a command
that shows the TrainJob, runnable as printed (issue 26, item 7)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from examples_support import EXAMPLES


@pytest.mark.slow
def test_the_prefect_example_ends_with_a_summary_and_a_see_it_line(tmp_path: Path) -> None:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PREFECT_", "KF_TRAINER_")) and k != "DO_NOT_TRACK"
    }
    env["PREFECT_HOME"] = str(tmp_path / "prefect-home")
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "prefect_retraining.py"), "--day", "3"],
        cwd=tmp_path,
        env=env,
        # One stream, as a terminal shows both: Prefect's logging (stderr) included.
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:]
    lines = done.stdout.strip().splitlines()
    assert any(ln.startswith("Summary: ") for ln in lines[-5:]), lines[-5:]
    assert any(ln.strip().startswith("model:") for ln in lines[-5:])
    see = lines[-1].strip()
    assert see.startswith("see it:"), lines[-5:]
    shown = subprocess.run(
        see.removeprefix("see it:").strip(),
        shell=True,
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert shown.returncode == 0, shown.stderr
    assert "Complete" in shown.stdout
