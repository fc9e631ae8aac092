"""``python -m bench.gpu.record GPU_BENCH_JSON``: put what ``bench/gpu/run.py`` wrote on
a GPU machine into ``bench/results.json`` (its ``gpu`` section) and render
``BENCHMARKS.md`` again."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from bench.common import REPO
from bench.gpu.report import COMMAND
from bench.report import rerender


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print(__doc__)
        return 2
    run = json.loads(Path(args[0]).read_text())
    path = REPO / "bench" / "results.json"
    results = json.loads(path.read_text())
    results.setdefault("sections", {})["gpu"] = {
        **run,
        "ran_at": run.get("started", "?"),
        "command": COMMAND + (" --cpu" if run.get("mode") == "cpu" else ""),
    }
    path.write_text(json.dumps(results, indent=1) + "\n")
    print(rerender(REPO))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
