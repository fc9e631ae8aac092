"""A TrainJob's summary for people, the same for every orchestrator: a one-line state
(with its Kueue queue and reported progress), a table of steps, metrics and cost, and a
markdown report (state, duration, steps, metrics, result, queue, dashboard link and,
for a failure, its class, reason, step, pod, exit code, events and last log lines).

Pure functions of the job's status and outputs: nothing here sees credentials.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kf_trainer_core.base import untrusted
from kf_trainer_core.base.timeutil import duration_text
from kf_trainer_core.base.untrusted import code_span

if TYPE_CHECKING:
    from kf_trainer_core.cluster.kueue import QueueStatus
    from kf_trainer_core.cluster.multikueue import WorkerCluster
    from kf_trainer_core.cluster.outputs import JobOutputs
    from kf_trainer_core.cluster.status import Failure, TrainJob
    from kf_trainer_core.cluster.waiting import Waiting

__all__ = [
    "job_summary",
    "outputs_summary",
    "progress_description",
    "steps_table",
    "summary_markdown",
]

#: Log lines of a failure shown in the summary (the whole log is in the task's logs).
SUMMARY_LOG_LINES = 20
#: Characters of the function's return value shown in the summary.
SUMMARY_RESULT_CHARS = 600


def progress_description(job: TrainJob) -> str:
    """One line for a progress display: where the job is and what it reports."""
    # A step failing and being retried, a pod that cannot start: said as everywhere.
    state = untrusted.markdown(job.waiting.line()) if job.waiting else job.status.value
    head = f"TrainJob {job.namespace}/{job.name}: {state}"
    # A job queued by Kueue says where it waits and why.
    queue = job.queue.summary() if job.queue is not None and job.queue.waiting else []
    # A MultiKueue job says which worker cluster runs it.
    if job.worker is not None and job.worker.name is not None:
        queue.append(f"on {untrusted.markdown(job.worker.line())}")
    # Displays render it as markdown (Prefect's progress artifact): the job's own words
    # are escaped.
    reported = [untrusted.markdown(part) for part in job.progress_summary()]
    return " · ".join([head, *queue, *reported])


def steps_table(
    steps: list[Any],
    metrics: Mapping[str, Any] | None = None,
    cost: dict[str, float | None] | None = None,
) -> list[dict[str, str | int | None]]:
    """Rows for a table of the job: one per step, one per reported metric, then what
    the job cost (wall, pending and running seconds, GPU-hours; kind ``cost``)."""
    # Every row has every column, in this order (a table artifact's columns).
    blank: dict[str, str | int | None] = {
        **dict.fromkeys(("kind", "name", "status", "value", "device", "pod"), ""),
        "exit_code": None,
        "reason": "",
    }
    rows = [
        {
            **blank,
            "kind": "step",
            "name": step.name,
            "status": step.status or "",
            "device": "" if step.device == "Unknown" else f"{step.device} x {step.device_count}",
            "pod": step.pod_name,
            "exit_code": step.exit_code,
            "reason": step.container_reason or "",
        }
        for step in steps
    ]
    for key, value in sorted((metrics or {}).items()):
        rows.append({**blank, "kind": "metric", "name": key, "value": value})
    for key, number in (cost or {}).items():
        if number is not None:
            rows.append({**blank, "kind": "cost", "name": key, "value": f"{number:.6g}"})
    return rows


def _block(lines: list[str]) -> str:
    body = "\n".join(untrusted.line(line) for line in lines)
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
    metrics: Mapping[str, Any] | None = None,
    result: Any = None,
    failure: Failure | None = None,
    note: str | None = None,
    link: str | None = None,
    queue: QueueStatus | None = None,
    cost: str | None = None,
    waiting: Waiting | None = None,
    fix: str | None = None,
    worker: WorkerCluster | None = None,
    model: str | None = None,
) -> str:
    """The markdown summary of a job: name, namespace, runtime, state, duration (and
    what it cost), steps, metrics, result, where it wrote its ``model``, its Kueue
    queue, what holds an unfinished job up (``waiting``: restarting, pending; its class
    and ``fix``) and, for a failure, its class, reason, step, pod, exit code and last
    log lines."""
    if waiting is not None:
        status = waiting.state
    lines = [f"## TrainJob {code_span(name)}: {status}", ""]
    lines.append(f"- **Namespace:** {code_span(namespace)}")
    lines.append(f"- **Runtime:** {code_span(runtime)}")
    lines.append(f"- **Duration:** {duration_text(duration_seconds)}")
    if cost:
        lines.append(f"- **Cost:** {cost}")
    if steps:
        shown = ", ".join(untrusted.markdown(f"{s.name} ({s.status or 'unknown'})") for s in steps)
        lines.append(f"- **Steps:** {shown}")
    if metrics:
        lines.append(
            "- **Metrics:** "
            + ", ".join(f"{code_span(f'{k}={v}')}" for k, v in sorted(metrics.items()))
        )
    if result is not None:
        text = json.dumps(result, sort_keys=True, default=str)
        if len(text) > SUMMARY_RESULT_CHARS:
            text = text[:SUMMARY_RESULT_CHARS] + "…"
        lines.append(f"- **Result:** {code_span(text)}")
    if model:
        lines.append(f"- **Model:** {code_span(model)}")
    if queue is not None:
        lines.append(f"- **Queue:** {code_span(queue.line())}")
    if worker is not None:
        lines.append(f"- **Runs on:** {code_span(worker.line())}")
    if link:
        lines.append(f"- **Dashboard:** [{name}]({link})")
    if waiting is not None:
        # The same words as the CLI's and the errors': the reason, the class, one fix.
        lines.append(f"- **{waiting.state}:** {untrusted.markdown(waiting.reason)}")
        lines.append(f"- **Failure class:** {untrusted.markdown(waiting.class_text())}")
        if fix:
            lines.append(f"- **Fix:** {untrusted.markdown(fix)}")
    if note:
        lines += ["", note]
    if failure is not None:
        lines += ["", "### Failure", ""]
        lines.append(f"- **Reason:** {code_span(failure.reason or 'Failed')}")
        if failure.failure_class.value != "unknown":
            why = f" — {untrusted.markdown(failure.classified_by)}" if failure.classified_by else ""
            lines.append(f"- **Failure class:** {code_span(failure.failure_class.value)}{why}")
        if failure.message:
            lines.append(f"- **Message:** {code_span(failure.message)}")
        if failure.step:
            where = f"{failure.step}" + (f" (pod {failure.pod})" if failure.pod else "")
            lines.append(f"- **Failing step:** {code_span(where)}")
        if failure.container_reason or failure.exit_code is not None:
            what = [failure.container_reason or ""]
            if failure.exit_code is not None:
                what.append(f"exit code {failure.exit_code}")
            lines.append(f"- **Container:** {code_span(', '.join(w for w in what if w))}")
        if failure.events:
            lines += ["", "Events:", "", _block(failure.events[-10:])]
        if failure.log_tail:
            tail = failure.log_tail[-SUMMARY_LOG_LINES:]
            lines += ["", f"Last {len(tail)} log lines:", "", _block(tail)]
    return "\n".join(lines) + "\n"


def outputs_summary(
    outputs: JobOutputs, *, link: str | None = None, model: str | None = None
) -> str:
    """:func:`summary_markdown` for a finished job's outputs (``model``: where the job
    wrote its model, for KFP's ``Model`` artifact)."""
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
        worker=outputs.worker,
        cost=outputs.cost_text(),
        model=model,
        note=(
            f"Result unavailable: {untrusted.markdown(outputs.result_missing.message)}"
            if outputs.result_missing
            else None
        ),
    )


