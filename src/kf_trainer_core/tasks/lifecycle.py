"""One task run's hold on its TrainJob, the same for every orchestrator: what the
adapters translate their lifecycles into (Airflow's execute / defer / on_kill, Prefect's
task run, cancellation and retries, a KFP component's main and SIGTERM).

A :class:`TaskJob` is written once, async, on the public client
(:class:`~kf_trainer_core.client.AsyncTrainerClient`):

- :meth:`TaskJob.attach` — **submit or reattach**: one submit per task run, with the
  task's identity. A job an earlier try started is reattached; an attempt a killed try
  suspended (``on_kill="suspend"``) is resumed; after a failure a fresh attempt is
  submitted (``fresh_after_failure``); a fixed name (``name``, or a ``Name`` option)
  whose earlier job of this task failed is replaced, through ``delete_job``. A name
  the orchestrator kept (:meth:`TaskJob.remembered`, :meth:`TaskJob.reattach`) is taken
  up only while it leads to the task's job, neither being deleted nor another's.
- :meth:`TaskJob.wait` — **one wait** on the known name, its log followed beside it.
- :meth:`TaskJob.interrupted` / :meth:`TaskJob.holding` / :meth:`TaskJob.stop` — **the
  finish action on kill** (``on_kill``: delete, suspend or keep), on the job by its
  name, or by the task's identity when the task was stopped before it learnt the name.
- :meth:`TaskJob.finish` — ``on_finish`` once the job has ended
  (:meth:`TaskJob.finish_outputs`: once the task has stored its outputs).

A synchronous task holds a :class:`SyncTaskJob`: the same coroutines, run on the
process's portal (:mod:`kf_trainer_core.base.portal`) with the task's one client.
Failure classes and the retry decision are :func:`kf_trainer_core.errors.failure_class_of` and
:func:`~kf_trainer_core.errors.should_retry`.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeVar

from kf_trainer_core.base.portal import portal
from kf_trainer_core.client import AsyncTrainerClient
from kf_trainer_core.cluster.outputs import JobOutputs
from kf_trainer_core.cluster.status import JobState, TrainJob
from kf_trainer_core.config import KubernetesConfig, LocalConfig
from kf_trainer_core.errors import TrainJobNotFoundError, TrainJobTimeoutError
from kf_trainer_core.fields.retention import check_finish_action, finish_deletes
from kf_trainer_core.manifest.builder import identity_text
from kf_trainer_core.programs.logs import LogFollower
from kf_trainer_core.spec import Name, Suspend, TrainJobSpec
from kf_trainer_core.tasks import interruptions
from kf_trainer_core.tasks.interruptions import CancelAction, Identity, Interruption, Logger, past
from kf_trainer_core.tasks.jobs import announce, spec_of
from kf_trainer_core.tasks.sync_runner import interruption_cause

if TYPE_CHECKING:
    from types import TracebackType

__all__ = [
    "Attached",
    "LogFollower",
    "SyncTaskJob",
    "TaskJob",
    "TaskKilled",
    "Terms",
    "decided_by",
]

T = TypeVar("T")
Callback = Callable[[TrainJob], None]
#: What an adapter says an interruption means for the job (see
#: :func:`~kf_trainer_core.tasks.interruptions.disposition`): ``"cancel"`` or ``"keep"``.
Decide = Callable[[BaseException], Awaitable[str]]

_log = logging.getLogger(__name__)
_log.addHandler(logging.NullHandler())


class TaskKilled(Exception):
    """The orchestrator killed the task (what :meth:`TaskJob.stop` is told when the
    orchestrator's kill hook gives no exception of its own)."""


@dataclass(frozen=True)
class Terms:
    """How an orchestrator names what the lifecycle does, for the lines it logs: its
    kill and finish options, and what comes back for a job left running."""

    on_kill: str = "on_cancel"
    on_finish: str = "on_finish"
    rerun: str = "re-running the task"


@dataclass(frozen=True)
class Attached:
    """What :meth:`TaskJob.attach` found or made."""

    job: TrainJob
    #: Submitted by this run (else reattached: an earlier try's job).
    created: bool
    #: A suspended attempt (a killed try's, ``on_kill="suspend"``) was resumed.
    resumed: bool = False
    #: A failed job of the fixed name was deleted to submit it again.
    replaced: bool = False
    #: Said instead of the log when the job had already finished (nothing trains again).
    notice: str | None = None


def decided_by(
    *,
    final_attempt: bool = False,
    signals: tuple[type[BaseException], ...] = (),
    cancelling: Callable[[], Awaitable[bool]] | None = None,
) -> Decide:
    """The usual decision (:func:`~kf_trainer_core.tasks.interruptions.disposition`) for
    a task: ``signals`` are the exceptions that stand for a termination signal, which a
    cancellation and an eviction both send — ``cancelling()`` tells them apart (none: a
    signal is a cancellation); ``final_attempt``: an error that will not be retried
    gives up on the job."""

    async def decide(exc: BaseException) -> str:
        signalled = isinstance(exc, signals)
        asked = await cancelling() if signalled and cancelling is not None else True
        return interruptions.disposition(
            exc, final_attempt=final_attempt, signalled=signalled, cancelling=lambda: asked
        )

    return decide


class TaskJob:
    """A task run's hold on its TrainJob (see the module's documentation).

    :param spec: the job to submit (``None`` for a task that waits on a job it was
        given by ``name``).
    :param identity: the orchestrator identity of the task: the same for every try.
    :param name: a fixed name (a ``Name`` option in the spec is one too).
    :param fresh_after_failure: a retry after a failed job submits a new attempt.
    :param on_kill: what an interruption that gives up on the job does to it.
    :param on_finish: what becomes of the job once it has ended (``keep``, ``delete``,
        ``delete-succeeded``).
    :param link: the job's page on a dashboard, for the lines that announce it.
    """

    def __init__(
        self,
        spec: TrainJobSpec | Mapping[str, Any] | str | None = None,
        *,
        identity: Identity | None = None,
        name: str | None = None,
        fresh_after_failure: bool = True,
        on_kill: str = "delete",
        on_finish: str = "keep",
        logger: Logger = _log,
        link: Callable[[TrainJob], str | None] | None = None,
        terms: Terms | None = None,
    ) -> None:
        self.spec = None if spec is None else spec_of(spec)
        self.identity = identity
        self.name = name
        self.fresh_after_failure = fresh_after_failure
        self.on_kill: CancelAction = interruptions.check_action(on_kill)
        self.on_finish = check_finish_action(on_finish)
        self.logger = logger
        self.link = link
        self.terms = terms or Terms()
        #: The job, once known (submitted, reattached or read).
        self.job: TrainJob | None = None
        self._job_name: str | None = None
        #: What the last interruption did to the job.
        self.interruption: Interruption | None = None
        #: Whether the last :meth:`wait` showed the log (else the task may print its tail).
        self.log_followed = False
        self._attached: Attached | None = None

    # -- what the task knows -------------------------------------------------------
    @property
    def fixed_name(self) -> str | None:
        """The name the task gave its job (``name`` or a ``Name`` option), if any."""
        if self.name is not None:
            return self.name
        option = self.spec.option(Name) if self.spec is not None else None
        return option.name if option is not None else None

    @property
    def known_name(self) -> str | None:
        """The job's name as far as the task knows it: the job's once known, else a
        fixed name that is its own identity (``None``: found by identity only)."""
        if self._job_name is not None:
            return self._job_name
        return self.fixed_name if self.identity is None else None

    def known(self, job: TrainJob) -> TrainJob:
        """The task now knows its job (submitted, reattached or looked up)."""
        self.job, self._job_name = job, job.name
        return job

    def knows(self, name: str) -> None:
        """The task knows its job's name (an orchestrator kept it: a resumed deferred
        task, a kill after the wait ended)."""
        if self._job_name != name:
            self.job, self._job_name = None, name

    def dashboard(self, job: TrainJob) -> str | None:
        """The job's dashboard page, if the task has one (a bad template is no link)."""
        if self.link is None:
            return None
        try:
            return self.link(job)
        except Exception as exc:  # a link is a courtesy
            self.logger.warning("No dashboard link for TrainJob %s: %s", job.name, exc)
            return None

    # -- submit or reattach -------------------------------------------------------
    async def attach(self, client: AsyncTrainerClient) -> Attached:
        """Submit the task's job, or reattach to the one an earlier try made: one
        submit per task run. A suspended attempt (a killed try's) is resumed; a failed
        job of the task's fixed name is replaced when ``fresh_after_failure``."""
        if self.spec is None:
            raise ValueError("this task waits on a job by name: it has no spec to submit")
        replaced = False
        fixed = self.fixed_name
        if fixed is not None and self.fresh_after_failure:
            replaced = await self._replace_failed(client, fixed)
        submitted = await client.submit(
            self.spec,
            name=self.name,
            identity=self.identity,
            fresh_after_failure=self.fresh_after_failure,
        )
        job = self.known(submitted.job)
        announce(self.logger, job, submitted.created, self.dashboard(job))
        attached = await self._resumed(client, job, submitted.created)
        self._attached = replace(
            attached, replaced=replaced, notice=submitted.reuse_notice(client.config)
        )
        return self._attached

    async def reattach(self, client: AsyncTrainerClient, name: str) -> Attached:
        """The job an earlier try submitted, found by the name the orchestrator kept
        (Airflow's task state store): read, and resumed when a killed try suspended it."""
        job = self.known(await client.get_job(name))
        announce(self.logger, job, False, self.dashboard(job))
        self._attached = await self._resumed(client, job, False)
        return self._attached

    async def remembered(self, client: AsyncTrainerClient, name: str) -> TrainJob | None:
        """The job under a name the orchestrator kept for the task (Airflow's task state
        store), while that name still leads to the task's job; else ``None``, and the
        retry goes through :meth:`attach`, as one that finds its job by identity does:
        the job is gone; it is being deleted (a killed try's delete that a finalizer
        holds: taken up, it would be waited on until it went, and the task would fail
        for it — :meth:`attach` waits it out and submits the job again); or the name now
        holds another's job (a fixed name, freed and taken: waited on, its outputs would
        be reported as the task's and a kill would delete it — :meth:`attach` reports
        the conflict)."""
        try:
            job = await client.get_job(name)
        except TrainJobNotFoundError:
            return None
        where = f"TrainJob {job.namespace}/{job.name}"
        if job.deleting:
            self.logger.info("%s is being deleted: the task submits its job again", where)
            return None
        if not await self._ours(client, job):
            self.logger.warning("%s is not this task's job any more: not taken up", where)
            return None
        return job

    async def _ours(self, client: AsyncTrainerClient, job: TrainJob) -> bool:
        """Whether ``job`` is this task's: it carries the task's identity, or, for a
        task without one, it is the same request (spec hash). A task that knows neither
        (it waits on a job it was given) takes the job as it is."""
        if self.identity is not None:
            return job.identity == identity_text(self.identity)
        if self.spec is None:
            return True
        built = await client.build(self.spec, name=self.name)
        return job.identity is None and job.spec_hash == built.spec_hash

    async def _resumed(self, client: AsyncTrainerClient, job: TrainJob, created: bool) -> Attached:
        held = self.spec is not None and self.spec.option(Suspend) is not None
        if created or job.status is not JobState.SUSPENDED or held:
            return Attached(job, created)
        # Suspended by an interruption of an earlier try (on_kill="suspend"): go on —
        # unless Kueue holds it (queued, not admitted): resume_job leaves such a job to
        # Kueue, which would suspend it again at once, and returns it with its queue.
        job = self.known(await client.resume_job(job.name))
        if job.queue is not None and job.queue.waiting:
            self.logger.info(
                "TrainJob %s/%s is queued by Kueue (%s): it runs when Kueue admits it",
                job.namespace,
                job.name,
                job.queue.queue,
            )
            return Attached(job, created)
        self.logger.info("Resumed TrainJob %s/%s", job.namespace, job.name)
        return Attached(job, created, resumed=True)

    async def _replace_failed(self, client: AsyncTrainerClient, name: str) -> bool:
        """Make room under a fixed name (which takes no attempt suffix) for a fresh
        attempt: delete the failed job there if it is this task's — its identity, or,
        for a task without one, the same request (spec hash). Another's job stays, and
        the submit then reports the conflict."""
        assert self.spec is not None
        try:
            job = await client.get_job(name)
        except TrainJobNotFoundError:
            return False
        if job.status is not JobState.FAILED or not await self._ours(client, job):
            return False
        self.logger.info(
            "TrainJob %s/%s failed earlier: deleting it to submit it again", job.namespace, name
        )
        return await client.delete_job(name)

    # -- waiting -------------------------------------------------------------------
    async def wait(
        self,
        client: AsyncTrainerClient,
        status: Sequence[str] = ("Complete",),
        *,
        timeout: float | None = None,
        startup_timeout: float | None = None,
        admission_timeout: float | None = None,
        on_log: Callable[[str], None] | None = None,
        log_step: str = "node-0",
        log_tail: int = 1000,
        callbacks: Iterable[Callback] = (),
    ) -> JobOutputs:
        """Wait on the known job until it reaches one of ``status``, with ``log_step``'s
        log followed into ``on_log`` (a job that had already finished when it was
        reattached gets the reuse notice instead: nothing trains again); return its
        outputs. Raises as :meth:`AsyncTrainerClient.wait` does."""
        name = self._name_to_wait_on()
        notice = self._attached.notice if self._attached is not None else None
        self.log_followed = False
        if on_log is not None and notice is not None:
            on_log(notice)
            self.log_followed = True
        sink = on_log if notice is None else None
        follower = self.follow_log(client, log_step, sink, tail=log_tail)
        try:
            async with follower:
                return await client.wait_outputs(
                    name,
                    tuple(status),
                    timeout=timeout,
                    startup_timeout=startup_timeout,
                    admission_timeout=admission_timeout,
                    callbacks=list(callbacks),
                )
        finally:
            self.log_followed = self.log_followed or follower.followed

    def follow_log(
        self,
        client: AsyncTrainerClient,
        step: str,
        sink: Callable[[str], None] | None,
        *,
        tail: int = 1000,
    ) -> LogFollower:
        """The known job's ``step`` log followed into ``sink`` beside a wait: a block
        around the wait (:class:`~kf_trainer_core.programs.logs.LogFollower`), which
        follows nothing when ``sink`` is ``None``. Trouble with the log is a warning in
        the task's log, never the task's failure."""
        name = self._name_to_wait_on()
        if sink is None:
            return LogFollower(None, None)
        where = f"TrainJob {client.namespace}/{name}"

        def trouble(exc: Exception) -> None:
            self.logger.warning("Could not follow the log of %s, step %s: %s", where, step, exc)

        lines = client.get_job_logs(name, step, follow=True, tail=tail)
        return LogFollower(lines, sink, on_error=trouble)

    def _name_to_wait_on(self) -> str:
        name = self.known_name
        if name is None:
            raise ValueError("the task does not know its job yet: attach first")
        return name

    # -- interruptions -------------------------------------------------------------
    async def stop(self, client: AsyncTrainerClient, why: BaseException) -> Interruption:
        """Apply ``on_kill`` now (the orchestrator says the task was killed): to the job
        by its name, or by the task's identity when it was killed before it learnt the
        name. A job that has just finished is left alone: its result is there for a
        retry to collect. Never raises."""
        return await self._settle(client, why, "cancel")

    async def interrupted(
        self, client: AsyncTrainerClient, raised: BaseException, decide: Decide
    ) -> BaseException:
        """What the interruption ``raised`` (a cancellation stands for its cause, see
        :func:`~kf_trainer_core.tasks.sync_runner.interruption_cause`) means for the job
        — ``decide`` says: ``"cancel"`` applies ``on_kill``, ``"keep"`` leaves it — and
        the exception the task then reports: ``raised``, or a timeout whose last line
        says what the task did to the job it left behind."""
        exc = interruption_cause(raised)
        try:
            verdict = await decide(exc)
        except Exception as err:  # the interruption is what the task reports
            self.logger.error("Could not decide what to do with the job: %s", err)
            verdict = "keep"
        what = await self._settle(client, exc, verdict)
        if isinstance(raised, TrainJobTimeoutError) and what.acted:
            done = (
                f"{past(self.on_kill).lower()} by the task ({self.terms.on_kill}={self.on_kill!r})"
            )
            return raised.settled(f"cleaned up: TrainJob {', '.join(what.acted)} {done}")
        return raised

    @contextlib.asynccontextmanager
    async def holding(
        self,
        client: AsyncTrainerClient,
        decide: Decide,
        *,
        shield: Callable[[Awaitable[BaseException]], Awaitable[BaseException]] | None = None,
    ) -> AsyncIterator[TaskJob]:
        """The task's hold on its job as a block: an exception leaving it (an
        interruption, a timeout, the job's failure) is settled by :meth:`interrupted`
        before it goes on. ``shield``: how the clean-up runs to its end while the
        orchestrator cancels (Prefect's cancel scopes cancel every await in them)."""
        try:
            yield self
        except BaseException as raised:
            settling = self.interrupted(client, raised, decide)
            told = await (shield(settling) if shield is not None else settling)
            if told is not raised:
                raise told from None
            raise

    async def _settle(
        self, client: AsyncTrainerClient, exc: BaseException, verdict: str
    ) -> Interruption:
        name = self.known_name
        acted: list[str] = []
        if (chosen := interruptions.pick(verdict, name, self.identity, self.on_kill)) is not None:
            try:
                acted = await client.stop_unfinished(**chosen)
            except Exception as err:
                self.logger.error("Could not stop TrainJob %s: %s", name or self.identity, err)
        self.interruption = interruptions.concluded(
            exc, self.logger, verdict, self.on_kill, name, acted, self.terms.rerun
        )
        return self.interruption

    # -- the end -------------------------------------------------------------------
    async def finish(
        self, client: AsyncTrainerClient, *, succeeded: bool, status: str | None = None
    ) -> bool:
        """``on_finish`` once the task's outcome is decided (its outputs stored, or its
        failure reported): delete the job when the action says so — only a finished job
        (a task that stopped waiting leaves an unfinished one as it is). ``status``: the
        job's state when known, else it is read. A failed delete is logged, never
        raised."""
        action, name = self.on_finish, self.known_name
        if name is None or action == "keep" or (action == "delete-succeeded" and not succeeded):
            return False
        try:
            if status is None:
                status = (await client.get_job(name)).status.value
            if not finish_deletes(action, status, succeeded=succeeded):
                if not JobState(status).terminal:
                    self.logger.info(
                        "Kept TrainJob %s: it has not finished (%s); %s applies to finished jobs",
                        name,
                        status,
                        self.terms.on_finish,
                    )
                return False
            deleted = await client.delete_job(name)
        except Exception as exc:  # the task's outcome is decided: report, do not mask it
            self.logger.warning("Could not delete TrainJob %s (%s): %s", name, action, exc)
            return False
        if deleted:
            self.logger.info("Deleted TrainJob %s (%s=%s)", name, self.terms.on_finish, action)
        return deleted

    async def finish_outputs(self, client: AsyncTrainerClient, outputs: JobOutputs) -> bool:
        """:meth:`finish` once the task has stored the job's ``outputs``: a success only
        when the job completed and its result was read (one whose result could not be
        read stays for ``delete-succeeded``, so that a retry reads it again)."""
        succeeded = outputs.status is JobState.COMPLETE and outputs.result_missing is None
        return await self.finish(client, succeeded=succeeded, status=outputs.status.value)


class SyncTaskJob:
    """A synchronous task's face of a :class:`TaskJob`: the same coroutines, each run on
    the process's portal (:mod:`kf_trainer_core.base.portal`: one event loop, which
    outlives the task) with the task's one async client (made there on first use,
    closed with the face). The calling thread stays interruptible: an interruption
    cancels the running coroutine, waits for its clean-up and is re-raised.

    >>> with SyncTaskJob(TaskJob(spec, identity=ident), config) as task:
    ...     task.attach()
    ...     outputs = task.wait(on_log=print)
    """

    def __init__(
        self,
        job: TaskJob,
        config: KubernetesConfig | LocalConfig,
        *,
        namespace: str | None = None,
    ) -> None:
        self.job = job
        self.config = config
        self._namespace = namespace
        self._client: AsyncTrainerClient | None = None
        # Calls in flight from other threads (an orchestrator's kill hook): closing
        # waits for them, so that the kill's request is not cut off by the task's end.
        self._calls = 0
        self._idle = threading.Condition()

    @property
    def namespace(self) -> str:
        """The namespace the task's jobs run in."""
        return self._namespace or self.config.resolve_namespace()

    def __enter__(self) -> SyncTaskJob:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the client (a closed face makes another on next use)."""
        with self._idle:
            self._idle.wait_for(lambda: self._calls == 0)
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception):
                portal().call(client.close())

    def call(self, fn: Callable[[AsyncTrainerClient], Awaitable[T]]) -> T:
        """``fn(client)`` run on the task's loop with its client: any client call
        (``task.call(lambda c: c.get_job_events(name))``)."""

        async def with_client() -> T:
            if self._client is None:
                self._client = AsyncTrainerClient(self.config, namespace=self._namespace)
            return await fn(self._client)

        with self._idle:
            self._calls += 1
        try:
            return portal().call(with_client())
        finally:
            with self._idle:
                self._calls -= 1
                self._idle.notify_all()

    def attach(self) -> Attached:
        """:meth:`TaskJob.attach`."""
        return self.call(self.job.attach)

    def reattach(self, name: str) -> Attached:
        """:meth:`TaskJob.reattach`."""
        return self.call(lambda c: self.job.reattach(c, name))

    def wait(self, status: Sequence[str] = ("Complete",), **options: Any) -> JobOutputs:
        """:meth:`TaskJob.wait`."""
        return self.call(lambda c: self.job.wait(c, status, **options))

    def stop(self, why: BaseException) -> Interruption:
        """:meth:`TaskJob.stop`."""
        return self.call(lambda c: self.job.stop(c, why))

    def finish(self, *, succeeded: bool, status: str | None = None) -> bool:
        """:meth:`TaskJob.finish`."""
        return self.call(lambda c: self.job.finish(c, succeeded=succeeded, status=status))

    def finish_outputs(self, outputs: JobOutputs) -> bool:
        """:meth:`TaskJob.finish_outputs`."""
        return self.call(lambda c: self.job.finish_outputs(c, outputs))
