"""The benchmarks' quick mode, run so that they cannot rot: it must run to the end and
write its report, results and plots. Benchmarks never fail on a timing, and neither
does this test: it asserts that the run happened, not what it measured."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

# Its subprocess may take 420 s on a loaded machine: the default 300 s must not cut it.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[1]
SECTIONS = (
    "latency",
    "requests",
    "scale",
    "namespace",
    "submit",
    "imports",
    "local",
    "real",
    "realwait",
)


def test_quick_benchmarks_run_and_write_their_outputs(tmp_path: Path) -> None:
    # The sections recorded apart (the shared triggerer's, the GPU's) and a stale one.
    recorded = json.loads((ROOT / "bench" / "results.json").read_text())["sections"]
    apart = {name: recorded[name] for name in ("triggerer", "gpu")}
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "results.json").write_text(
        json.dumps({"sections": {**apart, "latency": {"stale": True}}})
    )
    # A child process of its own: the benchmarks start a test server, driver processes
    # and (through the drivers) jobs; `python -m bench` ends them all before it exits.
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=420,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]

    results = json.loads((tmp_path / "bench" / "results.json").read_text())
    assert set(SECTIONS) <= set(results["sections"])
    for name in SECTIONS:
        assert "error" not in results["sections"][name], results["sections"][name]
    assert results["machine"]["quick"] is True
    # A full run measures its own sections again and keeps those recorded apart.
    assert "stale" not in results["sections"]["latency"]
    for name, section in apart.items():
        assert results["sections"][name] == section

    report = (tmp_path / "BENCHMARKS.md").read_text()
    assert report.startswith("# Benchmarks")
    assert "Generated" in report
    for title in (
        "Completion latency",
        "API requests per job",
        "Scale of waiting",
        "Namespace size",
        "Shared triggerer at 200 deferred tasks",
        "On a GPU",
    ):
        assert f"## {title}" in report
    plots = sorted(p.name for p in (tmp_path / "bench" / "plots").glob("*.png"))
    assert plots, "no plot was written"
    for plot in plots:
        assert f"bench/plots/{plot}" in report
