"""What a newcomer met on the README's and docs/cli.md's paths (issue 26, the walkthrough
after items 1-9): a job that asks for more than this machine has is said in one clear
line that says what happens and how to refuse it, and no documented sample of ``jobs
logs`` shows the suite's internal marker lines (the command hides them)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import yaml
from cli_support import run_main

from kf_trainer_core.backends.local import machine

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_what_the_machine_lacks_is_one_line_saying_what_happens() -> None:
    cpus = os.cpu_count() or 1
    resources = {"limits": {"cpu": str(cpus * 4), "nvidia.com/gpu": 9999}}
    causes, warnings = machine.admit_resources(resources, 2, "warn", "LocalConfig")
    assert causes == []
    # One line for everything lacking, whatever the number of resources.
    [(reason, message)] = warnings
    assert reason == "InsufficientResources"
    assert "\n" not in message
    assert f"cpu {cpus * 4} per node x 2 node(s); this machine has {cpus}" in message
    assert "nvidia.com/gpu 9999 per node" in message
    assert "running without it" not in message
    assert "The local backend runs the job anyway, on what this machine has" in message
    # The fix names the key a CLI or connection user sets, and the Python spelling.
    assert '"on_missing_resources": "fail"' in message
    assert 'LocalConfig(on_missing_resources="fail")' in message
    [(_, container)] = machine.admit_resources(resources, 2, "warn", "ContainerConfig")[1]
    assert "The container backend runs the job anyway" in container
    assert 'ContainerConfig(on_missing_resources="fail")' in container
    assert machine.admit_resources({"limits": {"cpu": "0.001"}}, 1, "warn", "LocalConfig") == (
        [],
        [],
    )


def test_logs_of_a_job_asking_more_cpus_start_with_one_clear_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/cli.md's tour: ``quickstart.yaml`` asks for 2 CPUs and 4Gi per node on 2
    nodes; on a small machine ``jobs logs -f`` began with a riddle ("...: running
    without it")."""
    cpus = os.cpu_count() or 1
    spec = tmp_path / "big.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "runtime": "torch-distributed",
                "trainer": {
                    "type": "CustomTrainer",
                    "func": "def train():\n    print('trained')\n    return 1\n",
                    "num_nodes": 2,
                    "resources_per_node": {"cpu": cpus, "memory": "4096Gi"},
                },
            }
        )
    )
    where = ["--backend", "local", "--state-dir", str(tmp_path / "state")]
    ran = run_main(capsys, *where, "run", str(spec), "--name", "big-1", "--quiet")
    assert ran.code == 0, ran.err
    logs = run_main(capsys, *where, "jobs", "logs", "big-1", "-f")
    assert logs.code == 0, logs.err
    lines = logs.out.splitlines()
    notes = [ln for ln in lines if ln.startswith("kf-trainer:")]
    assert len(notes) == 1, lines
    assert lines[0] == notes[0]
    assert "this machine has" in notes[0]
    assert "runs the job anyway" in notes[0]
    assert '"on_missing_resources": "fail"' in notes[0]
    assert "running without it" not in logs.out
    assert lines[1:] == ["trained"]


#: A line of the suite's own protocol (progress and result markers).
_MARKER = re.compile(r"^\s*##kf-trainer-[a-z]+##")


def test_no_documented_log_sample_shows_an_internal_marker() -> None:
    """``jobs logs`` hides the marker lines (``--raw`` shows the log as it is): a
    sample that shows one is stale and teaches the user a protocol line as output."""
    stale = []
    for page in [*sorted(DOCS.glob("*.md")), DOCS.parent / "README.md"]:
        blocks = re.findall(r"```[a-z]*\n(.*?)```", page.read_text(), flags=re.S)
        for block in blocks:
            if "--raw" in block:
                continue
            stale += [f"{page.name}: {ln}" for ln in block.splitlines() if _MARKER.match(ln)]
    assert stale == []


def test_every_uv_command_shown_runs_offline_in_a_clone() -> None:
    """A command shown to a user runs as printed: ``uv run`` without ``--frozen``
    re-resolves the lock (and fails offline); the README, docs, examples and spec files
    all say ``uv run --frozen``."""
    root = DOCS.parent
    pages = [
        root / "README.md",
        *sorted(DOCS.glob("*.md")),
        *sorted((root / "examples").rglob("*.py")),
        *sorted((root / "examples").rglob("*.yaml")),
    ]
    bare = [
        f"{page.relative_to(root)}: {line.strip()}"
        for page in pages
        for line in page.read_text().splitlines()
        if re.search(r"\buv run (python|kf-trainer|pytest|ruff|mypy)\b", line)
    ]
    assert bare == []
