"""``python -m bench [--quick] [--only NAME] [--out DIR]``: run the benchmarks and rewrite
``BENCHMARKS.md``, ``bench/plots/*.png`` and ``bench/results.json`` under ``DIR``
(default: the repository root).

The full run takes about ten minutes on two cores; ``--quick`` runs every benchmark
small (about a minute: the test suite runs it so that the benchmarks cannot rot).
``--only`` runs one benchmark and keeps the other sections of the previous results.
A benchmark never fails on a timing; the exit status is non-zero only when a benchmark
itself broke (its section then says how).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import (
    api_requests,
    imports,
    latency,
    local,
    namespace,
    real,
    realwait,
    scale,
    submit,
)
from bench.common import JSON, REPO, BenchServer, Settings, machine_facts
from bench.report import write_report

#: name -> (module run function, needs the test server)
BENCHMARKS: dict[str, tuple[Callable[..., JSON], bool]] = {
    "latency": (latency.run, True),
    "requests": (api_requests.run, True),
    "scale": (scale.run, True),
    "namespace": (namespace.run, True),
    "submit": (submit.run, True),
    "imports": (imports.run, False),
    "local": (local.run, False),
    # Starts its own server: the real control plane of ../shared/control-plane.
    "real": (real.run, False),
    # Two more of its own: with the real controllers, and API-only for namespace size.
    "realwait": (realwait.run, False),
}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (about a minute)")
    parser.add_argument("--only", choices=sorted(BENCHMARKS), help="run one benchmark")
    parser.add_argument(
        "--out", type=Path, default=REPO, help="where BENCHMARKS.md and bench/ go (default: repo)"
    )
    parser.add_argument(
        "--scale-counts",
        type=lambda text: [int(n) for n in text.split(",")],
        help="job counts for 'scale' (comma-separated; default 10,100,1000)",
    )
    parser.add_argument(
        "--cache",
        type=Path,
        default=REPO / ".bench-cache",
        help="where the Kubeflow SDK's venv is kept (default: .bench-cache)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out: Path = args.out.resolve()
    settings = Settings(
        quick=args.quick, out=out, cache=args.cache.resolve(), scale_counts=args.scale_counts
    )
    results_path = out / "bench" / "results.json"
    previous: JSON = json.loads(results_path.read_text()) if results_path.exists() else {}
    results: JSON = {}
    if args.only:
        # Keep the other sections of the previous run; each section says when it ran.
        results = previous
    else:
        # A full run measures every section above; those it cannot run (the shared
        # triggerer's, tens of minutes; the GPU's, on a GPU machine) are recorded apart
        # and carried over, each with its own date.
        apart = {k: v for k, v in previous.get("sections", {}).items() if k not in BENCHMARKS}
        if apart:
            results["sections"] = apart
    selected = [args.only] if args.only else list(BENCHMARKS)
    started = time.monotonic()
    command = "uv run python -m bench" + (" --quick" if args.quick else "")
    if args.only:
        command += f" --only {args.only}"
    if args.scale_counts:
        command += " --scale-counts " + ",".join(map(str, args.scale_counts))
    if not args.only or "machine" not in results:
        results["machine"] = machine_facts(settings)
        results["command"] = command
    # else: the header keeps describing the run that produced the other sections; the
    # re-run section carries its own command and date.
    sections: dict[str, Any] = results.setdefault("sections", {})
    broken = []
    workdir = Path(tempfile.mkdtemp(prefix="kf-bench-"))
    try:
        server: BenchServer | None = None
        if any(BENCHMARKS[name][1] for name in selected):
            server = BenchServer(workdir).__enter__()
        try:
            for name in selected:
                run, needs_server = BENCHMARKS[name]
                t0 = time.monotonic()
                settings.note(f"== {name}")
                try:
                    section = (
                        run(settings, server, workdir) if needs_server else run(settings, workdir)
                    )
                except Exception:
                    broken.append(name)
                    section = {"error": traceback.format_exc()}
                    settings.note(f"{name} broke:\n{section['error']}")
                section["seconds"] = round(time.monotonic() - t0, 1)
                section["ran_at"] = time.strftime("%Y-%m-%d %H:%M:%S %Z")
                section["command"] = command
                section["quick"] = args.quick
                sections[name] = section
        finally:
            if server is not None:
                server.__exit__(None, None, None)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    results["total_seconds"] = round(time.monotonic() - started, 1)
    results_path.parent.mkdir(parents=True, exist_ok=True)
    results_path.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    write_report(results, out)
    settings.note(f"done in {results['total_seconds']} s; wrote {out / 'BENCHMARKS.md'}")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