def job_summary(
    job: TrainJob,
    *,
    failure: Failure | None = None,
    note: str | None = None,
    link: str | None = None,
    fix: str | None = None,
) -> str:
    """:func:`summary_markdown` for a job that did not finish well (failed, timed out
    or cancelled). What holds an unfinished job up (:attr:`TrainJob.waiting`) is said
    instead of the stuck pod's failure, with ``fix`` (a timeout's; else its class's)."""
    waiting = None if job.status.terminal else job.waiting
    if waiting is not None:
        from kf_trainer_core.cluster.waiting import plain_hint

        failure = None
        fix = fix or waiting.fix(job.name, plain_hint(job.namespace))
    else:
        failure = failure or job.failure
    duration = None
    if job.creation_timestamp and job.completion_timestamp:
        # Two clocks: the API server stamps the creation, the Trainer the end. A job
        # that ends at once may end "before" it began; like its cost, it took 0 s.
        duration = max(0.0, (job.completion_timestamp - job.creation_timestamp).total_seconds())
    return summary_markdown(
        name=job.name,
        namespace=job.namespace,
        runtime=job.runtime,
        status=job.status.value,
        duration_seconds=duration,
        steps=list(job.steps),
        metrics=dict(job.progress.metrics) if job.progress else None,
        failure=failure,
        note=note,
        link=link,
        queue=job.queue,
        waiting=waiting,
        fix=fix,
    )
