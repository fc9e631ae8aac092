"""``examples/quickstart.py`` as the README runs it (a subprocess, local backend): a
first run trains; a rerun reuses the finished job and says so instead of replaying its
log; other arguments for the same day train a job of their own (no SpecConflictError);
the command it prints to look at the job works."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from examples_support import EXAMPLES, local_jobs

SCRIPT = str(EXAMPLES / "quickstart.py")
ROOT = EXAMPLES.parent


def quickstart(workdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, SCRIPT, "--workdir", str(workdir), *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=ROOT,
    )


def as_printed(command: str) -> subprocess.CompletedProcess[str]:
    """A command the example printed for the user, run by a shell exactly as printed
    (from the clone's root, where the README runs the example)."""
    return subprocess.run(
        command, shell=True, capture_output=True, text=True, timeout=300, check=False, cwd=ROOT
    )


def test_first_run_rerun_and_other_nodes(tmp_path: Path) -> None:
    with local_jobs(tmp_path / "state"):
        first = quickstart(tmp_path, "--day", "5", "--nodes", "2")
        assert first.returncode == 0, first.stderr
        assert "Traceback" not in first.stderr
        assert "4/4" in first.stdout
        assert "reusing the finished job" not in first.stdout

        again = quickstart(tmp_path, "--day", "5", "--nodes", "2")
        assert again.returncode == 0, again.stderr
        assert "reusing the finished job local/" in again.stdout
        # The notice's "read it with: …" runs as printed and shows the training log.
        [read_it] = re.findall(r"\(read it with: (.+)\)$", again.stdout, re.M)
        log = as_printed(read_it)
        assert log.returncode == 0, log.stderr
        assert "epoch " in log.stdout
        # Its training log is not replayed (the job's final report and metrics still show).
        assert "| epoch " in first.stdout
        assert "| epoch " not in again.stdout

        other = quickstart(tmp_path, "--day", "5", "--nodes", "3")
        assert other.returncode == 0, other.stderr
        assert "SpecConflictError" not in other.stderr
        assert "reusing the finished job" not in other.stdout

        # The last line is a command that shows the job, runnable as printed.
        command = other.stdout.strip().splitlines()[-1]
        assert command.startswith("see it: ")
        shown = as_printed(command.removeprefix("see it: "))
        assert shown.returncode == 0, shown.stderr
        assert "Complete" in shown.stdout
        assert "Result:" in shown.stdout


def test_help_describes_the_example_in_full() -> None:
    shown = subprocess.run(
        [sys.executable, SCRIPT, "--help"], capture_output=True, text=True, check=True
    )
    assert "The main job: prepare data → train as a TrainJob → evaluate → promote." in (
        shown.stdout
    )
    assert "--fresh" in shown.stdout


def test_a_changed_spec_for_a_trained_day_gives_a_runnable_fix(tmp_path: Path) -> None:
    with local_jobs(tmp_path / "state"):
        first = quickstart(tmp_path, "--day", "6", "--data-dir", str(tmp_path / "a"))
        assert first.returncode == 0, first.stderr
        changed = quickstart(tmp_path, "--day", "6", "--data-dir", str(tmp_path / "b"))
        assert changed.returncode == 2
        assert "Traceback" not in changed.stderr
        fix = changed.stderr.strip().splitlines()[-1].strip()
        assert fix.startswith("Fix: ")
        fixed = as_printed(fix.removeprefix("Fix: "))
        assert fixed.returncode == 0, fixed.stderr
        assert "reusing the finished job" not in fixed.stdout
