"""Deciding when a wait is over — shared by the sync and async clients, the Airflow
trigger and the Prefect and KFP tasks."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import time
from collections.abc import Awaitable, Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from kf_trainer_core.base import untrusted
from kf_trainer_core.base.aio import deadline
from kf_trainer_core.base.quoting import shown
from kf_trainer_core.cluster.events import event_last_seen, refused_pods
from kf_trainer_core.cluster.kueue import QueueStatus, QueueTracker, queue_name
from kf_trainer_core.cluster.status import (
    CREATION_FAILED_REASON,
    Failure,
    JobState,
    Progress,
    TrainJob,
    failing_pod,
    failure_of,
    job_state,
    reports_in_log,
    to_trainjob,
    with_trainer_status,
)
from kf_trainer_core.cluster.stuck import restarting_steps, waiting_of
from kf_trainer_core.cluster.waiting import Hint, Waiting, plain_hint, timeout_lines
from kf_trainer_core.errors import (
    FailureClass,
    TrainJobAdmissionTimeoutError,
    TrainJobCreationFailedError,
    TrainJobDeletedError,
    TrainJobNotAdmissibleError,
    TrainJobTimeoutError,
    failed_error,
)
from kf_trainer_core.fields import names
from kf_trainer_core.k8s.api import Api
from kf_trainer_core.k8s.calls import Get
from kf_trainer_core.k8s.errors import ApiError
from kf_trainer_core.k8s.resources import TRAINJOBS
from kf_trainer_core.programs.logs import with_log_progress
from kf_trainer_core.programs.outcome import Outcome, explain_failure, outputs_of
from kf_trainer_core.programs.reads import (
    explained,
    get_events,
    job_not_found,
    job_pods,
    jobset_limits,
)
from kf_trainer_core.programs.wakers import Waker

#: How a wait runs a read shared under a key with the other waits on the same job
#: (:meth:`SharedReads.run <kf_trainer_core.programs.shared_reads.SharedReads.run>`).
Share = Callable[[Hashable, Callable[[], Awaitable[Any]]], Awaitable[Any]]

if TYPE_CHECKING:
    from kf_trainer_core.programs.informer import JobSubscription, Subscription


def _created_at(obj: Mapping[str, Any]) -> datetime | None:
    return untrusted.timestamp((obj.get("metadata") or {}).get("creationTimestamp"))


#: How long the Trainer must go on failing to build a job's JobSet before a wait gives up
#: on it. The Trainer retries a failed build with backoff, and some failures pass: a job
#: created under the name of one still being collected meets that job's runtime snapshot
#: ConfigMap, fails once, and builds when the garbage collector has removed it (see
#: docs/safety.md). A lasting failure (a runtime patch the JobSet refuses) repeats.
CREATION_GRACE = 10.0


def creation_failures(
    obj: Mapping[str, Any], events: Iterable[Mapping[str, Any]]
) -> list[Mapping[str, Any]]:
    """The ``TrainJobResourcesCreationFailed`` events of this incarnation of the job
    (an older job of the same name left events that predate this one)."""
    created = _created_at(obj)
    return [
        e
        for e in events
        if e.get("reason") == CREATION_FAILED_REASON
        and (created is None or (seen := event_last_seen(e)) is None or seen >= created)
    ]


def _persistent(
    obj: Mapping[str, Any], failures: list[Mapping[str, Any]], failing_for: float | None
) -> bool:
    """Whether the build failures have lasted :data:`CREATION_GRACE`: as this wait saw
    them (its own clock), or as the events say (the recorder's clock: the last repeat
    against the job's creation; both stamps come from the cluster, not from here)."""
    if failing_for is not None and failing_for >= CREATION_GRACE:
        return True
    created = _created_at(obj)
    last = max((t for e in failures if (t := event_last_seen(e)) is not None), default=None)
    return (
        created is not None
        and last is not None
        and (last - created).total_seconds() >= CREATION_GRACE
    )


@dataclass(frozen=True)
class Verdict:
    """The end of a wait."""

    kind: Literal[
        "reached",
        "failed",
        "creation-failed",
        "deleted",
        "startup-timeout",
        "admission-timeout",
        "never-admissible",
        "timeout",
        "handoff",
    ]
    state: JobState | None = None
    message: str = ""


@dataclass(frozen=True)
class WaitGoal:
    """What a wait waits for."""

    name: str
    targets: frozenset[JobState]
    #: Fail when the job has not started running after this many seconds.
    startup_timeout: float | None = None
    #: Fail when Kueue has not admitted the job (queue-labelled, held suspended) after
    #: this many seconds. Counted apart from ``startup_timeout``, which a queued job's
    #: wait does not use up.
    admission_timeout: float | None = None

    @classmethod
    def of(
        cls,
        name: str,
        status: Iterable[str | JobState] | str | JobState,
        startup_timeout: float | None = None,
        admission_timeout: float | None = None,
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
                f"unknown job status in {shown(wanted)}. Fix: use some of {known}."
            ) from None
        return cls(name, targets, startup_timeout, admission_timeout)

    def judge(
        self,
        obj: Mapping[str, Any] | None,
        events: Iterable[Mapping[str, Any]] = (),
        elapsed: float = 0.0,
        queue: QueueStatus | None = None,
        failing_for: float | None = None,
    ) -> Verdict | None:
        """The verdict on the latest object and creation-failure events, or ``None``
        to keep waiting. ``failing_for``: how long this wait has seen the job fail to be
        built (a build failure is final once it lasts :data:`CREATION_GRACE`)."""
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
        failures = creation_failures(obj, events)
        if failures and state is JobState.CREATED and _persistent(obj, failures, failing_for):
            return Verdict("creation-failed", state, str(failures[-1].get("message") or ""))
        if (
            queue is not None
            and queue.never_admissible
            and state in (JobState.SUSPENDED, JobState.CREATED)
        ):
            # Kueue says it never fits its queue: no timeout need run out first.
            return Verdict("never-admissible", state, queue.never_admitted_text())
        if (
            self.admission_timeout is not None
            and elapsed >= self.admission_timeout
            and queue_name(obj) is not None
            and not (queue is not None and queue.admitted)
            and (state is JobState.SUSPENDED or (state is JobState.CREATED and queue is not None))
        ):
            waited = f"; {queue.line()}" if queue is not None else ""
            return Verdict(
                "admission-timeout",
                state,
                f"TrainJob {self.name} was not admitted by Kueue (queue {queue_name(obj)}) "
                f"within {self.admission_timeout:g}s{waited}",
            )
        if (
            self.startup_timeout is not None
            and state is JobState.CREATED
            and elapsed >= self.startup_timeout
        ):
            return Verdict(
                "startup-timeout",
                state,
                f"TrainJob {self.name} did not start within {self.startup_timeout:g}s",
            )
        return None


def never_admitted(queue: QueueStatus) -> Failure:
    """The failure of a job Kueue can never admit (:attr:`QueueStatus.never_admissible`):
    class ``capacity``, Kueue's reason, the request, the maximum and the fix."""
    beyond = any(limit.maximum is not None for limit in queue.never_fits)
    return Failure(
        reason="ExceedsMaxQuota" if beyond else "NoMatchingFlavor",
        message=queue.never_admitted_text(),
        failure_class=FailureClass.CAPACITY,
        classified_by=(
            "Kueue: the request exceeds the queue's maximum capacity"
            if beyond
            else "Kueue: no flavor of the queue can fit it"
        ),
    )


async def judged(
    wait: JobWait,
    timeout: float | None,
    handoff: Callable[[Mapping[str, Any], QueueStatus | None], bool] | None = None,
) -> tuple[Verdict, dict[str, Any]]:
    """The wait itself: a deadline around — read the job, look at it, sleep on the
    waker until the informers have news or an alarm of the wait rings — ending in the
    verdict and the job as last read (:meth:`JobWait.timed_out` when the deadline
    passes). ``handoff`` ends it with the verdict ``handoff`` when it holds for the job
    and its queue status (a MultiKueue job admitted on a worker: the caller follows it
    there)."""
    tracker = wait.tracker
    try:
        async with deadline(timeout):
            while True:
                await wait.read()
                if (verdict := await wait.look()) is not None:
                    return verdict, wait.obj or {}
                queue = tracker.status if tracker else None
                if handoff is not None and wait.obj is not None and handoff(wait.obj, queue):
                    return Verdict("handoff", job_state(wait.obj)), wait.obj
                await wait.waker.wait(None)
    except (TimeoutError, asyncio.TimeoutError):
        return wait.timed_out()
    finally:
        wait.alarms.cancel()


class _Alarms:
    """Named alarms that wake one waker: setting one replaces the one of that name."""

    def __init__(self, waker: Waker) -> None:
        self._waker = waker
        self._handles: dict[str, asyncio.TimerHandle] = {}

    def set(self, name: str, seconds: float | None) -> None:
        """Wake the waker ``seconds`` from now (``None``: not at all) for ``name``."""
        old = self._handles.pop(name, None)
        if old is not None:
            old.cancel()
        if seconds is not None:
            loop = asyncio.get_running_loop()
            self._handles[name] = loop.call_later(max(0.0, seconds), self._waker.notify)

    def cancel(self) -> None:
        for handle in self._handles.values():
            handle.cancel()
        self._handles.clear()


class JobWait:
    """One wait's state between looks. :func:`judged` runs the wait — a deadline
    around: :meth:`read`, :meth:`look`, sleep on the ``waker`` — and takes
    :meth:`timed_out` when the deadline passes; this class reads and judges.

    The informers wake the waker with news, and each concern that needs a look at a
    later time sets an alarm that wakes it then (:class:`_Alarms`): the goal's startup
    and admission timeouts, the polling of a job the informer cannot serve (listing
    forbidden; read by name every ``polling_interval`` seconds), the next read of its
    log, the Trainer's grace for a failing build, the queue's refresh.

    ``jobs`` is a :class:`Subscription` or a :class:`JobSubscription` (which moves to a
    per-name watch for foreign jobs). With a ``tracker``, a job queued by Kueue also has
    its Workload read (see :class:`~kf_trainer_core.cluster.kueue.QueueTracker`) and is
    handed on again when what it waits for changes. A running job whose function reports
    in its log, on a cluster without a status server (no ``trainerStatus``), has its log
    read every ``log_every`` seconds of running (``None``: never); what it reports is
    handed on as the job's ``trainerStatus``. Each new version of the job goes to
    ``sink`` (callbacks, progress) as :class:`Observed`. With ``explain_restarts``
    (someone watches), the pods of a job that does not run are read for what holds it
    up (:attr:`Observed.waiting`; see :class:`_Holdups`)."""

    def __init__(
        self,
        api: Api,
        namespace: str,
        goal: WaitGoal,
        jobs: Subscription | JobSubscription,
        events: Subscription,
        waker: Waker,
        *,
        polling_interval: float = 2.0,
        tracker: QueueTracker | None = None,
        log_every: float | None = None,
        sink: Callable[[Observed], None] | None = None,
        explain_restarts: bool = False,
    ) -> None:
        self.api, self.namespace, self.goal = api, namespace, goal
        self.jobs, self.events, self.tracker = jobs, events, tracker
        self.polling_interval = polling_interval
        self.log_every, self.sink = log_every, sink
        self.holdups = _Holdups(api, namespace, goal.name, explain_restarts)
        self.waker, self.alarms = waker, _Alarms(waker)
        self.start = time.monotonic()
        self.obj: dict[str, Any] | None = None
        self.seen = False  # the job was observed at all
        self.in_cache = False  # the shared informer has held it: its absence means deleted
        self.fetched_at: float | None = None
        self.log_status: dict[str, Any] | None = None
        self.log_due: float | None = None  # when the log is read next
        self.last_shown: tuple[str, str] | None = None
        self.final_read = False  # the queue read once more before an admission timeout
        self.failing_since: float | None = None  # when this wait first saw the build fail
        self.seen_events: list[dict[str, Any]] = []
        for name, seconds in (
            ("startup", goal.startup_timeout),
            ("admission", goal.admission_timeout),
        ):
            self.alarms.set(name, None if seconds is None else seconds + 0.01)

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.start

    async def look(self) -> Verdict | None:
        """Look at the job as :meth:`read` left it: hand on what is new, judge it."""
        if self.obj is None and not self.seen:
            return None
        if self.obj is not None:
            self.seen = True
            await self._observe(self.obj)
        self.seen_events = [] if self.events.unavailable else self.events.objects()
        if self.obj is not None and creation_failures(self.obj, self.seen_events):
            if self.failing_since is None:
                # A build failure becomes final at the grace even if nothing else changes.
                self.failing_since = time.monotonic()
                self.alarms.set("creation", CREATION_GRACE + 0.01)
        else:
            self.failing_since = None
        return self.goal.judge(
            self.obj,
            self.seen_events,
            self.elapsed,
            self.tracker.status if self.tracker else None,
            failing_for=self._failing_for(),
        )

    def _failing_for(self) -> float | None:
        return None if self.failing_since is None else time.monotonic() - self.failing_since

    async def read(self) -> None:
        """The job from the informer's cache, or read by name where it cannot serve
        (listing forbidden), or until the watch delivers a job created after the list.
        Not listed yet, the job was created after the list (the watch will deliver it)
        or is absent (a wrong name fails here rather than waiting out the timeout):
        until the watch catches up, it is read by name now and then; a 404 after a
        sighting means the job was deleted."""
        jobs = self.jobs
        if not jobs.unavailable:
            if not jobs.synced:
                return
            cached = jobs.objects()
            if cached:
                self.obj, self.in_cache = cached[0], True
                self.alarms.set("poll", None)
                return
            if self.in_cache:
                self.obj = None
                return
            now = time.monotonic()
            if self.fetched_at is not None and now - self.fetched_at < self.polling_interval:
                return
            self.fetched_at = now
        # The read by name is made here, not through reads.get_object: a wait's path
        # to the wire stays short enough to read in a traceback (docs/architecture.md).
        try:
            self.obj = await self.api(Get(TRAINJOBS, self.namespace, self.goal.name))
        except ApiError as err:
            if not err.not_found:
                raise
            if not self.seen:  # before any sighting, a 404 is an error, not a deletion
                raise await job_not_found(self.api, self.namespace, self.goal.name) from None
            self.obj = None
        if self.obj is not None and not jobs.unavailable:
            # A job outside the shared informer's selector (not made by this suite)
            # is followed by a watch on its name from here on.
            jobs.track(self.obj)
        self.alarms.set("poll", self.polling_interval)

    async def _observe(self, obj: dict[str, Any]) -> None:
        """Read what goes with a new look at the job (its queue, its log's progress,
        what holds it up) and hand it on when it changed."""
        tracker, goal = self.tracker, self.goal
        news = False
        expiring = (
            goal.admission_timeout is not None
            and self.elapsed >= goal.admission_timeout
            and not self.final_read
        )
        if tracker is not None and (tracker.due(obj) or expiring):
            # Before an admission timeout, read the queue once more: the error then
            # says what it waits for now.
            self.final_read = self.final_read or expiring
            news = await tracker.refresh(self.api, obj)
        if tracker is not None:
            refresh = tracker.wake_in(obj)  # a queued job's position changes on its own
            self.alarms.set("queue", None if refresh is None else max(refresh, 0.05))
        if self.log_every is not None and _reads_log_progress(obj):
            now = time.monotonic()
            # The first read comes at once: a watcher sees the job's progress as soon as
            # it runs, not 0 % for a whole interval and then a jump.
            if self.log_due is None or now >= self.log_due:
                self.log_due = now + self.log_every
                self.alarms.set("log", self.log_every)
                read = await with_log_progress(self.api, self.namespace, obj)
                status = (read.get("status") or {}).get("trainerStatus")
                self.log_status = status or self.log_status
        else:
            self.alarms.set("log", None)
        shown = obj
        if self.log_status is not None and not (obj.get("status") or {}).get("trainerStatus"):
            shown = with_trainer_status(obj, self.log_status)
        version = str((obj.get("metadata") or {}).get("resourceVersion"))
        key = (version, json.dumps(self.log_status, sort_keys=True))
        changed = news or key != self.last_shown
        look = self.holdups.due(obj, changed)
        self.alarms.set("holdups", self.holdups.wake_in())
        if changed or look:
            self.last_shown = key
            waiting = (await self.holdups.look(obj)) if look else None
            if self.sink is not None:
                self.sink(Observed(shown, tracker.status if tracker else None, waiting))

    def timed_out(self) -> tuple[Verdict, dict[str, Any]]:
        """The verdict when the wait's time is up."""
        obj = self.obj
        if obj is not None and self.failing_since is not None:
            # Out of time while the build fails: that failure is the better answer.
            final = self.goal.judge(obj, self.seen_events, self.elapsed, failing_for=CREATION_GRACE)
            if final is not None:
                return final, obj
        return Verdict("timeout", job_state(obj) if obj else None), obj or {}


#: A job not running this long after its creation has its pods read by a wait that
#: explains what holds jobs up (see :class:`_Holdups`): a pod may not be schedulable, or
#: a step may be restarting already.
SETTLED_SECONDS = 5.0


class _Holdups:
    """When a watched wait reads a job's pods for what holds it up (a step failing and
    being retried, a pod that cannot start), so that a watcher reads ``Restarting`` or
    ``Pending`` with the reason rather than Running and Created by turns: once, when the
    job has not run :data:`SETTLED_SECONDS` after its creation; on each new version of a
    job that ran and runs no more; and on each new version while something holds it
    up. A job that starts and runs costs no read."""

    def __init__(self, api: Api, namespace: str, name: str, enabled: bool) -> None:
        self.api, self.namespace, self.name, self.enabled = api, namespace, name, enabled
        self.ran = False  # seen running
        self.held = False  # the last look found something holding the job up
        self.looked = False
        self.look_at: float | None = None  # when a job that has not run is looked at
        self.limits: dict[str, int] | None = None  # the Jobs' backoffLimits, read once

    def due(self, obj: Mapping[str, Any], changed: bool) -> bool:
        """Whether to read the pods now (``changed``: a new version of the job)."""
        if not self.enabled:
            return False
        state = job_state(obj)
        self.ran = self.ran or state is JobState.RUNNING
        if state not in (JobState.CREATED, JobState.RUNNING):
            self.look_at = None
            return False
        if self.look_at is None:
            created = _created_at(obj)
            age = (datetime.now(created.tzinfo) - created).total_seconds() if created else 0.0
            self.look_at = time.monotonic() + max(0.0, SETTLED_SECONDS - age)
        if changed and (self.held or (self.ran and state is JobState.CREATED)):
            return True
        return state is JobState.CREATED and not self.looked and time.monotonic() >= self.look_at

    async def look(self, obj: Mapping[str, Any]) -> Waiting | None:
        """Read the pods (and, for a restart, the JobSet's limits, once)."""
        self.looked = True
        pods = await job_pods(self.api, self.namespace, self.name)
        if self.limits is None and restarting_steps(pods):
            self.limits = await jobset_limits(self.api, self.namespace, dict(obj))
        waiting = waiting_of(obj, pods, limits=self.limits)
        self.held = waiting is not None
        return waiting

    def wake_in(self) -> float | None:
        """Seconds until the first look at a job that has not run (``None``: none due)."""
        if not self.enabled or self.looked or self.ran or self.look_at is None:
            return None
        return max(0.0, self.look_at - time.monotonic())


@dataclass(frozen=True)
class Observed:
    """What a wait emits: a new version of the job and, for a job queued by Kueue, its
    latest queue status."""

    obj: dict[str, Any]
    queue: QueueStatus | None = None
    #: What holds the job up, when the wait read its pods (see ``explain_restarts``).
    waiting: Waiting | None = None


#: While a job runs, its log is read this often for the progress its function prints,
#: when the cluster has no status server (only jobs whose function reports).
LOG_PROGRESS_INTERVAL = 10.0


def job_emitter(
    callbacks: Iterable[Callable[[TrainJob], None]] | None,
    on_progress: Callable[[Progress], None] | None = None,
    log_progress_interval: float | None = LOG_PROGRESS_INTERVAL,
) -> tuple[Callable[[Observed], None] | None, float | None]:
    """What a wait does with each version of the job that :class:`JobWait` emits,
    and how often it reads the log for progress: every ``callbacks`` gets the
    :class:`TrainJob`; ``on_progress`` gets its :class:`Progress` when what it says
    changed (not merely its time stamp). A wait nobody watches reads no log while the
    job runs (the final metrics are read once at the end all the same)."""
    cbs = list(callbacks or [])
    if not cbs and on_progress is None:
        return None, None
    last: Progress | None = None

    def news(seen: Progress) -> bool:
        now = seen.model_copy(update={"last_updated": None})
        if last is None:
            return True
        before = last.model_copy(update={"last_updated": None})
        if now.estimated_remaining_seconds is None:
            # A job that stops running loses its time left (status.progress): the same
            # report again, not a new state to show a second time.
            before = before.model_copy(update={"estimated_remaining_seconds": None})
        return now != before

    def emit(update: Observed) -> None:
        nonlocal last
        job = to_trainjob(update.obj, queue=update.queue)
        if update.waiting is not None:
            job = job.model_copy(update={"waiting": update.waiting})
        for cb in cbs:
            cb(job)
        seen = job.progress
        if on_progress is not None and seen is not None and news(seen):
            last = seen
            on_progress(seen)

    return emit, log_progress_interval


def _reads_log_progress(obj: Mapping[str, Any]) -> bool:
    return (
        job_state(obj) is JobState.RUNNING
        and reports_in_log(obj)
        and not (obj.get("status") or {}).get("trainerStatus")
    )


async def conclude(
    api: Api,
    namespace: str,
    goal: WaitGoal,
    verdict: Verdict,
    obj: dict[str, Any],
    *,
    timeout: float | None,
    queue: QueueStatus | None = None,
    pods_of: Callable[[str], Awaitable[list[dict[str, Any]]]] | None = None,
    share: Share | None = None,
    hint: Hint | None = None,
) -> Outcome:
    """Turn a verdict into the finished job and its result (a result that cannot be
    read is :attr:`Outcome.missing`, never an error), or the error that explains it.
    ``queue``: the job's last queue status, kept on the job and in timeout messages;
    ``pods_of``: how a finished job's pods are read (see :func:`outputs_of`);
    ``share``: how the waits on the same version of a finished job share one reading
    of its outcome (see :mod:`~kf_trainer_core.programs.shared_reads`); ``hint``: how
    the commands a timeout prints reach the job (default: ``kf-trainer -n NAMESPACE``)."""
    if verdict.kind == "deleted":
        raise TrainJobDeletedError(f"TrainJob {namespace}/{goal.name} was deleted while waiting")
    meta = obj.get("metadata") or {}
    # The same version of the same job (a job of the same name made again is another).
    key = (goal.name, meta.get("uid"), meta.get("resourceVersion"), verdict.kind)
    if verdict.kind == "reached":
        read_outcome = functools.partial(outputs_of, api, namespace, obj, pods_of=pods_of)
        done = await (share(key, read_outcome) if share else read_outcome())
        if queue is None:
            return done
        return dataclasses.replace(done, job=done.job.model_copy(update={"queue": queue}))
    if verdict.kind == "never-admissible" and queue is not None:
        raise TrainJobNotAdmissibleError(to_trainjob(obj, queue=queue), never_admitted(queue))
    if verdict.kind == "creation-failed":
        failure = Failure(
            reason=CREATION_FAILED_REASON,
            message=verdict.message,
            failure_class=FailureClass.CONFIGURATION,
            classified_by="the Trainer could not build the JobSet",
        )
        raise TrainJobCreationFailedError(to_trainjob(obj), failure)
    if verdict.kind == "failed":

        async def read_failure() -> tuple[Outcome, Failure]:
            ended = await outputs_of(api, namespace, obj, pods_of=pods_of)
            failure = await explain_failure(api, namespace, obj, ended.pods, queue=queue)
            return ended, failure

        # A queued job's failure names its own wait's queue status: not shared.
        shared = share if queue is None else None
        ended, failure = await (shared(key, read_failure) if shared else read_failure())
        failed = ended.job
        if queue is not None:
            failed = failed.model_copy(update={"queue": queue})
        raise failed_error(failed, failure)
    # Timeouts: say what holds the job up (a restarting step, an unschedulable pod, an
    # image that cannot be pulled, pods the API server refuses), the fix of its class,
    # and what the wait leaves behind.
    job: TrainJob | None = None
    stuck: Failure | None = None
    if obj:
        pods = await job_pods(api, namespace, goal.name)
        job = to_trainjob(obj, pods, queue=queue)
        refused = None
        if failing_pod(pods) is not None:
            stuck = failure_of(obj, pods)
        else:
            # No pod says why: maybe the API server refuses to create them (the Job
            # controller's FailedCreate events; read only now, on the way out).
            events = await get_events(api, namespace, goal.name, pods, obj)
            stuck = refused = refused_pods(events, pods, goal.name)
        job = await explained(api, namespace, job, obj, pods, refused=refused)
    waiting = job.waiting if job is not None else None
    hint = hint or plain_hint(namespace)
    wanted = ", ".join(sorted(s.value for s in goal.targets))
    if verdict.kind in ("admission-timeout", "startup-timeout"):
        head = verdict.message
    else:
        head = f"TrainJob {namespace}/{goal.name} did not reach {wanted} within {timeout:g}s"
    if waiting is None:
        queued = f"; {queue.line()}" if queue is not None and queue.waiting else ""
        if job is not None and verdict.kind == "timeout":
            head += f" (it is {job.display_status}{queued})"
    lines, fix = timeout_lines(
        head,
        waiting,
        namespace=namespace,
        name=goal.name,
        state=job.display_status if job is not None else None,
        hint=hint,
    )
    if verdict.kind == "admission-timeout":
        raise TrainJobAdmissionTimeoutError(
            verdict.message, job, stuck, queue, lines=lines, waiting=waiting, fix=fix
        )
    raise TrainJobTimeoutError(head, job, stuck, lines=lines, waiting=waiting, fix=fix)
