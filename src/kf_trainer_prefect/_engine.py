"""What the tasks do inside a Prefect run: identity, submission, waiting, logs,
artifacts, and what happens to the job when the task is interrupted.

Written once, async: the async tasks await these coroutines and the sync tasks run the
very same ones through :mod:`kf_trainer_prefect._sync_face`, so an interruption (a
timeout, a flow run cancellation, Ctrl-C, a crash) meets one clean-up in both faces:
the coroutine is cancelled, and :class:`_Attempt` decides and applies what that means
for the job, shielded from the cancellation.

Kubernetes knowledge stays in :mod:`kf_trainer_core`; this module only translates
Prefect's lifecycle (run identity, timeouts, cancellation, crashes, retries, logger,
artifacts) into core client calls. The client is imported inside the functions, so
importing the tasks never imports a Kubernetes library.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar
from uuid import UUID

from kf_trainer_core.spec import Labels, TrainJobSpec
from kf_trainer_core.tasks import (
    JobOutputs,
    TaskJob,
    TrainJob,
    decided_by,
    imported,
)
from kf_trainer_core.tasks.interruptions import CancelAction, Identity, check_action, past
from kf_trainer_core.tasks.jobs import (
    bad_ending,
    finished,
    job_name_of,
    log_sink,
    spec_of,
    task_identity,
    with_updates,
)
from kf_trainer_core.tasks.lifecycle import Decide, Terms
from kf_trainer_core.tasks.sync_runner import interruption_cause
from kf_trainer_prefect._sync_face import TaskRunnerShutdown, runner_shutdown_cancels
from kf_trainer_prefect.artifacts import ArtifactPublisher
from kf_trainer_prefect.credentials import (
    CredentialsLike,
    KubeflowTrainerCredentials,
    aload_credentials,
)

if TYPE_CHECKING:
    from kf_trainer_core.client import AsyncTrainerClient

__all__ = ["FLOW_RUN_LABEL", "RunInfo", "TaskRunnerShutdown", "check_action", "decision"]

T = TypeVar("T")

JobRef = TrainJob | JobOutputs | str
# A string: LoggerAdapter takes a type argument only from Python 3.11 on.
Logger: TypeAlias = "logging.Logger | logging.LoggerAdapter[logging.Logger]"

#: The label that ties a TrainJob to the Prefect flow run that submitted it (the key
#: Prefect's Kubernetes worker puts on its Jobs for the same purpose).
FLOW_RUN_LABEL = "prefect.io/flow-run-id"


@dataclass(frozen=True)
class RunInfo:
    """The Prefect run a task executes in, as far as the tasks need it."""

    flow_run_id: str | None
    task_run_id: str | None
    task_name: str | None
    run_count: int
    retries: int
    logger: Logger

    @property
    def final_attempt(self) -> bool:
        """Whether Prefect will not retry this task after a failure."""
        return self.run_count > self.retries


def current_run() -> RunInfo:
    """The task run (and flow run) this code runs in, with its run logger."""
    from prefect.context import FlowRunContext, TaskRunContext
    from prefect.logging import get_logger, get_run_logger

    task_ctx = TaskRunContext.get()
    flow_ctx = FlowRunContext.get()
    in_run = task_ctx is not None or flow_ctx is not None
    logger: Logger = get_run_logger() if in_run else get_logger("kf_trainer_prefect")
    flow_run_id: str | None = None
    if flow_ctx is not None and flow_ctx.flow_run is not None:
        flow_run_id = str(flow_ctx.flow_run.id)
    if task_ctx is None:
        return RunInfo(flow_run_id, None, None, 1, 0, logger)
    task_run = task_ctx.task_run
    if task_run.flow_run_id is not None:
        flow_run_id = str(task_run.flow_run_id)
    return RunInfo(
        flow_run_id=flow_run_id,
        task_run_id=str(task_run.id),
        task_name=task_ctx.task.name,
        run_count=max(1, task_run.run_count),
        retries=task_ctx.task.retries or 0,
        logger=logger,
    )


def identity_for(
    spec: TrainJobSpec, run: RunInfo, explicit: Identity | None, name: str | None
) -> Identity | None:
    """The orchestrator identity of the job a task submits
    (:func:`~kf_trainer_core.tasks.jobs.task_identity`).

    Prefect 3 gives every task run a random id and dynamic key, so neither survives the
    re-run of a crashed flow run; the flow run id, the task's name and the spec do. The
    same task asking for the same training in the same flow run therefore finds its job
    again after a task retry, a flow retry or a crash, and a failed job is followed by a
    fresh attempt. An explicit ``name`` (or ``Name`` option) is its own identity.
    """
    task = run.task_name or "task"
    scope: tuple[str, ...] | None = None
    if run.flow_run_id is not None:
        scope = ("prefect", run.flow_run_id, task)
    elif run.task_run_id is not None:
        scope = ("prefect", "task-run", run.task_run_id, task)
    return task_identity(spec, explicit, name, scope)


def labelled(spec: TrainJobSpec, run: RunInfo) -> TrainJobSpec:
    """The spec with the flow run's label, so that a cancelled or crashed flow run's
    hooks find its jobs."""
    if run.flow_run_id is None:
        return spec
    return spec.with_options(Labels({FLOW_RUN_LABEL: run.flow_run_id}))


def decision(run: RunInfo, cancelling: Callable[[], Awaitable[bool]] | None = None) -> Decide:
    """What an interruption means for the job the task was waiting on (the core's
    :func:`~kf_trainer_core.tasks.decided_by`): SIGTERM is how a runner cancels a flow
    run, and also how infrastructure ends a process it evicts; only the flow run's state
    (``cancelling``, by default asked of the Prefect API) tells them apart."""
    from prefect.exceptions import TerminationSignal

    return decided_by(
        final_attempt=run.final_attempt,
        signals=(TerminationSignal, TaskRunnerShutdown),
        cancelling=cancelling or (lambda: flow_cancelling(run)),
    )


async def flow_cancelling(run: RunInfo) -> bool:
    """Whether the flow run is being cancelled (asked of the Prefect API)."""
    if run.flow_run_id is None:
        return False
    from prefect.client.orchestration import get_client

    try:
        async with get_client() as client:
            state = (await client.read_flow_run(UUID(run.flow_run_id))).state
    except Exception:
        return False
    return bool(state is not None and (state.is_cancelling() or state.is_cancelled()))


async def shielded(awaitable: Awaitable[T]) -> T:
    """Await clean-up to its end while the task is being cancelled: inside a cancelled
    scope every await of the clean-up would be cancelled too."""
    import anyio

    with anyio.CancelScope(shield=True):
        value = await awaitable
    return value


@dataclass
class _Attempt:
    """A task's hold on one job (the core's :class:`~kf_trainer_core.tasks.TaskJob`) and
    what is Prefect's about it: the run, the credentials, the artifacts. Its clean-up,
    the same for both faces, settles an interruption as the core does, with Prefect's
    answer to "is the flow run being cancelled?", and shows a bad ending."""

    run: RunInfo
    creds: KubeflowTrainerCredentials
    namespace: str | None
    publisher: ArtifactPublisher | None
    task: TaskJob

    @property
    def link(self) -> str | None:
        """The job's dashboard page, once the job is known."""
        job = self.task.job
        return self.task.dashboard(job) if job is not None else None

    @asynccontextmanager
    async def holding(self, client: AsyncTrainerClient) -> AsyncIterator[TaskJob]:
        """The block that holds the job: an exception leaving it is settled by the core
        (``on_cancel``), then shown in the artifacts. A job that has just finished is
        left alone: its result is there for a retry to collect."""
        try:
            async with self.task.holding(client, decision(self.run), shield=shielded):
                yield self.task
        except BaseException as told:
            what = self.task.interruption
            shown = bad_ending(
                interruption_cause(told), self.task.job, what.note if what else None, self.link
            )
            if self.publisher is not None and shown is not None:
                await shielded(self.publisher.finish(*shown))
            raise

    async def to_the_end(
        self,
        waiting: Callable[
            [AsyncTrainerClient, TrainJob, Callable[[TrainJob], None]], Awaitable[JobOutputs]
        ],
        read: str | None = None,
    ) -> JobOutputs:
        """Hold the job on a client of its own, from its submit or reattach (or its first
        read: ``read``, a name) to its end: ``waiting(client, job, on_update)`` with the
        progress artifact kept current, then the outputs published and said, then
        ``on_finish``."""
        task, publisher = self.task, self.publisher
        assert publisher is not None  # a task that waits publishes
        async with _client(self.creds, self.namespace) as client, _finishing(task, client) as done:
            async with runner_shutdown_cancels(), self.holding(client):
                if read is None:
                    job = (await task.attach(client)).job
                else:
                    job = task.known(await client.get_job(read))
                await publisher.start(job, self.link)
                result = await with_updates(
                    lambda on_update: waiting(client, job, on_update),
                    publisher.progress.observe,
                    publisher.flush,
                )
            await publisher.outputs(result, self.link)
            finished(self.run.logger, result)
            done(result)
        return result


