"""Waiting on one step of a TrainJob.

Orchestrators model a TrainJob's steps as their own nodes — the dataset initializer, the
model initializer, training — so a task may need to wait for ``dataset-initializer`` to
succeed or ``node-0`` to start rather than for the whole job. A step's state is its
newest pod's phase (``Pending``, ``Running``, ``Succeeded``, ``Failed``), which the
TrainJob object alone does not carry: :func:`await_step` wakes on the shared watch of the
job (one per namespace, as every other wait) and confirms with one read of the job's
pods, and also re-reads on a slow timer for pod changes that leave the job untouched.

Both clients' public API is all this module uses, so it works the same against a
cluster and the local backend.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from kf_trainer_core.base.quoting import shown
from kf_trainer_core.cluster.status import Failure, JobState, Step, TrainJob
from kf_trainer_core.errors import (
    StepFailedError,
    TrainJobCreationFailedError,
    TrainJobDeletedError,
    TrainJobFailedError,
    TrainJobNotAdmissibleError,
    TrainJobNotFoundError,
    TrainJobTimeoutError,
)
from kf_trainer_core.fields import checks, names

if TYPE_CHECKING:
    from kf_trainer_core.client import AsyncTrainerClient

#: The states a step can be in: the phase of its newest pod.
STEP_PHASES = ("Pending", "Running", "Succeeded", "Failed")
# A step that got further than the state waited for has passed through it.
_PROGRESS = {"Pending": 0, "Running": 1, "Succeeded": 2}

Judgement = Literal["reached", "failed", "missing", "waiting"]


@dataclass(frozen=True)
class StepGoal:
    """Wait for ``step`` to reach one of ``targets`` (pod phases)."""

    step: str
    targets: frozenset[str]

    @classmethod
    def of(cls, step: str, status: Iterable[str] | str = ("Succeeded",)) -> StepGoal:
        """Validate a step name and the wanted states; errors say what to write."""
        problem = checks.step_problem(step)
        if problem:
            raise ValueError(f"unknown step {shown(step)}. Fix: {problem.partition(checks.FIX)[2]}")
        wanted = [status] if isinstance(status, str) else list(status)
        bad = [s for s in wanted if s not in STEP_PHASES]
        if bad or not wanted:
            raise ValueError(
                f"unknown step status {shown(bad or wanted)}. Fix: use some of "
                f"{', '.join(STEP_PHASES)}."
            )
        return cls(step, frozenset(wanted))

    def judge(self, job: TrainJob) -> tuple[Judgement, Step | None]:
        """Whether the step is where it should be, has failed, will never get there
        (the job ended without it), or may still get there."""
        step = job.step(self.step)
        if step is not None and step.status is not None:
            if step.status in self.targets:
                return "reached", step
            progress = _PROGRESS.get(step.status)
            if progress is not None and any(_PROGRESS.get(t, 99) < progress for t in self.targets):
                return "reached", step  # waited for Running, and it already succeeded
            if step.status == "Failed":
                return "failed", step
        if job.status is JobState.FAILED:
            return "failed", step
        if job.status is JobState.COMPLETE:
            return "missing", step
        return "waiting", step

    def explain(self, job: TrainJob, verdict: Judgement, step: Step | None) -> str:
        """The message of the error for a ``failed`` or ``missing`` judgement."""
        wanted = " or ".join(sorted(self.targets))
        where = f"TrainJob {job.namespace}/{job.name}"
        if verdict == "missing" and step is None:
            known = ", ".join(s.name for s in job.steps) or "none"
            return (
                f"{where} ended ({job.status.value}) without a {self.step} step (it has: "
                f"{known}). Fix: wait for one of those steps, or check that the runtime "
                "and the job's initializers include this one."
            )
        state = step.status if step is not None else "not started"
        detail = ""
        if step is not None and (step.container_reason or step.exit_code is not None):
            detail = f" ({step.container_reason or 'exit'}"
            detail += f", exit code {step.exit_code})" if step.exit_code is not None else ")"
        return (
            f"{where} is {job.status.value}: step {self.step} is {state}{detail} and will "
            f"not become {wanted}."
        )


async def await_step(
    client: AsyncTrainerClient,
    name: str,
    goal: StepGoal,
    *,
    timeout: float | None = None,
    recheck_interval: float = 30.0,
    callbacks: Iterable[Callable[[TrainJob], None]] = (),
) -> tuple[TrainJob, Step]:
    """Wait until ``goal.step`` of job ``name`` reaches one of ``goal.targets``.

    Returns the job (with its steps) and the step. Raises :class:`StepFailedError`
    when the step fails or the job ends without it getting there,
    :class:`~kf_trainer_core.errors.TrainJobCreationFailedError` when the job can never
    start, :class:`~kf_trainer_core.errors.TrainJobNotAdmissibleError` when Kueue can
    never admit it, :class:`~kf_trainer_core.errors.TrainJobDeletedError` and
    :class:`~kf_trainer_core.errors.TrainJobTimeoutError`.
    """
    names.require_job_name(name)
    loop = asyncio.get_running_loop()
    start = loop.time()
    changed = asyncio.Event()
    extra = list(callbacks)

    def on_update(job: TrainJob) -> None:
        changed.set()
        for cb in extra:
            cb(job)

    # The watcher and the reads run concurrently on the task's one client.
    watcher = asyncio.create_task(
        client.wait(name, ("Complete", "Failed"), timeout=None, callbacks=[on_update]),
        name=f"kf-step-watch-{name}",
    )
    try:
        while True:
            changed.clear()
            try:
                job = await client.get_job(name)
            except TrainJobNotFoundError:
                raise TrainJobDeletedError(
                    f"TrainJob {client.namespace}/{name} was deleted while waiting"
                ) from None
            verdict, step = goal.judge(job)
            if verdict == "reached":
                assert step is not None
                return job, step
            if verdict != "waiting":
                failure = _watch_failure(watcher)
                if failure is None and verdict == "failed":
                    # The step's pod may fail before the job does: explain from the pod.
                    failure = await client.explain_failure(name)
                raise StepFailedError(goal.explain(job, verdict, step), job, failure)
            if watcher.done():
                error = watcher.exception()
                if isinstance(
                    error,
                    (TrainJobCreationFailedError, TrainJobNotAdmissibleError, TrainJobDeletedError),
                ):
                    raise error  # the job will never run (or is gone): no step will
                if error is not None and not isinstance(error, TrainJobFailedError):
                    raise error
                # The job ended: the next read is conclusive. Pod phases can lag the
                # job's condition for a moment, so read again before judging.
                await asyncio.sleep(min(1.0, recheck_interval))
                continue
            elapsed = loop.time() - start
            if timeout is not None and elapsed >= timeout:
                raise _timed_out(client, name, goal, job, step, timeout)
            pause = (
                recheck_interval if timeout is None else min(recheck_interval, timeout - elapsed)
            )
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(_first(changed.wait(), watcher), max(pause, 0.01))
    finally:
        watcher.cancel()
        with contextlib.suppress(BaseException):
            await watcher


def _timed_out(
    client: AsyncTrainerClient,
    name: str,
    goal: StepGoal,
    job: TrainJob,
    step: Step | None,
    timeout: float,
) -> TrainJobTimeoutError:
    """A step wait that ran out of time, said as a job wait says it: what holds the job
    up (:attr:`TrainJob.waiting`), the fix of its class and what is left behind."""
    from kf_trainer_core.base.hints import command
    from kf_trainer_core.cluster.waiting import timeout_lines

    head = (
        f"step {goal.step} of TrainJob {client.namespace}/{name} did not become "
        f"{' or '.join(sorted(goal.targets))} within {timeout:g}s"
    )
    if job.waiting is None:
        head += f" (it is {step.status if step else 'not started'})"
    lines, fix = timeout_lines(
        head,
        job.waiting,
        namespace=client.namespace,
        name=name,
        state=job.display_status,
        hint=lambda args: command(client.config, args, namespace=client.namespace),
    )
    return TrainJobTimeoutError(head, job, lines=lines, waiting=job.waiting, fix=fix)


def _watch_failure(watcher: asyncio.Task[Any]) -> Failure | None:
    if watcher.done() and not watcher.cancelled():
        error = watcher.exception()
        if isinstance(error, TrainJobFailedError):
            failure: Failure = error.failure
            return failure
    return None


async def _first(event_wait: Coroutine[Any, Any, Any], task: asyncio.Task[Any]) -> None:
    """Return when the event is set or the task is done, whichever comes first."""
    waiter = asyncio.ensure_future(event_wait)
    try:
        await asyncio.wait({waiter, task}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
