"""What a finished (or failed) TrainJob leaves in KFP: numbers for ``Metrics``, the
location for ``Model`` and a report of a prune run. The job's own Markdown report is the
core's, as every adapter writes it (``outputs_summary``, ``job_summary``).

The model convention: a training function that produces a model returns a dict with
the key ``model_uri`` (``"s3://bucket/run-7/model"``, ``"pvc://models/run-7"``,
``"hf://org/name"`` ...). The component's ``Model`` artifact then points there, so a
downstream component reads the model where the training wrote it. Other keys of the
returned dict that hold numbers — and those of a nested ``metrics`` dict — become
metrics, after the ``trainerStatus`` metrics the training code reported on the way.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from kf_trainer_core.tasks import JobOutputs, untrusted

if TYPE_CHECKING:
    from kf_trainer_core.tasks import PruneReport

MODEL_URI_KEY = "model_uri"


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        # A JSON number from the job is a Python int of any size: past a float's range,
        # float() raises OverflowError.
        number = float(value)
    except (ValueError, OverflowError):
        return None
    return number if math.isfinite(number) else None


def metric_values(out: JobOutputs) -> dict[str, float]:
    """Metrics for ``Output[Metrics]``: what the job cost (``wall_seconds``,
    ``pending_seconds``, ``running_seconds``, ``gpu_hours``), the ``trainerStatus``
    metrics, then the numbers in the returned dict (and its ``metrics`` dict); later
    ones win on a name clash; a returned number is the metric ``result``."""
    values: dict[str, float] = {
        name: float(value) for name, value in out.cost().items() if value is not None
    }
    for name, text in out.metrics.items():
        number = _number(text)
        if number is not None:
            values[name] = number
    result = out.result
    if isinstance(result, dict):
        nested = result.get("metrics")
        for source in (result, nested if isinstance(nested, dict) else {}):
            for name, value in source.items():
                number = _number(value) if not isinstance(value, str) else None
                if number is not None:
                    # KFP's metadata shows the name: the job's text, made safe.
                    values[untrusted.line(name, untrusted.METRIC_TEXT_LIMIT)] = number
    else:
        number = _number(result) if not isinstance(result, str) else None
        if number is not None:
            values["result"] = number
    return values


def model_uri(result: Any) -> str | None:
    """The model location a training function returned (``{"model_uri": ...}``)."""
    if isinstance(result, dict):
        uri = result.get(MODEL_URI_KEY)
        if isinstance(uri, str) and uri.strip():
            return untrusted.line(uri.strip())
    return None


def model_metadata(out: JobOutputs) -> dict[str, Any]:
    """Metadata for ``Output[Model]``: where it came from."""
    return {
        "trainjob": out.name,
        "namespace": out.namespace,
        "runtime": out.runtime,
        MODEL_URI_KEY: model_uri(out.result) or "",
    }


def _cell(value: Any) -> str:
    # Cells hold what the job wrote (metric names, reasons): shown as written, on one
    # line, never read as markdown or HTML.
    return "" if value is None else untrusted.markdown(" ".join(str(value).splitlines()))


def prune_markdown(report: PruneReport) -> str:
    """A report of one prune run for ``Output[Markdown]``: the summary line, then the
    jobs picked (and why) and those left alone. Names and identities come from the
    cluster: shown as text, never read as markdown."""
    title = "Prune plan (dry run)" if report.dry_run else "Pruned TrainJobs"
    lines = [f"# {title}: `{report.namespace}`", "", _cell(report.summary()), ""]
    if report.selected:
        lines += ["| TrainJob | Identity | Status | Finished | Why |", "|---|---|---|---|---|"]
        for e in report.selected:
            row = (e.name, e.identity, e.status, e.finished_at, e.why)
            lines.append("| " + " | ".join(_cell(v) for v in row) + " |")
    if report.skipped:
        lines += ["", "## Left alone", "", "| TrainJob | Why |", "|---|---|"]
        lines += [f"| {_cell(n)} | {_cell(w)} |" for n, w in report.skipped]
    return "\n".join(lines) + "\n"
