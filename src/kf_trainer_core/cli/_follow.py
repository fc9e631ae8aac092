"""Following a job to its end: a live progress bar on a terminal (fed by the job's
state and the ``status.trainerStatus`` the training code reports), one line per change
otherwise."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import click

from kf_trainer_core.base import untrusted
from kf_trainer_core.base.hints import keeps_running
from kf_trainer_core.cli._errors import CliError, Exit
from kf_trainer_core.cli._output import duration, is_terminal
from kf_trainer_core.cli._where import hint
from kf_trainer_core.cluster.results import ResultMissing
from kf_trainer_core.cluster.status import JobState, TrainJob
from kf_trainer_core.cluster.waiting import Waiting


def _metrics(job: TrainJob) -> str:
    if job.progress is None or not job.progress.metrics:
        return ""
    shown = " ".join(f"{k}={v}" for k, v in sorted(job.progress.metrics.items()))
    return untrusted.line(shown)


class Tracker:
    """Shows each update of a job; a context manager (the bar ends with the block)."""

    def __init__(self, name: str, *, live: bool | None = None) -> None:
        self.name = name
        self.live = is_terminal() if live is None else live
        self._last: tuple[Any, ...] | None = None
        self._held: tuple[str | None, Waiting] | None = None
        self._progress: Any = None
        self._task: Any = None

    def __enter__(self) -> Tracker:
        if self.live:
            from rich.progress import (
                BarColumn,
                Progress,
                TaskProgressColumn,
                TextColumn,
                TimeElapsedColumn,
            )

            # The metrics are the job's own words: text, never rich markup (a metric
            # named ``loss[/x]`` is a name, not a closing tag).
            self._progress = Progress(
                TextColumn("[bold]{task.fields[job]}[/] {task.fields[state]:<9}"),
                BarColumn(),
                TaskProgressColumn(),
                TimeElapsedColumn(),
                TextColumn("{task.fields[metrics]}", markup=False),
                transient=False,
            )
            self._progress.start()
            self._task = self._progress.add_task(
                # No total until the job's first report: a pulse, not "0 %".
                self.name,
                total=None,
                job=self.name,
                state="…",
                metrics="",
            )
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()

    def update(self, job: TrainJob) -> None:
        """Show ``job``'s state and progress if they changed."""
        if job.waiting is None and self._held is not None and self._held[0] == job.resource_version:
            # The same version of the job, read without its pods (a wait's first sight):
            # what the pods said of it still stands.
            job = job.model_copy(update={"waiting": self._held[1]})
        self._held = (job.resource_version, job.waiting) if job.waiting is not None else None
        pct = job.percent_done
        metrics = _metrics(job)
        # A job Kueue holds says why it waits (quota, position) instead of a bare state.
        if job.queue is not None and not job.queue.admitted:
            metrics = job.queue.line()
        # A step failing and being retried says so, instead of Running and Created by
        # turns.
        state = job.display_status
        if job.waiting is not None:
            metrics = job.waiting.reason
        key = (state, pct, metrics)
        if key == self._last:
            return
        self._last = key
        if self._progress is not None:
            self._progress.update(
                self._task,
                total=None if pct is None else 100,  # None: unchanged
                completed=pct or 0,
                state=state,
                metrics=metrics,
            )
            return
        stamp = datetime.now().strftime("%H:%M:%S")
        parts = [stamp, job.name, state]
        if pct is not None:
            parts.append(f"{pct}%")
        if pct != 100 and job.progress and job.progress.estimated_remaining_seconds is not None:
            parts.append(f"eta={job.progress.estimated_remaining_seconds}s")
        if metrics:
            parts.append(metrics)
        click.echo(" ".join(parts))


def interrupted(ctx: click.Context, name: str, namespace: str) -> CliError:
    """The error of a Ctrl-C while following a job: the job keeps running (only the
    command stopped), and the two commands that stop it or follow it again."""
    stop = hint(ctx, "jobs", "cancel", name, namespace=namespace)
    again = hint(ctx, "jobs", "wait", name, namespace=namespace)
    return CliError(keeps_running(namespace, name, stop, again), Exit.INTERRUPTED)


def finished(job: TrainJob, result: Any, missing: ResultMissing | None = None) -> None:
    """The closing line of a successful wait or run. A result that cannot be read is
    said as such (``result: unavailable``, the reason on stderr): the job succeeded,
    so the command does too, but a script must not read ``null`` as its result."""
    took = duration(job.creation_timestamp, job.completion_timestamp)
    click.echo(f"{job.namespace}/{job.name}: {job.status.value} in {took}")
    if job.status is JobState.COMPLETE:
        if missing is not None:
            click.echo("result: unavailable")
            click.echo(f"[kf-trainer] {untrusted.line(missing.message)}", err=True)
        else:
            # JSON escapes control characters; the length is the job's to choose: capped.
            click.echo(f"result: {untrusted.line(json.dumps(result, default=str))}")
