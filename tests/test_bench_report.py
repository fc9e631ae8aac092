"""``BENCHMARKS.md`` is generated from ``bench/results.json``: the committed report must
be what the recorded figures render to, or its summary can state figures that no
section measured (a stale summary once showed a triggerer run that results.json no
longer held)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_committed_report_is_what_the_recorded_results_render_to(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT))
    from bench.report import write_report

    (tmp_path / "bench").mkdir()
    shutil.copy(ROOT / "bench" / "results.json", tmp_path / "bench" / "results.json")
    results = json.loads((tmp_path / "bench" / "results.json").read_text())

    rendered = write_report(results, tmp_path).read_text()

    assert (ROOT / "BENCHMARKS.md").read_text() == rendered, (
        "BENCHMARKS.md differs from what bench/results.json renders to. Fix: "
        "uv run --frozen python -c 'from bench.report import rerender; rerender()'"
    )
