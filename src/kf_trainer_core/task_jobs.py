"""A task's TrainJob, for any orchestrator adapter: the spec it submits and the
identity that finds it again, the task-log lines of its life, and what a job that
ended badly shows.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kf_trainer_core.job_summary import job_summary, steps_table
from kf_trainer_core.spec import Name, TrainJobSpec
from kf_trainer_core.status import JobOutputs, TrainJob

__all__ = [
    "announce",
    "bad_ending",
    "finished",
    "log_sink",
    "outputs_rows",
    "spec_digest",
    "spec_of",
    "task_identity",
]

Logger = logging.Logger | logging.LoggerAdapter[logging.Logger]
Identity = str | Sequence[str | int | None]


def spec_of(spec: TrainJobSpec | Mapping[str, Any] | str) -> TrainJobSpec:
    """The spec, validated: a bad field fails the task before anything is submitted."""
    return spec if isinstance(spec, TrainJobSpec) else TrainJobSpec.parse(spec)


def spec_digest(spec: TrainJobSpec) -> str:
    """A digest of the spec's content, stable across processes and runs."""
    text = json.dumps(spec.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def task_identity(
    spec: TrainJobSpec,
    explicit: Identity | None,
    name: str | None,
    scope: Sequence[str] | None,
) -> Identity | None:
    """The identity of the job a task submits: ``explicit`` if given; none for a fixed
    ``name`` (or ``Name`` option), which is its own identity; else the task's ``scope``
    (what survives the orchestrator's retries and re-runs) and the spec's digest, so a
    retry finds its job and a different spec makes a different one."""
    if explicit is not None:
        return explicit
    if name is not None or spec.option(Name) is not None or scope is None:
        return None
    return (*scope, spec_digest(spec))


def log_sink(logger: Logger, job: str, step: str) -> Callable[[str], None]:
    """A log line consumer writing ``[job/step] line`` into ``logger``."""
    prefix = f"[{job}/{step}]"

    def sink(line: str) -> None:
        logger.info("%s %s", prefix, line)

    return sink


def announce(logger: Logger, job: TrainJob, created: bool, link: str | None) -> None:
    """``Submitted`` (or ``Reattached to``) ``TrainJob ns/name (runtime, state): link``."""
    logger.info(
        "%s TrainJob %s/%s (runtime %s, %s)%s",
        "Submitted" if created else "Reattached to",
        job.namespace,
        job.name,
        job.runtime,
        job.status.value,
        f": {link}" if link else "",
    )


def finished(logger: Logger, result: JobOutputs) -> None:
    """The job's end (state, duration, cost) and its reported metrics."""
    took = f" after {result.duration_seconds:.0f}s" if result.duration_seconds else ""
    cost = result.cost_text()
    took += f" ({cost})" if cost else ""
    logger.info("TrainJob %s/%s is %s%s", result.namespace, result.name, result.status.value, took)
    if result.metrics:
        shown = ", ".join(f"{k}={v}" for k, v in sorted(result.metrics.items()))
        logger.info("TrainJob %s/%s reported: %s", result.namespace, result.name, shown)


def outputs_rows(outputs: JobOutputs) -> list[dict[str, Any]]:
    """The steps-and-metrics table of a job's outputs."""
    return steps_table(list(outputs.steps), dict(outputs.metrics), outputs.cost())


def bad_ending(
    exc: BaseException, known: TrainJob | None, note: str | None, link: str | None
) -> tuple[str, str, list[dict[str, Any]]] | None:
    """The name, summary and table of a job that ended badly (the job ``exc`` carries,
    else the one the task knew), when there is a job to show."""
    job = getattr(exc, "job", None) or known
    if not isinstance(job, TrainJob):
        return None
    failure = getattr(exc, "failure", None)
    metrics = dict(job.progress.metrics) if job.progress else {}
    return (
        job.name,
        job_summary(job, failure=failure, note=note, link=link),
        steps_table(list(job.steps), metrics),
    )