@asynccontextmanager
async def _client(
    creds: KubeflowTrainerCredentials, namespace: str | None
) -> AsyncIterator[AsyncTrainerClient]:
    # Made inside the running loop, as the async client requires; its module is
    # imported in a worker thread (an import on the loop stops the flow's other tasks:
    # over 100 ms on a busy machine).
    core_client = await imported("kf_trainer_core.client")
    async with core_client.AsyncTrainerClient(creds.backend_config(), namespace=namespace) as c:
        yield c


@dataclass
class RunOptions:
    """How :func:`run` runs one job (the task arguments)."""

    namespace: str | None = None
    name: str | None = None
    identity: Identity | None = None
    timeout: float | None = None
    startup_timeout: float | None = None
    stream_logs: bool = True
    log_step: str = "node-0"
    log_tail: int = 1000
    on_cancel: str = "delete"
    artifacts: bool = True
    fresh_after_failure: bool = True
    admission_timeout: float | None = None
    on_finish: str = "keep"


async def _submitting(
    spec: TrainJobSpec | Mapping[str, Any] | str,
    credentials: CredentialsLike | None,
    opts: RunOptions,
    publisher: ArtifactPublisher | None,
) -> _Attempt:
    """The hold on the job a task submits (known by name only when it has no identity,
    a fixed name; else found by identity until the submit answers), with the spec to
    submit. Arguments and spec are checked before the credentials are loaded."""
    run = current_run()
    parsed = spec_of(spec)
    identity = identity_for(parsed, run, opts.identity, opts.name)
    task = TaskJob(
        labelled(parsed, run),
        identity=identity,
        name=opts.name,
        fresh_after_failure=opts.fresh_after_failure,
        on_kill=opts.on_cancel,
        on_finish=opts.on_finish,
        logger=run.logger,
        terms=Terms(rerun="re-running this flow run"),
    )
    creds = await aload_credentials(credentials)
    task.link = lambda job: creds.dashboard_link(job.namespace, job.name)
    return _Attempt(run, creds, opts.namespace, publisher, task)


