"""The report's GPU section, from what ``bench/gpu/run.py`` wrote (``gpu_bench.json``,
put into ``bench/results.json`` by :mod:`bench.gpu.record`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.common import JSON
from bench.report import skipped, table, times
from kf_trainer_core.base.untrusted import code_span

TITLE = "On a GPU"
COMMAND = "PYTHONPATH=src python3 bench/gpu/run.py"

_HOW = (
    "One script, for a machine with an NVIDIA GPU and its own Python with torch "
    f"(`{COMMAND}`; pydantic and PyYAML from the wheels of `bench/gpu/fetch_wheels.sh` "
    "where the machine lacks them; `--cpu` runs the same plumbing with gloo). Each figure "
    "is taken against bare `torchrun` running the same training function in the same run: "
    "*submit → first step*: from `client.train` (bare: starting `torchrun`) to the end of "
    "the first step of a 4-layer 4096-wide bf16 MLP; *training loop*: its steps per second "
    "after a warm-up; *resume*: a worker SIGKILLed after a checkpoint to the first step of "
    "the resumed run (ours: the failure classed, the next attempt of the same identity "
    "submitted, as the adapters' default retry does; bare: `torchrun --max-restarts 1`). "
    "Then the class the suite gives each failure, on the GPU. Record a run with "
    "`python -m bench.gpu.record gpu_bench.json`."
)


def _s(value: Any, unit: str) -> str:
    if not isinstance(value, (int, float)):
        return "—"
    return f"{value:.2f}{unit}" if value < 100 else f"{value:.0f}{unit}"


def section_gpu(section: JSON, out: Path) -> tuple[str, list[list[str]]]:
    del out  # no plots
    if section.get("not_run"):
        return f"**Not run on a GPU yet.** {section['not_run']}\n\n{_HOW}", []
    broke = skipped(section)
    if broke:
        return broke, []
    facts = section.get("machine") or {}
    gpus = "; ".join(facts.get("gpus") or []) or "no GPU"
    head = (
        f"{_HOW}\n\nMachine: {gpus}; Python {facts.get('python', '?')}, torch "
        f"{facts.get('torch', '?')}, {facts.get('cores', '?')} cores; mode {section.get('mode')}."
    )
    speed = section.get("start_and_speed") or {}
    rows = []
    for key, label, unit in (
        ("first_step_s", "submit → first step", " s"),
        ("steps_per_s", "training loop", " steps/s"),
    ):
        m = speed.get(f"{key}_median") or {}
        n = len((speed.get(key) or {}).get("ours") or [])
        rows.append([f"{label} (median of {n})", _s(m.get("ours"), unit),
                     _s(m.get("bare"), unit), times(m.get("ratio"))])  # fmt: skip
    res = section.get("resume") or {}
    ours, bare = res.get("ours") or {}, res.get("bare") or {}
    rows.append(["SIGKILL after a checkpoint → resumed step", _s(ours.get("resume_s"), " s"),
                 _s(bare.get("resume_s"), " s"), times(res.get("ratio"))])  # fmt: skip
    measured = table(["", "ours", "bare torchrun", "ours / bare"], rows)
    cases = []
    for case, row in (section.get("failures") or {}).items():
        got = row.get("class") or ("skipped" if "skipped" in row else "error")
        why = row.get("evidence") or row.get("skipped") or row.get("error") or ""
        right = "yes" if row.get("right") else ("—" if "skipped" in row else "**no**")
        cases.append([case, row.get("expected", "?"), got, right, code_span(why, 160, table=True)])
    classes = table(["failure", "expected", "class", "right", "evidence"], cases)
    return f"{head}\n\n{measured}\n\n{classes}", []
