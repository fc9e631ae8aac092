"""What a finished (or failed) TrainJob leaves in KFP: numbers for ``Metrics``, the
location for ``Model`` and a Markdown report.

The model convention: a training function that produces a model returns a dict with
the key ``model_uri`` (``"s3://bucket/run-7/model"``, ``"pvc://models/run-7"``,
``"hf://org/name"`` ...). The component's ``Model`` artifact then points there, so a
downstream component reads the model where the training wrote it. Other keys of the
returned dict that hold numbers — and those of a nested ``metrics`` dict — become
metrics, after the ``trainerStatus`` metrics the training code reported on the way.
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

from kf_trainer_core.tasks import Failure, JobOutputs, Waiting, untrusted

if TYPE_CHECKING:
    from kf_trainer_core.tasks import PruneReport

MODEL_URI_KEY = "model_uri"
#: The result shown in the report is cut at this many characters.
_RESULT_SHOWN = 4000


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        number = float(value)
    elif isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            return None
    else:
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


def markdown(
    out: JobOutputs,
    failure: Failure | None = None,
    *,
    waiting: Waiting | None = None,
    fix: str | None = None,
) -> str:
    """A report of the job for ``Output[Markdown]``: status, steps, metrics, model,
    result, and why it failed."""
    failure = failure or out.failure
    status = waiting.state if waiting is not None else out.status.value
    lines = [f"# TrainJob `{out.namespace}/{out.name}`: {status}", ""]
    facts = [("Runtime", out.runtime), ("Status", status)]
    if waiting is not None:
        # What holds the unfinished job up, in the words of the CLI and the errors.
        facts += [(waiting.state, waiting.reason), ("Failure class", waiting.class_text())]
        if fix:
            facts.append(("Fix", fix))
    if out.duration_seconds is not None:
        facts.append(("Duration", f"{out.duration_seconds:.1f} s"))
    if out.cost_text():
        facts.append(("Cost", out.cost_text()))
    if out.worker is not None:
        facts.append(("Runs on", out.worker.line()))  # MultiKueue: its worker cluster
    uri = model_uri(out.result)
    if uri:
        facts.append(("Model", uri))
    lines += ["| | |", "|---|---|"]
    lines += [
        f"| {k} | {untrusted.code_span(v, table=True) if k == 'Model' else _cell(v)} |"
        for k, v in facts
    ]
    if out.steps:
        lines += ["", "## Steps", "", "| Step | Pod | Status | Device | Exit code |"]
        lines.append("|---|---|---|---|---|")
        for s in out.steps:
            device = f"{s.device} x {s.device_count}" if s.device != "Unknown" else ""
            status = s.status or ""
            if s.container_reason and s.container_reason not in ("Completed",):
                status = f"{status} ({s.container_reason})"
            code = "" if s.exit_code is None else s.exit_code
            row = (s.name, s.pod_name, status, device, code)
            lines.append("| " + " | ".join(_cell(v) for v in row) + " |")
    values = metric_values(out)
    if values:
        lines += ["", "## Metrics", "", "| Metric | Value |", "|---|---|"]
        lines += [f"| {_cell(k)} | {v:g} |" for k, v in sorted(values.items())]
    if out.result_missing is not None:
        lines += ["", "## Result", "", f"Unavailable: {_cell(out.result_missing.message)}"]
    if out.result is not None:
        text = json.dumps(out.result, indent=2, sort_keys=True, default=str)
        if len(text) > _RESULT_SHOWN:
            text = text[:_RESULT_SHOWN] + "\n... (cut)"
        lines += ["", "## Result", "", "```json", text, "```"]
    if failure is not None:
        text = failure.describe()
        fence = "```"
        while fence in text:  # a fence the job's text cannot close
            fence += "`"
        lines += ["", "## Failure", "", f"{fence}text", text, fence]
    return "\n".join(lines) + "\n"


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
