"""``examples/quickstart.py`` as the README runs it (a subprocess, local backend): a
first run trains; a rerun reuses the finished job and says so instead of replaying its
log; other arguments for the same day train a job of their own (no SpecConflictError);
the command it prints to look at the job works."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
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


def _on_cluster(
    workdir: Path, kubeconfig: Path, namespace: str
) -> subprocess.CompletedProcess[str]:
    """The quickstart pointed at a cluster as the README says: configuration only."""
    import json
    import os

    backend = {"backend": "kubernetes", "kubeconfig": str(kubeconfig), "namespace": namespace}
    env = {k: v for k, v in os.environ.items() if not k.startswith("KF_TRAINER_")}
    env["KF_TRAINER_BACKEND"] = json.dumps(backend)
    return subprocess.run(
        [sys.executable, SCRIPT, "--workdir", str(workdir)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=ROOT,
        env=env,
    )


def _says_why_there_is_no_result(done: subprocess.CompletedProcess[str]) -> None:
    # It read outputs.result["model_uri"] of a job with no readable result:
    # "TypeError: 'NoneType' object is not subscriptable" (issue 35, item 5).
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert "succeeded, but its result cannot be read" in done.stderr
    assert "3/4" not in done.stdout
    assert re.search(r"^\s*see it: .* jobs get train-", done.stdout, re.M), done.stdout


def test_a_job_whose_result_cannot_be_read_is_said_not_a_type_error(
    kube: Any, kubeconfig_path: Path, tmp_path: Path
) -> None:
    """On the test server, nodes that serve no log and write no termination message."""
    before = kube.controller.default_preset
    kube.controller.default_preset = "log-less"
    try:
        _says_why_there_is_no_result(_on_cluster(tmp_path, kubeconfig_path, "default"))
    finally:
        kube.controller.default_preset = before
        kube.controller.reset()


@pytest.mark.control_plane
def test_on_the_real_control_plane_no_result_is_said(
    control_plane_kubeconfig: Path, control_plane_namespace: str, tmp_path: Path
) -> None:
    """kwok's pods run nothing and serve no log: what the issue's newcomer met."""
    _says_why_there_is_no_result(
        _on_cluster(tmp_path, control_plane_kubeconfig, control_plane_namespace)
    )
