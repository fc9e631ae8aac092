"""The generated program does not share a namespace with the training function's name
(issue 24, defect 16): a function named like one of the program's own names (``json``,
``os``, ``sys``, ``result``, ``reporter``, ``_kf_trainer_main``...) runs in the pod as it
ran in ``check``; Python's special names are refused before anything is submitted."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kf_trainer_core.errors import SpecError
from kf_trainer_core.manifest.builder import build_trainjob
from kf_trainer_core.spec import CustomTrainer, TrainJobSpec
from kf_trainer_core.spec.function import program_for, result_from_log

NAMES = [
    "json",
    "os",
    "sys",
    "result",
    "reporter",
    "rank",
    "text",
    "_kf_trainer_main",
    "_kf_trainer_reporter",
    "_kf_trainer_checkpoints",
    "_kf_trainer_function",
    "annotations",
]


def _run(program: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "prog.py"
    path.write_text(program)
    return subprocess.run(
        [sys.executable, "-I", "-S", str(path)],  # no kf-trainer-suite: the carried copies
        capture_output=True,
        text=True,
        env={"PATH": os.environ.get("PATH", ""), "KF_TRAINER_TERMINATION_LOG": str(tmp_path / "t")},
        cwd=tmp_path,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("name", NAMES)
def test_any_function_name_runs_in_the_pod(tmp_path: Path, name: str) -> None:
    source = (
        f"def {name}(n: int = 1):\n"
        "    from kf_trainer_core.report import report\n"
        "    from kf_trainer_core.checkpoints import latest\n"
        "    report(progress=50, metrics={'n': n})\n"
        "    return {'n': n, 'latest': latest()}\n"
    )
    run = _run(program_for(name, source, {"n": 3}), tmp_path)
    assert run.returncode == 0, run.stderr
    assert result_from_log(run.stdout.splitlines()) == (True, {"n": 3, "latest": None})


@pytest.mark.parametrize("name", ["__name__", "__builtins__", "__main__"])
def test_special_names_are_refused_before_submitting(name: str) -> None:
    spec = TrainJobSpec(trainer=CustomTrainer(f"def {name}():\n    return 1\n"))
    with pytest.raises((SpecError, ValueError), match="special names"):
        build_trainjob(spec)
