"""A task's TrainJob, for any orchestrator adapter: the spec it submits and the
identity that finds it again, the task-log lines of its life, and what a job that
ended badly shows.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar
from uuid import UUID

from kf_trainer_core.cluster.job_summary import job_summary, progress_description, steps_table
from kf_trainer_core.cluster.outputs import JobOutputs
from kf_trainer_core.cluster.status import TrainJob
from kf_trainer_core.spec import Name, TrainJobSpec
from kf_trainer_core.tasks.interruptions import Identity, Logger

__all__ = [
    "ProgressLines",
    "ProgressState",
    "announce",
    "bad_ending",
    "finished",
    "job_name_of",
    "log_sink",
    "outputs_rows",
    "spec_digest",
    "spec_of",
    "task_identity",
    "with_updates",
]

T = TypeVar("T")


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


def job_name_of(job: TrainJob | JobOutputs | str) -> str:
    """The name of a job given as a name, a ``TrainJob`` or ``JobOutputs``; an empty or
    invalid name is refused here, before the task makes any request."""
    from kf_trainer_core.fields.names import require_job_name

    return require_job_name(job if isinstance(job, str) else job.name, "job")


def log_sink(logger: Logger, job: str, step: str) -> Callable[[str], None]:
    """A log line consumer writing ``[job/step] line`` into ``logger``."""
    prefix = f"[{job}/{step}]"

    def sink(line: str) -> None:
        logger.info("%s %s", prefix, line)

    return sink


def announce(logger: Logger, job: TrainJob, created: bool, link: str | None) -> None:
    """``Submitted TrainJob ns/name (runtime, state)``, or ``Reattached to`` it, started by
    an earlier try of the task; the job's link last."""
    logger.info(
        "%s TrainJob %s/%s (runtime %s, %s)%s%s",
        "Submitted" if created else "Reattached to",
        job.namespace,
        job.name,
        job.runtime,
        job.status.value,
        "" if created else ", started by an earlier try of this task",
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
    if result.result_missing is not None:
        logger.warning("%s", result.result_missing.message)


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
        job_summary(job, failure=failure, note=note, link=link, fix=getattr(exc, "fix", None)),
        steps_table(list(job.steps), metrics),
    )


async def with_updates(
    start: Callable[[Callable[[TrainJob], None]], Awaitable[T]],
    observe: Callable[[TrainJob], bool],
    flush: Callable[[], Awaitable[None]],
) -> T:
    """Await the client call ``start(on_update)`` while pushing what ``observe`` finds
    new: callbacks run inside the client's wait and cannot await, so a companion task
    awaits ``flush()`` whenever there is news. When the call ends, a push in flight is
    let finish, never cancelled (see below)."""
    news = asyncio.Event()
    ended = False

    def on_update(update: TrainJob) -> None:
        if observe(update):
            news.set()

    async def pump() -> None:
        while True:
            await news.wait()
            news.clear()
            if ended:
                return
            await flush()

    pumping = asyncio.ensure_future(pump())
    try:
        return await start(on_update)
    finally:
        ended = True
        news.set()
        # A push is an HTTP request of the orchestrator's client (Prefect's, on httpx).
        # Cancelled while it waits for a pooled connection, such a request can leak
        # that connection for good (httpcore 1.0.9, encode/httpcore#1093): a hundred
        # tasks whose waits ended together left Prefect's client none, and each task's
        # last artifact then waited for one forever. Shielded: a second cancellation of
        # this task leaves the push to finish on its own.
        await asyncio.shield(pumping)


class ProgressLines:
    """A wait's ``callbacks=`` entry that writes one line per change of the job's state,
    Kueue queue or reported progress into a task's log:
    ``TrainJob ns/name: Running; 42% done; about 2m 00s left; loss=0.41``.

    The watch delivers every new version of the job; most change nothing a person cares
    about, so repeated lines are dropped. Every adapter's task log reads the same."""

    def __init__(self, write: Callable[[str], None]) -> None:
        self._write = write
        self._last: tuple[Any, ...] | None = None

    def __call__(self, job: TrainJob) -> None:
        progress = job.progress
        # A job queued by Kueue: where it waits and why (not the elapsed time, which
        # changes on every read and would repeat the line).
        queue = job.queue if job.queue is not None and job.queue.waiting else None
        # A step failing and being retried, a pod that cannot start: the core's one
        # explanation, as the CLI shows it.
        state = job.waiting.line() if job.waiting is not None else job.status.value
        key = (
            state,
            progress.percentage if progress else None,
            tuple(sorted(progress.metrics.items())) if progress else (),
            (queue.position, queue.pending_message, len(queue.evictions)) if queue else None,
        )
        if key == self._last:
            return
        self._last = key
        parts = [
            f"TrainJob {job.namespace}/{job.name}: {state}",
            *(queue.summary() if queue else []),
            *job.progress_summary(),
        ]
        self._write("; ".join(parts))


@dataclass
class ProgressState:
    """The latest progress of a job seen (from any thread or callback) and what was
    pushed to a progress display; ``log`` warns once when a push fails."""

    artifact_id: UUID | None = None
    percentage: float = 0.0
    description: str = ""
    pushed: tuple[float, str] | None = None
    enabled: bool = True
    warned: bool = field(default=False)
    log: logging.Logger = field(default=logging.getLogger(__name__), repr=False)

    def observe(self, job: TrainJob) -> bool:
        """Record a job update; ``True`` if there is something new to push."""
        if job.percent_done is not None:
            self.percentage = float(max(0, min(100, job.percent_done)))
        self.description = progress_description(job)
        return self.pending()

    def pending(self) -> bool:
        """Whether there is progress not pushed yet."""
        return (
            self.enabled
            and self.artifact_id is not None
            and (self.percentage, self.description) != self.pushed
        )

    def failed(self, exc: Exception) -> None:
        """A push failed: warn once (progress is a view: a hiccup of the display's API
        must not fail the training)."""
        if not self.warned:
            self.log.warning("could not update the progress artifact: %s", exc)
            self.warned = True
