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

import asyncio
import hashlib
import json
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, TypeVar
from uuid import UUID

from kf_trainer_core.spec import Labels, Name, TrainJobSpec
from kf_trainer_core.status import JobOutputs, JobState, TrainJob
from kf_trainer_prefect._sync_face import (
    TaskRunnerShutdown,
    interruption_cause,
    runner_shutdown_cancels,
)
from kf_trainer_prefect.artifacts import (
    ArtifactPublisher,
    job_summary,
    outputs_summary,
    steps_table,
)
from kf_trainer_prefect.credentials import (
    CredentialsLike,
    KubeflowTrainerCredentials,
    aload_credentials,
)

if TYPE_CHECKING:
    from kf_trainer_core.client import AsyncTrainerClient

__all__ = ["FLOW_RUN_LABEL", "RunInfo", "TaskRunnerShutdown", "check_action", "disposition"]

T = TypeVar("T")

CancelAction = Literal["delete", "suspend", "keep"]
Identity = str | Sequence[str | int | None]
JobRef = TrainJob | JobOutputs | str
Logger = logging.Logger | logging.LoggerAdapter[logging.Logger]

#: The label that ties a TrainJob to the Prefect flow run that submitted it (the key
#: Prefect's Kubernetes worker puts on its Jobs for the same purpose).
FLOW_RUN_LABEL = "prefect.io/flow-run-id"

_CANCEL_ACTIONS = ("delete", "suspend", "keep")


# --------------------------------------------------------------------- run identity


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
    logger: Logger = (
        get_run_logger()
        if task_ctx is not None or flow_ctx is not None
        else get_logger("kf_trainer_prefect")
    )
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


def spec_of(spec: TrainJobSpec | Mapping[str, Any] | str) -> TrainJobSpec:
    """The spec, validated: a bad field fails the task before anything is submitted."""
    return spec if isinstance(spec, TrainJobSpec) else TrainJobSpec.parse(spec)