async def run(
    spec: TrainJobSpec | Mapping[str, Any] | str,
    credentials: CredentialsLike | None,
    opts: RunOptions,
) -> JobOutputs:
    """Submit (or reattach to) the task's job, stream its log into the run logger, keep
    the progress artifact current, wait, and return the outputs; an interruption
    deletes, suspends or keeps the job per :func:`decision` and ``on_cancel``."""
    attempt = await _submitting(spec, credentials, opts, ArtifactPublisher(opts.artifacts))
    task, logger = attempt.task, attempt.run.logger
    return await attempt.to_the_end(
        lambda client, job, on_update: task.wait(
            client,
            timeout=opts.timeout,
            startup_timeout=opts.startup_timeout,
            admission_timeout=opts.admission_timeout,
            on_log=log_sink(logger, job.name, opts.log_step) if opts.stream_logs else None,
            log_step=opts.log_step,
            log_tail=opts.log_tail,
            callbacks=[on_update],
        )
    )


@asynccontextmanager
async def _finishing(
    task: TaskJob, client: AsyncTrainerClient
) -> AsyncIterator[Callable[[JobOutputs], None]]:
    """``on_finish`` for a task's block (the core's
    :meth:`~kf_trainer_core.tasks.TaskJob.finish`): after the block has stored the
    outputs and said so (``done(outputs)``), delete the finished job per the action;
    when the block ends in the job's failure (already reported by then), delete it only
    for ``"delete"``. Any other exception (a timeout, a cancellation, a bad spec) leaves
    the job to ``on_cancel``. A failed delete is logged, never raised: the task's
    outcome is decided."""
    from kf_trainer_core.errors import TrainJobFailedError

    stored: list[JobOutputs] = []
    try:
        yield stored.append
    except TrainJobFailedError as exc:
        if exc.job is not None:
            status = exc.job.status.value
            await shielded(task.finish(client, succeeded=False, status=status))
        raise
    if stored:
        await shielded(task.finish_outputs(client, stored[-1]))


