"""What a TrainJob shows in the Prefect UI: a progress bar, a table of steps and
metrics, a markdown summary and a dashboard link.

The builders here are pure (tested without a server); :class:`ArtifactPublisher`
creates and updates the artifacts inside a task run.
Everything shown comes from the job's status, steps, metrics, result and failure —
never from the credentials, which the artifacts have no access to.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from uuid import UUID

from kf_trainer_core.timeutil import duration_text

if TYPE_CHECKING:
    from kf_trainer_core.kueue import QueueStatus
    from kf_trainer_core.status import Failure, JobOutputs, TrainJob

#: Log lines of a failure shown in the summary (the whole log is in the task's logs).
SUMMARY_LOG_LINES = 20
#: Characters of the function's return value shown in the summary.
SUMMARY_RESULT_CHARS = 600

_log = logging.getLogger("kf_trainer_prefect.artifacts")


def artifact_key(job: str, kind: str) -> str:
    """The artifact key for one kind of artifact of a job. Keys take lowercase letters,
    digits and dashes, which is exactly what TrainJob names are made of."""
    return f"{job}-{kind}"


def progress_description(job: TrainJob) -> str:
    """One line for the progress artifact: where the job is and what it reports."""
    head = f"TrainJob {job.namespace}/{job.name}: {job.status.value}"
    # A job queued by Kueue says where it waits and why.
    queue = job.queue.summary() if job.queue is not None and job.queue.waiting else []
    return " · ".join([head, *queue, *(job.progress.summary() if job.progress else [])])


def steps_table(
    steps: list[Any],
    metrics: dict[str, str] | None = None,
    cost: dict[str, float | None] | None = None,
) -> list[dict[str, str | int | None]]:
    """Rows for the table artifact: one per step, one per reported metric, then what
    the job cost (wall, pending and running seconds, GPU-hours; kind ``cost``)."""
    rows: list[dict[str, str | int | None]] = []
    for step in steps:
        rows.append(
            {
                "kind": "step",
                "name": step.name,
                "status": step.status or "",
                "value": "",
                "device": ""
                if step.device == "Unknown"
                else f"{step.device} x {step.device_count}",
                "pod": step.pod_name,
                "exit_code": step.exit_code,
                "reason": step.container_reason or "",
            }
        )
    for key, value in sorted((metrics or {}).items()):
        rows.append(
            {
                "kind": "metric",
                "name": key,
                "status": "",
                "value": value,
                "device": "",
                "pod": "",
                "exit_code": None,
                "reason": "",
            }
        )
    for key, number in (cost or {}).items():
        if number is None:
            continue
        rows.append(
            {
                "kind": "cost",
                "name": key,
                "status": "",
                "value": f"{number:.6g}",
                "device": "",
                "pod": "",
                "exit_code": None,
                "reason": "",
            }
        )
    return rows


def _code(text: str) -> str:
    # Inline code cannot hold a backtick run shorter than its fence: pick a longer fence.
    fence = "`"
    while fence in text:
        fence += "`"
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _block(lines: list[str]) -> str:
    body = "\n".join(lines)
    fence = "```"
    while fence in body:
        fence += "`"
    return f"{fence}text\n{body}\n{fence}"


def summary_markdown(
    *,
    name: str,
    namespace: str,
    runtime: str,
    status: str,
    duration_seconds: float | None = None,
    steps: list[Any] | None = None,
    metrics: dict[str, str] | None = None,
    result: Any = None,
    failure: Failure | None = None,
    note: str | None = None,
    link: str | None = None,
    queue: QueueStatus | None = None,
    cost: str | None = None,
) -> str:
    """The markdown summary of a job: name, namespace, runtime, state, duration (and
    what it cost), steps, metrics, result, its Kueue queue and, for a failure, its
    class, reason, step, pod,
    exit code and last log lines."""
    lines = [f"## TrainJob {_code(name)}: {status}", ""]
    lines.append(f"- **Namespace:** {_code(namespace)}")
    lines.append(f"- **Runtime:** {_code(runtime)}")
    lines.append(f"- **Duration:** {duration_text(duration_seconds)}")
    if cost:
        lines.append(f"- **Cost:** {cost}")
    if steps:
        shown = ", ".join(f"{s.name} ({s.status or 'unknown'})" for s in steps)
        lines.append(f"- **Steps:** {shown}")
    if metrics:
        lines.append(
            "- **Metrics:** "
            + ", ".join(f"{_code(f'{k}={v}')}" for k, v in sorted(metrics.items()))
        )
    if result is not None:
        text = json.dumps(result, sort_keys=True, default=str)
        if len(text) > SUMMARY_RESULT_CHARS:
            text = text[:SUMMARY_RESULT_CHARS] + "…"
        lines.append(f"- **Result:** {_code(text)}")
    if queue is not None:
        lines.append(f"- **Queue:** {_code(queue.line())}")
    if link:
        lines.append(f"- **Dashboard:** [{name}]({link})")
    if note:
        lines += ["", note]
    if failure is not None:
        lines += ["", "### Failure", ""]
        lines.append(f"- **Reason:** {_code(failure.reason or 'Failed')}")
        if failure.failure_class.value != "unknown":
            why = f" — {failure.classified_by}" if failure.classified_by else ""
            lines.append(f"- **Failure class:** {_code(failure.failure_class.value)}{why}")
        if failure.message:
            lines.append(f"- **Message:** {_code(failure.message)}")
        if failure.step:
            where = f"{failure.step}" + (f" (pod {failure.pod})" if failure.pod else "")
            lines.append(f"- **Failing step:** {_code(where)}")
        if failure.container_reason or failure.exit_code is not None:
            what = [failure.container_reason or ""]
            if failure.exit_code is not None:
                what.append(f"exit code {failure.exit_code}")
            lines.append(f"- **Container:** {_code(', '.join(w for w in what if w))}")
        if failure.events:
            lines += ["", "Events:", "", _block(failure.events[-10:])]
        if failure.log_tail:
            tail = failure.log_tail[-SUMMARY_LOG_LINES:]
            lines += ["", f"Last {len(tail)} log lines:", "", _block(tail)]
    return "\n".join(lines) + "\n"


def outputs_summary(outputs: JobOutputs, *, link: str | None = None) -> str:
    """:func:`summary_markdown` for a finished job's outputs."""
    return summary_markdown(
        name=outputs.name,
        namespace=outputs.namespace,
        runtime=outputs.runtime,
        status=outputs.status.value,
        duration_seconds=outputs.duration_seconds,
        steps=list(outputs.steps),
        metrics=dict(outputs.metrics),
        result=outputs.result,
        failure=outputs.failure,
        link=link,
        queue=outputs.queue,
        cost=outputs.cost_text(),
    )