def spec_digest(spec: TrainJobSpec) -> str:
    """A digest of the spec's content, stable across processes and runs."""
    text = json.dumps(spec.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def identity_for(
    spec: TrainJobSpec, run: RunInfo, explicit: Identity | None, name: str | None
) -> Identity | None:
    """The orchestrator identity of the job a task submits.

    Prefect 3 gives every task run a random id and dynamic key, so neither survives the
    re-run of a crashed flow run; the flow run id, the task's name and the spec do. The
    same task asking for the same training in the same flow run therefore finds its job
    again after a task retry, a flow retry or a crash, and a failed job is followed by a
    fresh attempt. An explicit ``name`` (or ``Name`` option) is its own identity.
    """
    if explicit is not None:
        return explicit
    if name is not None or spec.option(Name) is not None:
        return None
    digest = spec_digest(spec)
    task = run.task_name or "task"
    if run.flow_run_id is not None:
        return ("prefect", run.flow_run_id, task, digest)
    if run.task_run_id is not None:
        return ("prefect", "task-run", run.task_run_id, task, digest)
    return None


def labelled(spec: TrainJobSpec, run: RunInfo) -> TrainJobSpec:
    """The spec with the flow run's label, so that a cancelled or crashed flow run's
    hooks find its jobs."""
    if run.flow_run_id is None:
        return spec
    return spec.with_options(Labels({FLOW_RUN_LABEL: run.flow_run_id}))


def job_name_of(job: JobRef) -> str:
    """The name of a job given as a name, a ``TrainJob`` or ``JobOutputs``; an empty or
    invalid name is refused here, before the task makes any request."""
    from kf_trainer_core.names import require_job_name

    return require_job_name(job if isinstance(job, str) else job.name, "job")


def check_action(action: str) -> CancelAction:
    """Validate an ``on_cancel`` / ``action`` argument."""
    if action not in _CANCEL_ACTIONS:
        raise ValueError(
            f"on_cancel={action!r} is not an action. Fix: use 'delete' (remove the job), "
            "'suspend' (keep it, stopped and resumable) or 'keep' (leave it running)."
        )
    return action  # type: ignore[return-value]


def _why(exc: BaseException) -> str:
    signum = getattr(exc, "signal", None)
    text = str(exc).splitlines()[0] if str(exc) else ""
    if not text and isinstance(signum, int):
        text = f"signal {signum}"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _past(action: str) -> str:
    return {"delete": "Deleted", "suspend": "Suspended"}.get(action, action)


# ---------------------------------------------------------------- interruptions


def disposition(exc: BaseException, run: RunInfo, flow_cancelling: Callable[[], bool]) -> str:
    """What an interruption means for the job the task was waiting on.

    * ``"cancel"``: the task gives up on the job: its timeout, a flow run cancellation,
      Ctrl-C, a job that can never start, or an error on the task's last attempt;
    * ``"keep"``: someone comes back for it (a crash: re-running the flow run
      reattaches; an error Prefect retries: the retry reattaches), or it has ended.
    """
    from prefect.exceptions import TerminationSignal

    from kf_trainer_core.errors import (
        TrainJobCreationFailedError,
        TrainJobDeletedError,
        TrainJobFailedError,
    )

    if isinstance(exc, TrainJobCreationFailedError):
        return "cancel"  # it would stay pending forever
    if isinstance(exc, (TrainJobFailedError, TrainJobDeletedError)):
        return "keep"
    if isinstance(exc, (TerminationSignal, TaskRunnerShutdown)):
        # SIGTERM is how a runner cancels a flow run, and also how infrastructure ends a
        # process it evicts: only the flow run's state tells them apart.
        return "cancel" if flow_cancelling() else "keep"
    if isinstance(exc, (TimeoutError, asyncio.CancelledError, KeyboardInterrupt)):
        return "cancel"
    if isinstance(exc, Exception):
        return "cancel" if run.final_attempt else "keep"
    return "keep"


def _cancelling_state(state: Any) -> bool:
    return bool(state is not None and (state.is_cancelling() or state.is_cancelled()))


async def flow_cancelling(run: RunInfo) -> bool:
    """Whether the flow run is being cancelled (asked of the Prefect API)."""
    if run.flow_run_id is None:
        return False
    from prefect.client.orchestration import get_client

    try:
        async with get_client() as client:
            flow_run = await client.read_flow_run(UUID(run.flow_run_id))
            return _cancelling_state(flow_run.state)
    except Exception:
        return False


@dataclass
class _Interruption:
    """What was decided about a job when its task was interrupted."""

    verdict: str
    acted: list[str]
    note: str | None


def _note(action: CancelAction, verdict: str, exc: BaseException, acted: list[str]) -> str | None:
    if verdict != "cancel":
        if not isinstance(exc, Exception):
            return f"The task stopped ({_why(exc)}); the job keeps running for a re-run."
        return None
    if acted:
        return f"The task stopped ({_why(exc)}); the job was {_past(action).lower()}."
    if action == "keep":
        return f"The task stopped ({_why(exc)}); the job was left running (on_cancel='keep')."
    return None


def _pick(
    verdict: str, name: str | None, identity: Identity | None, action: CancelAction
) -> dict[str, Any] | None:
    """The ``stop_unfinished`` arguments that pick the task's job, when the verdict is
    to act on it: by name, or by identity when the task was interrupted before it
    learnt the name."""
    if verdict != "cancel" or action == "keep":
        return None
    if name is not None:
        return {"name": name, "action": action}
    if identity is not None:
        return {"identity": identity, "action": action}
    return None


def _concluded(
    exc: BaseException,
    run: RunInfo,
    verdict: str,
    action: CancelAction,
    name: str | None,
    acted: list[str],
) -> _Interruption:
    """Log what the interruption did to the job, and say it for the summary."""
    why = _why(exc)
    if verdict == "cancel":
        if action == "keep" and name:
            run.logger.warning("Leaving TrainJob %s running (on_cancel='keep'): %s", name, why)
        for target in acted:
            run.logger.warning("%s TrainJob %s: %s", _past(action), target, why)
    elif name is not None and not isinstance(exc, Exception):
        run.logger.warning(
            "TrainJob %s keeps running (%s); re-running this flow run reattaches to it.",
            name,
            why,
        )
    return _Interruption(verdict, acted, _note(action, verdict, exc, acted))


async def interrupted(
    exc: BaseException,
    run: RunInfo,
    creds: KubeflowTrainerCredentials,
    namespace: str | None,
    name: str | None,
    identity: Identity | None,
    action: CancelAction,
) -> _Interruption:
    """Decide and apply what an interruption means for the job (never raises: the
    original exception is what the task reports). A job that has just finished is left
    alone: its result is there for a retry to collect."""
    from prefect.exceptions import TerminationSignal

    from kf_trainer_core.client import AsyncTrainerClient

    exc = interruption_cause(exc)
    asks_state = isinstance(exc, (TerminationSignal, TaskRunnerShutdown))
    cancelling = await flow_cancelling(run) if asks_state else False
    verdict = disposition(exc, run, lambda: cancelling)
    acted: list[str] = []
    if (pick := _pick(verdict, name, identity, action)) is not None:
        try:
            # A client of its own: the interrupted one may be in the middle of a request.
            async with AsyncTrainerClient(creds.backend_config(), namespace=namespace) as client:
                acted = await client.stop_unfinished(**pick)
        except Exception as err:
            run.logger.error("Could not stop TrainJob %s: %s", name or identity, err)
    return _concluded(exc, run, verdict, action, name, acted)


async def shielded(awaitable: Awaitable[T]) -> T:
    """Await clean-up to its end while the task is being cancelled: inside a cancelled
    scope every await of the clean-up would be cancelled too."""
    import anyio

    with anyio.CancelScope(shield=True):
        value = await awaitable
    return value


@dataclass
class _Attempt:
    """A task's hold on one job, as an ``async with`` block: what its clean-up needs
    when the block is interrupted (the job as far as it is known, where it runs, what
    ``on_cancel`` says), and that clean-up, the same for both faces."""

    run: RunInfo
    creds: KubeflowTrainerCredentials
    namespace: str | None
    action: CancelAction
    publisher: ArtifactPublisher | None
    name: str | None = None
    identity: Identity | None = None
    job: TrainJob | None = None
    link: str | None = None

    def known(self, job: TrainJob) -> None:
        """The task now knows its job (submitted, reattached or looked up)."""
        self.job, self.name = job, job.name
        self.link = self.creds.dashboard_link(job.namespace, job.name)

    async def __aenter__(self) -> _Attempt:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc is not None:
            await shielded(self._ended(exc))

    async def _ended(self, exc: BaseException) -> None:
        what = await interrupted(
            exc, self.run, self.creds, self.namespace, self.name, self.identity, self.action
        )
        shown = _bad_ending(interruption_cause(exc), self.job, what.note, self.link)
        if self.publisher is not None and shown is not None:
            await self.publisher.finish(*shown)


def _client(creds: KubeflowTrainerCredentials, namespace: str | None) -> AsyncTrainerClient:
    # Made inside the running loop, as the async client requires.
    from kf_trainer_core.client import AsyncTrainerClient

    return AsyncTrainerClient(creds.backend_config(), namespace=namespace)


def _log_sink(logger: Logger, job: str, step: str) -> Callable[[str], None]:
    prefix = f"[{job}/{step}]"

    def sink(line: str) -> None:
        logger.info("%s %s", prefix, line)

    return sink


def _announce(logger: Logger, job: TrainJob, created: bool, link: str | None) -> None:
    verb = "Submitted" if created else "Reattached to"
    logger.info(
        "%s TrainJob %s/%s (runtime %s, %s)%s",
        verb,
        job.namespace,
        job.name,
        job.runtime,
        job.status.value,
        f": {link}" if link else "",
    )


def _rows(outputs: JobOutputs) -> list[dict[str, Any]]:
    return steps_table(list(outputs.steps), dict(outputs.metrics), outputs.cost())


def _bad_ending(
    exc: BaseException, known: TrainJob | None, note: str | None, link: str | None
) -> tuple[str, str, list[dict[str, Any]]] | None:
    """The summary and table of a job that ended badly, when there is a job to show."""
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


def _finished(logger: Logger, result: JobOutputs) -> None:
    took = f" after {result.duration_seconds:.0f}s" if result.duration_seconds else ""
    cost = result.cost_text()
    took += f" ({cost})" if cost else ""
    logger.info("TrainJob %s/%s is %s%s", result.namespace, result.name, result.status.value, took)
    if result.metrics:
        shown = ", ".join(f"{k}={v}" for k, v in sorted(result.metrics.items()))
        logger.info("TrainJob %s/%s reported: %s", result.namespace, result.name, shown)


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


@dataclass
class _Prepared:
    run: RunInfo
    action: CancelAction
    spec: TrainJobSpec
    identity: Identity | None

    def attempt(
        self, creds: KubeflowTrainerCredentials, opts: RunOptions, shows: ArtifactPublisher | None
    ) -> _Attempt:
        """The hold on the job this task submits: known by name only when it has no
        identity (a fixed name), else found by identity until the submit answers."""
        name = opts.name if self.identity is None else None
        return _Attempt(
            self.run, creds, opts.namespace, self.action, shows, name=name, identity=self.identity
        )


def _prepare(spec: TrainJobSpec | Mapping[str, Any] | str, opts: RunOptions) -> _Prepared:
    run = current_run()
    action = check_action(opts.on_cancel)
    parsed = spec_of(spec)
    identity = identity_for(parsed, run, opts.identity, opts.name)
    return _Prepared(run, action, labelled(parsed, run), identity)


# ------------------------------------------------------------------- operations


async def run(
    spec: TrainJobSpec | Mapping[str, Any] | str,
    credentials: CredentialsLike | None,
    opts: RunOptions,
) -> JobOutputs:
    """Submit (or reattach to) the task's job, stream its log into the run logger, keep
    the progress artifact current, wait, and return the outputs; an interruption
    deletes, suspends or keeps the job per :func:`disposition` and ``on_cancel``."""
    prep = _prepare(spec, opts)
    creds = await aload_credentials(credentials)
    publisher = ArtifactPublisher(opts.artifacts)
    attempt = prep.attempt(creds, opts, publisher)
    async with runner_shutdown_cancels(), _client(creds, opts.namespace) as client, attempt:
        job = await _submit(client, prep, opts, attempt)
        await publisher.start(job, attempt.link)
        sink = _log_sink(prep.run.logger, job.name, opts.log_step) if opts.stream_logs else None
        result = await _with_progress(
            publisher,
            # This submit finds the job just submitted (running, or failed — which the
            # wait then reports): it never makes a second one.
            lambda on_update: client.run(
                prep.spec,
                name=opts.name,
                identity=prep.identity,
                fresh_after_failure=False,
                timeout=opts.timeout,
                startup_timeout=opts.startup_timeout,
                admission_timeout=opts.admission_timeout,
                on_log=sink,
                log_step=opts.log_step,
                log_tail=opts.log_tail,
                on_update=on_update,
                reuse_notice=False,  # announced above, as submitted or reattached
            ),
        )
    await publisher.finish(result.name, outputs_summary(result, link=attempt.link), _rows(result))
    _finished(prep.run.logger, result)
    return result


async def submit(
    spec: TrainJobSpec | Mapping[str, Any] | str,
    credentials: CredentialsLike | None,
    opts: RunOptions,
) -> TrainJob:
    """Submit (or reattach to) the task's job and return it."""
    prep = _prepare(spec, opts)
    creds = await aload_credentials(credentials)
    # Interrupted mid-request, the job may exist without the task knowing it: the
    # attempt looks for it by identity.
    attempt = prep.attempt(creds, opts, None)
    async with _client(creds, opts.namespace) as client, attempt:
        job = await _submit(client, prep, opts, attempt)
    await ArtifactPublisher(opts.artifacts).link(job, attempt.link)
    return job


async def _submit(
    client: AsyncTrainerClient, prep: _Prepared, opts: RunOptions, attempt: _Attempt
) -> TrainJob:
    submitted = await client.submit(
        prep.spec,
        name=opts.name,
        identity=prep.identity,
        fresh_after_failure=opts.fresh_after_failure,
    )
    attempt.known(submitted.job)
    _announce(prep.run.logger, submitted.job, submitted.created, attempt.link)
    return submitted.job


@dataclass
class WaitOptions:
    """How :func:`wait` waits (the task arguments)."""

    namespace: str | None = None
    status: tuple[str, ...] = (JobState.COMPLETE.value,)
    timeout: float | None = None
    startup_timeout: float | None = None
    on_cancel: str = "delete"
    artifacts: bool = True


async def wait(job: JobRef, credentials: CredentialsLike | None, opts: WaitOptions) -> JobOutputs:
    """Wait (event-driven) until the job reaches one of ``opts.status``, with the
    progress artifact kept current; return its outputs."""
    from kf_trainer_core.client import outputs

    run = current_run()
    action = check_action(opts.on_cancel)
    name = job_name_of(job)
    creds = await aload_credentials(credentials)
    publisher = ArtifactPublisher(opts.artifacts)
    attempt = _Attempt(run, creds, opts.namespace, action, publisher, name=name)
    async with runner_shutdown_cancels(), _client(creds, opts.namespace) as client, attempt:
        current = await client.get_job(name)
        attempt.known(current)
        await publisher.start(current, None)
        reached, value = await _with_progress(
            publisher,
            lambda on_update: client.wait(
                name,
                opts.status,
                timeout=opts.timeout,
                startup_timeout=opts.startup_timeout,
                callbacks=[on_update],
            ),
        )
    result = outputs(reached, value)
    await publisher.finish(result.name, outputs_summary(result, link=attempt.link), _rows(result))
    _finished(run.logger, result)
    return result


async def _with_progress(
    publisher: ArtifactPublisher,
    start: Callable[[Callable[[TrainJob], None]], Awaitable[T]],
) -> T:
    """Await the client call ``start(on_update)`` while pushing progress: callbacks run
    inside the client's wait and cannot await, so a companion task pushes the latest
    value whenever there is news."""
    news = asyncio.Event()

    def on_update(update: TrainJob) -> None:
        if publisher.progress.observe(update):
            news.set()

    async def pump() -> None:
        while True:
            await news.wait()
            news.clear()
            await publisher.flush()

    pumping = asyncio.ensure_future(pump())
    try:
        return await start(on_update)
    finally:
        pumping.cancel()


async def logs(
    job: JobRef,
    credentials: CredentialsLike | None,
    *,
    namespace: str | None,
    step: str,
    follow: bool,
    tail: int | None,
) -> int:
    """Log one step's lines into the run logger (following them as they are written
    when ``follow``); return how many were logged."""
    run = current_run()
    name = job_name_of(job)
    creds = await aload_credentials(credentials)
    sink = _log_sink(run.logger, name, step)
    count = 0
    async with runner_shutdown_cancels(), _client(creds, namespace) as client:
        async for line in client.get_job_logs(name, step, follow, tail=tail):
            sink(line)
            count += 1
    return count


async def outputs(
    job: JobRef, credentials: CredentialsLike | None, *, namespace: str | None, artifacts: bool
) -> JobOutputs:
    """The job's outputs now (status, steps, metrics, the function's return value)."""
    name = job_name_of(job)
    creds = await aload_credentials(credentials)
    async with _client(creds, namespace) as client:
        result = await client.get_job_outputs(name)
    if artifacts:
        link = creds.dashboard_link(result.namespace, result.name)
        await ArtifactPublisher(True).finish(
            result.name, outputs_summary(result, link=link), _rows(result)
        )
    return result


async def cancel(
    job: JobRef, credentials: CredentialsLike | None, *, namespace: str | None, action: str
) -> bool:
    """Delete, suspend or keep a job; ``True`` if something was done."""
    run = current_run()
    chosen = check_action(action)
    name = job_name_of(job)
    creds = await aload_credentials(credentials)
    async with _client(creds, namespace) as client:
        done = await client.cancel_job(name, chosen)
    run.logger.info("%s TrainJob %s", _past(chosen) if done else f"Nothing to {chosen} for", name)
    return done