async def submit(
    spec: TrainJobSpec | Mapping[str, Any] | str,
    credentials: CredentialsLike | None,
    opts: RunOptions,
) -> TrainJob:
    """Submit (or reattach to) the task's job and return it."""
    # Interrupted mid-request, the job may exist without the task knowing it: the
    # attempt looks for it by identity.
    attempt = await _submitting(spec, credentials, opts, None)
    async with _client(attempt.creds, opts.namespace) as client, attempt.holding(client):
        job = (await attempt.task.attach(client)).job
    await ArtifactPublisher(opts.artifacts).link(job, attempt.link)
    return job


# The tasks below are :mod:`kf_trainer_prefect.tasks`' bodies: the task holds the
# defaults and the documentation (Prefect reads its signature), and passes every
# argument.


async def wait(
    job: JobRef,
    credentials: CredentialsLike | None,
    *,
    namespace: str | None,
    status: str | Sequence[str],
    timeout: float | None,
    startup_timeout: float | None,
    on_cancel: CancelAction,
    artifacts: bool,
    on_finish: str,
) -> JobOutputs:
    """``wait_trainjob``: wait (event-driven) until the job reaches one of ``status``,
    with the progress artifact kept current; return its outputs."""
    run = current_run()
    check_action(on_cancel)
    name = job_name_of(job)
    task = TaskJob(
        on_kill=on_cancel,
        on_finish=on_finish,
        logger=run.logger,
        terms=Terms(rerun="re-running this flow run"),
    )
    task.knows(name)
    creds = await aload_credentials(credentials)
    attempt = _Attempt(run, creds, namespace, ArtifactPublisher(artifacts), task)
    wanted = (status,) if isinstance(status, str) else tuple(status)
    return await attempt.to_the_end(
        lambda client, _job, on_update: task.wait(
            client,
            wanted,
            timeout=timeout,
            startup_timeout=startup_timeout,
            callbacks=[on_update],
        ),
        read=name,
    )


async def logs(
    job: JobRef,
    credentials: CredentialsLike | None,
    *,
    namespace: str | None,
    step: str,
    follow: bool,
    tail: int | None,
) -> int:
    """``stream_trainjob_logs``."""
    run = current_run()
    name = job_name_of(job)
    creds = await aload_credentials(credentials)
    sink = log_sink(run.logger, name, step)
    count = 0
    async with runner_shutdown_cancels(), _client(creds, namespace) as client:
        async for line in client.get_job_logs(name, step, follow, tail=tail):
            sink(line)
            count += 1
    return count


async def outputs(
    job: JobRef, credentials: CredentialsLike | None, *, namespace: str | None, artifacts: bool
) -> JobOutputs:
    """``get_trainjob_outputs``."""
    name = job_name_of(job)
    creds = await aload_credentials(credentials)
    async with _client(creds, namespace) as client:
        result = await client.get_job_outputs(name)
    if artifacts:
        link = creds.dashboard_link(result.namespace, result.name)
        await ArtifactPublisher(True).outputs(result, link)
    return result


async def cancel(
    job: JobRef, credentials: CredentialsLike | None, *, namespace: str | None, action: CancelAction
) -> bool:
    """``cancel_trainjob``."""
    run = current_run()
    chosen = check_action(action)
    name = job_name_of(job)
    creds = await aload_credentials(credentials)
    async with _client(creds, namespace) as client:
        done = await client.cancel_job(name, chosen)
    run.logger.info("%s TrainJob %s", past(chosen) if done else f"Nothing to {chosen} for", name)
    return done


#: Each task's body by operation, as :func:`kf_trainer_prefect.tasks._in_engine` calls it:
#: with the spec or job, the credentials and the task's other arguments (its options).
TASK_BODIES: dict[str, Callable[[Any, CredentialsLike | None, dict[str, Any]], Awaitable[Any]]] = {
    "run": lambda spec, credentials, opts: run(spec, credentials, RunOptions(**opts)),
    "submit": lambda spec, credentials, opts: submit(spec, credentials, RunOptions(**opts)),
    "wait": lambda job, credentials, opts: wait(job, credentials, **opts),
    "logs": lambda job, credentials, opts: logs(job, credentials, **opts),
    "outputs": lambda job, credentials, opts: outputs(job, credentials, **opts),
    "cancel": lambda job, credentials, opts: cancel(job, credentials, **opts),
}