def job_summary(
    job: TrainJob,
    *,
    failure: Failure | None = None,
    note: str | None = None,
    link: str | None = None,
) -> str:
    """:func:`summary_markdown` for a job that did not finish well (failed, timed out
    or cancelled)."""
    duration = None
    if job.creation_timestamp and job.completion_timestamp:
        duration = (job.completion_timestamp - job.creation_timestamp).total_seconds()
    return summary_markdown(
        name=job.name,
        namespace=job.namespace,
        runtime=job.runtime,
        status=job.status.value,
        duration_seconds=duration,
        steps=list(job.steps),
        metrics=dict(job.progress.metrics) if job.progress else None,
        failure=failure or job.failure,
        note=note,
        link=link,
        queue=job.queue,
    )


@dataclass
class _ProgressState:
    """The latest progress seen (from any thread or callback) and what was pushed."""

    artifact_id: UUID | None = None
    percentage: float = 0.0
    description: str = ""
    pushed: tuple[float, str] | None = None
    enabled: bool = True
    warned: bool = field(default=False)

    def observe(self, job: TrainJob) -> bool:
        """Record a job update; ``True`` if there is something new to push."""
        if job.progress is not None and job.progress.percentage is not None:
            self.percentage = float(max(0, min(100, job.progress.percentage)))
        if job.status.value == "Complete":
            self.percentage = 100.0
        self.description = progress_description(job)
        return self.pending()

    def pending(self) -> bool:
        return (
            self.enabled
            and self.artifact_id is not None
            and (self.percentage, self.description) != self.pushed
        )

    def failed(self, exc: Exception) -> None:
        # Artifacts are a view: a Prefect API hiccup must not fail the training.
        if not self.warned:
            _log.warning("could not update the progress artifact: %s", exc)
            self.warned = True


class ArtifactPublisher:
    """Creates and updates a job's artifacts inside a task run (both faces of the tasks
    run the same coroutines, so this is async only)."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.progress = _ProgressState(enabled=enabled)

    async def link(self, job: TrainJob, link: str | None) -> None:
        """Create the dashboard link artifact of a job, when a dashboard is configured."""
        if not (self.enabled and link):
            return
        from prefect.artifacts import acreate_link_artifact

        try:
            await acreate_link_artifact(
                link=link,
                link_text=f"TrainJob {job.namespace}/{job.name}",
                key=artifact_key(job.name, "dashboard"),
                description=f"TrainJob {job.namespace}/{job.name} in the dashboard",
            )
        except Exception as exc:
            _log.warning("could not create the link artifact of %s: %s", job.name, exc)

    async def start(self, job: TrainJob, link: str | None) -> None:
        """Create the progress artifact (and the dashboard link) of a submitted job."""
        if not self.enabled:
            return
        from prefect.artifacts import acreate_progress_artifact

        await self.link(job, link)
        try:
            self.progress.observe(job)
            self.progress.artifact_id = await acreate_progress_artifact(
                progress=self.progress.percentage,
                key=artifact_key(job.name, "progress"),
                description=self.progress.description,
            )
            self.progress.pushed = (self.progress.percentage, self.progress.description)
        except Exception as exc:
            self.progress.failed(exc)

    async def flush(self) -> None:
        """Push the latest progress, if it changed."""
        state = self.progress
        if not state.pending():
            return
        from prefect.artifacts import aupdate_progress_artifact

        wanted = (state.percentage, state.description)
        try:
            assert state.artifact_id is not None
            await aupdate_progress_artifact(
                artifact_id=state.artifact_id, progress=wanted[0], description=wanted[1]
            )
            state.pushed = wanted
        except Exception as exc:
            state.failed(exc)

    async def finish(self, job_name: str, markdown: str, rows: list[dict[str, Any]]) -> None:
        """Create the summary and the steps-and-metrics table."""
        if not self.enabled:
            return
        from prefect.artifacts import acreate_markdown_artifact, acreate_table_artifact

        await self.flush()
        try:
            await acreate_markdown_artifact(
                markdown=markdown,
                key=artifact_key(job_name, "summary"),
                description=f"TrainJob {job_name}",
            )
            if rows:
                await acreate_table_artifact(
                    table=rows,
                    key=artifact_key(job_name, "steps"),
                    description=f"Steps and metrics of TrainJob {job_name}",
                )
        except Exception as exc:
            _log.warning("could not create the artifacts of TrainJob %s: %s", job_name, exc)
