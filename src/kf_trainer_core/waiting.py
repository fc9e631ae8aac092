"""Deciding when a wait is over — shared by the sync and async clients, the Airflow
trigger and the Prefect and KFP tasks."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from kf_trainer_core import names
from kf_trainer_core.errors import KFTrainerError
from kf_trainer_core.k8s.calls import Await, Emit, Program
from kf_trainer_core.ops import (
    TrainJobNotFoundError,
    explain_failure,
    get_object,
    job_pods,
    outputs_of,
)
from kf_trainer_core.status import (
    CREATION_FAILED_REASON,
    Failure,
    JobState,
    TrainJob,
    failing_pod,
    failure_of,
    job_state,
    to_trainjob,
)

if TYPE_CHECKING:
    from kf_trainer_core.informer import JobSubscription, Subscription


class TrainJobFailedError(KFTrainerError):
    """The job failed; ``failure`` says why (reason, step, pod, exit code, log tail)."""

    def __init__(self, job: TrainJob | None, failure: Failure) -> None:
        self.job = job
        self.failure = failure
        name = f"{job.namespace}/{job.name}" if job else "TrainJob"
        super().__init__(f"{name} failed: {failure.describe()}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.job, self.failure))


class TrainJobCreationFailedError(TrainJobFailedError):
    """The Trainer could not build the job's JobSet (a ``TrainJobResourcesCreationFailed``
    event): the job would stay pending forever."""


class TrainJobTimeoutError(KFTrainerError, TimeoutError):
    """The job did not reach the wanted state in time."""

    def __init__(
        self, message: str, job: TrainJob | None = None, failure: Failure | None = None
    ) -> None:
        self.job = job
        self.failure = failure
        super().__init__(message if failure is None else f"{message}\n{failure.describe()}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.args[0], self.job, self.failure))


class TrainJobDeletedError(KFTrainerError):
    """The job was deleted while being waited for."""


@dataclass(frozen=True)
class Verdict:
    """The end of a wait."""

    kind: Literal["reached", "failed", "creation-failed", "deleted", "startup-timeout", "timeout"]
    state: JobState | None = None
    message: str = ""


@dataclass(frozen=True)
class WaitGoal:
    """What a wait waits for."""

    name: str
    targets: frozenset[JobState]
    #: Fail when the job has not started running after this many seconds.
    startup_timeout: float | None = None

    @classmethod
    def of(
        cls,
        name: str,
        status: Iterable[str | JobState] | str | JobState,
        startup_timeout: float | None = None,
    ) -> WaitGoal:
        """The goal of a wait; a name that cannot be a TrainJob's is refused here,
        before the wait subscribes or reads anything."""
        names.require_job_name(name)
        wanted = [status] if isinstance(status, (str, JobState)) else list(status)
        try:
            targets = frozenset(JobState(s) for s in wanted)
        except ValueError:
            known = ", ".join(s.value for s in JobState)
            raise ValueError(
                f"unknown job status in {wanted!r}. Fix: use some of {known}."
            ) from None
        return cls(name, targets, startup_timeout)

    def judge(
        self,
        obj: Mapping[str, Any] | None,
        events: Iterable[Mapping[str, Any]] = (),
        elapsed: float = 0.0,
    ) -> Verdict | None:
        """The verdict on the latest object and creation-failure events, or ``None``
        to keep waiting."""
        if obj is None:
            return Verdict("deleted", message=f"TrainJob {self.name} was deleted")
        state = job_state(obj)
        if state in self.targets:
            return Verdict("reached", state)
        if state is JobState.FAILED:
            return Verdict("failed", state)
        if state is JobState.COMPLETE:
            # Complete but not wanted (waiting for Running of a job that already ended).
            return Verdict("reached", state)
        created = (obj.get("metadata") or {}).get("creationTimestamp") or ""
        failures = [
            e
            for e in events
            if e.get("reason") == CREATION_FAILED_REASON
            and str(e.get("lastTimestamp") or e.get("eventTime") or e.get("firstTimestamp") or "9")
            >= str(created)
        ]
        if failures and state is JobState.CREATED:
            return Verdict("creation-failed", state, str(failures[-1].get("message") or ""))
        if (
            self.startup_timeout is not None
            and state in (JobState.CREATED,)
            and elapsed >= self.startup_timeout
        ):
            return Verdict(
                "startup-timeout",
                state,
                f"TrainJob {self.name} did not start within {self.startup_timeout:g}s",
            )
        return None


def wait_program(
    namespace: str,
    goal: WaitGoal,
    jobs: Subscription | JobSubscription,
    events: Subscription,
    waker: Any,
    *,
    timeout: float | None,
    polling_interval: float = 2.0,
) -> Program[tuple[Verdict, dict[str, Any]]]:
    """Wait on the shared informers until ``goal`` is judged; emit each new version of
    the job (for callbacks and progress). Polls by name only when the informer cannot
    serve (listing forbidden). ``jobs`` is a :class:`Subscription` or a
    :class:`JobSubscription` (which moves to a per-name watch for foreign jobs)."""
    start = time.monotonic()
    seen = False  # the job was observed at all
    in_cache = False  # the shared informer has held it: its absence now means deleted
    fetched_at: float | None = None
    last_version: str | None = None
    obj: dict[str, Any] | None = None
    while True:
        elapsed = time.monotonic() - start
        if jobs.unavailable:
            try:
                obj = yield from get_object(namespace, goal.name)
            except TrainJobNotFoundError:
                if not seen:
                    raise
                obj = None
        elif jobs.synced:
            cached = jobs.objects()
            if cached:
                obj, in_cache = cached[0], True
            elif in_cache:
                obj = None
            elif fetched_at is None or time.monotonic() - fetched_at >= polling_interval:
                # Not listed yet: created after the list (the watch will deliver it) or
                # absent (a wrong name fails here rather than waiting out the timeout).
                # Until the watch catches up, read by name now and then; a 404 after a
                # sighting means the job was deleted.
                fetched_at = time.monotonic()
                try:
                    obj = yield from get_object(namespace, goal.name)
                except TrainJobNotFoundError:
                    if not seen:
                        raise
                    obj = None
                if obj is not None:
                    # A job outside the shared informer's selector (not made by this
                    # suite) is followed by a watch on its name from here on.
                    jobs.track(obj)
        if obj is not None or seen:
            if obj is not None:
                seen = True
                version = str((obj.get("metadata") or {}).get("resourceVersion"))
                if version != last_version:
                    last_version = version
                    yield Emit(obj)
            verdict = goal.judge(obj, [] if events.unavailable else events.objects(), elapsed)
            if verdict is not None:
                return verdict, obj or {}
        remaining = None if timeout is None else timeout - elapsed
        if remaining is not None and remaining <= 0:
            return Verdict("timeout", job_state(obj) if obj else None), obj or {}
        step = remaining
        if jobs.unavailable or (seen and not in_cache):
            step = polling_interval if step is None else min(step, polling_interval)
        if goal.startup_timeout is not None and elapsed < goal.startup_timeout:
            left = goal.startup_timeout - elapsed + 0.01
            step = left if step is None else min(step, left)
        yield Await(waker, step)


def conclude(
    namespace: str, goal: WaitGoal, verdict: Verdict, obj: dict[str, Any], *, timeout: float | None
) -> Program[tuple[TrainJob, Any]]:
    """Turn a verdict into the job and its result, or the error that explains it."""
    if verdict.kind == "deleted":
        raise TrainJobDeletedError(f"TrainJob {namespace}/{goal.name} was deleted while waiting")
    if verdict.kind == "reached":
        reached, result, _ = yield from outputs_of(namespace, obj)
        return reached, result
    if verdict.kind == "creation-failed":
        failure = Failure(reason=CREATION_FAILED_REASON, message=verdict.message)
        raise TrainJobCreationFailedError(to_trainjob(obj), failure)
    if verdict.kind == "failed":
        failed, _, pods = yield from outputs_of(namespace, obj)
        failure = yield from explain_failure(namespace, obj, pods)
        raise TrainJobFailedError(failed, failure)
    # Timeouts: say what the job was waiting on (image pulls, unschedulable pods...).
    job: TrainJob | None = None
    stuck: Failure | None = None
    if obj:
        pods = yield from job_pods(namespace, goal.name)
        job = to_trainjob(obj, pods)
        if failing_pod(pods) is not None:
            stuck = failure_of(obj, pods)
    wanted = ", ".join(sorted(s.value for s in goal.targets))
    if verdict.kind == "startup-timeout":
        raise TrainJobTimeoutError(verdict.message, job, stuck)
    state = job.status.value if job else "unknown"
    raise TrainJobTimeoutError(
        f"TrainJob {namespace}/{goal.name} did not reach {wanted} within {timeout:g}s "
        f"(it is {state})",
        job,
        stuck,
    )
