"""The GPU benchmark cannot rot while no GPU is at hand: its CPU path (``--cpu``: gloo,
small sizes) runs the same plumbing — ours against bare torchrun, the resume after a
SIGKILLed worker, the failure cases a CPU can make — through an interpreter with torch
and, beside the suite's source, only pydantic and PyYAML (what the GPU machine is given).
It asserts that the run happened and the classes are right, never a timing.

The report renders a run and says, until there is one, that it has not run on a GPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: What the GPU machine's Python is given beside torch (bench/gpu/fetch_wheels.sh).
GIVEN = ("pydantic", "pydantic_core", "annotated_types", "typing_extensions",
         "typing_inspection", "yaml")  # fmt: skip


def only_the_given(folder: Path) -> Path:
    """A folder holding links to just the packages the GPU machine is given, from this
    environment (the torch interpreter shares its Python version)."""
    import importlib.util

    folder.mkdir()
    for name in GIVEN:
        spec = importlib.util.find_spec(name)
        assert spec is not None, name
        assert spec.origin is not None, name
        origin = Path(spec.origin)
        source = origin.parent if origin.name == "__init__.py" else origin
        (folder / source.name).symlink_to(source)
    return folder


def test_the_cpu_path_runs_and_classes_right(tmp_path: Path) -> None:
    python = os.environ.get("KF_TRAINER_TEST_TORCH_PYTHON")
    if python is None:
        pytest.skip("no interpreter with torch (KF_TRAINER_TEST_TORCH_PYTHON)")
    given = only_the_given(tmp_path / "given")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KF_TRAINER_", "VIRTUAL"))}
    env["PYTHONPATH"] = f"{ROOT / 'src'}{os.pathsep}{given}"
    out = tmp_path / "out"
    done = subprocess.run(
        [python, "bench/gpu/run.py", "--cpu", "--out", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=400, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads((out / "gpu_bench.json").read_text())
    speed = result["start_and_speed"]
    for key in ("first_step_s", "steps_per_s"):
        assert speed[key]["ours"], speed
        assert speed[key]["bare"], speed
    resume = result["resume"]
    assert resume["ours"]["class"] == "infrastructure", resume
    assert resume["ours"]["resumed_from"] > 0, resume
    assert resume["bare"]["resumed_from"] > 0, resume
    failures = result["failures"]
    for case in ("sigkilled-worker", "value-error-rank-1"):
        assert failures[case]["right"], failures[case]
    for case in ("cuda-oom", "nccl-duplicate-gpu", "illegal-memory-access"):
        assert "skipped" in failures[case]
    assert "submit → first step" in done.stdout


def test_the_report_says_when_it_has_not_run_on_a_gpu_and_renders_a_run(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT))
    from bench.gpu.report import section_gpu

    text, _ = section_gpu({"not_run": "No GPU machine has run it."}, tmp_path)
    assert text.startswith("**Not run on a GPU yet.**")
    # The recorded run is a real one (bench/gpu/record.py wrote it from a GPU machine).
    recorded = json.loads((ROOT / "bench" / "results.json").read_text())["sections"]["gpu"]
    assert recorded.get("mode") == "gpu", recorded
    assert "## On a GPU" in (ROOT / "BENCHMARKS.md").read_text()

    run = {
        "mode": "gpu",
        "machine": {"gpus": ["NVIDIA H200, 143771 MiB, 580.95"], "python": "3.12", "torch": "2.11"},
        "start_and_speed": {
            "first_step_s": {"ours": [9.0], "bare": [8.0]},
            "steps_per_s": {"ours": [330.0], "bare": [320.0]},
            "first_step_s_median": {"ours": 9.0, "bare": 8.0, "ratio": 1.125},
            "steps_per_s_median": {"ours": 330.0, "bare": 320.0, "ratio": 1.03},
        },
        "resume": {"ours": {"resume_s": 12.0}, "bare": {"resume_s": 10.0}, "ratio": 1.2},
        "failures": {
            "cuda-oom": {"expected": "capacity", "class": "capacity", "right": True,
                         "evidence": "rank 0 on node-0 ran out of GPU memory: a | b `c`"},
        },
    }  # fmt: skip
    text, _ = section_gpu(run, tmp_path)
    assert "| submit → first step (median of 1) | 9.00 s | 8.00 s | 1.1× |" in text
    assert "NVIDIA H200" in text
    assert "a \\| b" in text  # the job's text cannot split the table
