"""What the tasks do inside a Prefect run: identity, submission, waiting, logs,
artifacts, and what happens to the job when the task is interrupted.

The decisions (the job's identity, what an interruption means, which jobs to stop, what
the summary says) are plain functions written once; the ``*_sync`` / ``*_async`` pairs
only carry them over the sync or the async client. They differ where Prefect does: a
sync task waits in a helper thread so that its own thread stays interruptible, an async
task pushes progress from a companion task and shields its clean-up from cancellation.

Kubernetes knowledge stays in :mod:`kf_trainer_core`; this module only translates
Prefect's lifecycle (run identity, timeouts, cancellation, crashes, retries, logger,
artifacts) into core client calls. The client is imported inside the functions, so
importing the tasks never imports a Kubernetes library.
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import json
import logging
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar
from uuid import UUID

from kf_trainer_core.spec import Labels, Name, TrainJobSpec
from kf_trainer_core.status import JobOutputs, JobState, TrainJob
from kf_trainer_prefect.artifacts import (
    ArtifactPublisher,
    AsyncArtifactPublisher,
    job_summary,
    outputs_summary,
    steps_table,
)
from kf_trainer_prefect.credentials import (
    CredentialsLike,
    KubeflowTrainerCredentials,
    aload_credentials,
    load_credentials,
)

T = TypeVar("T")

CancelAction = Literal["delete", "suspend", "keep"]
Identity = str | Sequence[str | int | None]
JobRef = TrainJob | JobOutputs | str
Logger = logging.Logger | logging.LoggerAdapter[logging.Logger]

#: The label that ties a TrainJob to the Prefect flow run that submitted it (the key
#: Prefect's Kubernetes worker puts on its Jobs for the same purpose).
FLOW_RUN_LABEL = "prefect.io/flow-run-id"

#: How often a synchronous task's own thread wakes while the client waits in a helper
#: thread: Prefect delivers timeouts to worker threads as an exception raised at the
#: next Python instruction, so that thread must not sit inside one long blocking call.
_SLICE_SECONDS = 0.5
#: How long an abandoned helper gets to notice that its job is gone or suspended.
_ABANDON_JOIN_SECONDS = 5.0

_CANCEL_ACTIONS = ("delete", "suspend", "keep")


class _Abandoned(Exception):
    """Raised inside a helper's callbacks to end a wait the task has given up on."""


class TaskRunnerShutdown(BaseException):
    """The flow's task runner is shutting down (its flow run is being cancelled or has
    crashed) while this task waited in one of its worker threads.

    A ``BaseException``, like Prefect's own cancellation: the task does not fail, it
    stops; its job is stopped too only if the flow run is being cancelled.
    """


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


def flow_cancelling_sync(run: RunInfo) -> bool:
    """Whether the flow run is being cancelled (asked of the Prefect API)."""
    if run.flow_run_id is None:
        return False
    from prefect.client.orchestration import get_client

    try:
        with get_client(sync_client=True) as client:
            return _cancelling_state(client.read_flow_run(UUID(run.flow_run_id)).state)
    except Exception:
        return False


async def flow_cancelling_async(run: RunInfo) -> bool:
    """See :func:`flow_cancelling_sync`."""
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


def interrupted_sync(
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
    from kf_trainer_core.client import TrainerClient

    verdict = disposition(exc, run, lambda: flow_cancelling_sync(run))
    acted: list[str] = []
    if (pick := _pick(verdict, name, identity, action)) is not None:
        try:
            # A client of its own: the interrupted one may be in use by a helper thread.
            with TrainerClient(creds.backend_config(), namespace=namespace) as client:
                acted = client.stop_unfinished(**pick)
        except Exception as err:
            run.logger.error("Could not stop TrainJob %s: %s", name or identity, err)
    return _concluded(exc, run, verdict, action, name, acted)


async def interrupted_async(
    exc: BaseException,
    run: RunInfo,
    creds: KubeflowTrainerCredentials,
    namespace: str | None,
    name: str | None,
    identity: Identity | None,
    action: CancelAction,
) -> _Interruption:
    """See :func:`interrupted_sync`."""
    from prefect.exceptions import TerminationSignal

    from kf_trainer_core.client import AsyncTrainerClient

    asks_state = isinstance(exc, (TerminationSignal, TaskRunnerShutdown))
    cancelling = await flow_cancelling_async(run) if asks_state else False
    verdict = disposition(exc, run, lambda: cancelling)
    acted: list[str] = []
    if (pick := _pick(verdict, name, identity, action)) is not None:
        try:
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


# ------------------------------------------------------------------- supervision


class Supervisor:
    """Runs a blocking client call in a helper thread while the task's own thread stays
    interruptible (Prefect timeouts, SIGTERM and Ctrl-C land there) and flushes
    progress.

    The helper sees the task's context (the Prefect run, its settings and logger). When
    the task's thread is interrupted, :attr:`stop` is set and the exception propagates;
    the helper's callbacks then end its wait at the job's next change (its deletion or
    suspension), and :meth:`abandon` gives it a moment to do so.
    """

    def __init__(self) -> None:
        self.stop = threading.Event()
        self._helper: threading.Thread | None = None
        self._shutdown = _runner_cancel_event()

    def run(self, call: Callable[[], T], flush: Callable[[], None] = lambda: None) -> T:
        ctx = contextvars.copy_context()
        done = threading.Event()
        box: dict[str, Any] = {}

        def target() -> None:
            try:
                box["value"] = ctx.run(call)
            except BaseException as exc:
                box["error"] = exc
            finally:
                done.set()

        self._helper = threading.Thread(target=target, name="kf-trainer-prefect", daemon=True)
        self._helper.start()
        try:
            while not done.wait(_SLICE_SECONDS):
                flush()
                if self._shutdown is not None and self._shutdown.is_set():
                    raise TaskRunnerShutdown("the flow's task runner is shutting down")
        except BaseException:
            self.stop.set()
            raise
        flush()
        if "error" in box:
            raise box["error"]
        value: T = box["value"]
        return value

    def abandon(self, wait: bool) -> None:
        """Let an interrupted helper end; wait briefly when its job is going away."""
        self.stop.set()
        if wait and self._helper is not None:
            self._helper.join(_ABANDON_JOIN_SECONDS)


def _runner_cancel_event() -> threading.Event | None:
    """The event a flow's thread-pool task runner sets for this task run when it shuts
    down (``cancel_all``): how a task in a worker thread learns that its flow run is
    going down. Prefect keeps these events privately, so this is best effort; the flow
    hooks (:mod:`kf_trainer_prefect.flows`) are the guarantee."""
    from prefect.context import FlowRunContext, TaskRunContext

    task_ctx = TaskRunContext.get()
    flow_ctx = FlowRunContext.get()
    if task_ctx is None or flow_ctx is None:
        return None
    events = getattr(flow_ctx.task_runner, "_cancel_events", None)
    event = events.get(task_ctx.task_run.id) if isinstance(events, dict) else None
    return event if isinstance(event, threading.Event) else None


def _log_sink(logger: Logger, job: str, step: str, stop: threading.Event | None) -> Any:
    prefix = f"[{job}/{step}]"

    def sink(line: str) -> None:
        if stop is not None and stop.is_set():
            return
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


# ----------------------------------------------------------------------- options


@dataclass
class RunOptions:
    """How :func:`run_sync` / :func:`run_async` run one job (the task arguments)."""

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


def _prepare(spec: TrainJobSpec | Mapping[str, Any] | str, opts: RunOptions) -> _Prepared:
    run = current_run()
    action = check_action(opts.on_cancel)
    parsed = spec_of(spec)
    identity = identity_for(parsed, run, opts.identity, opts.name)
    return _Prepared(run, action, labelled(parsed, run), identity)


# --------------------------------------------------------------------------- run


def run_sync(
    spec: TrainJobSpec | Mapping[str, Any] | str,
    credentials: CredentialsLike | None,
    opts: RunOptions,
) -> JobOutputs:
    """Submit (or reattach to) the task's job, stream its log into the run logger, keep
    the progress artifact current, wait, and return the outputs; an interruption
    deletes, suspends or keeps the job per :func:`disposition` and ``on_cancel``."""
    from kf_trainer_core.client import TrainerClient

    prep = _prepare(spec, opts)
    creds = load_credentials(credentials)
    publisher = ArtifactPublisher(opts.artifacts)
    supervisor = Supervisor()
    job: TrainJob | None = None
    link: str | None = None
    with TrainerClient(creds.backend_config(), namespace=opts.namespace) as client:
        try:
            submitted = client.submit(
                prep.spec,
                name=opts.name,
                identity=prep.identity,
                fresh_after_failure=opts.fresh_after_failure,
            )
            job = submitted.job
            link = creds.dashboard_link(job.namespace, job.name)
            _announce(prep.run.logger, job, submitted.created, link)
            publisher.start(job, link)
            name = job.name
            stop = supervisor.stop

            def on_update(update: TrainJob) -> None:
                if stop.is_set():
                    raise _Abandoned(name)
                publisher.progress.observe(update)

            def call() -> JobOutputs:
                # This submit finds the job just submitted (running, or failed — which
                # the wait then reports): it never makes a second one.
                return client.run(
                    prep.spec,
                    name=opts.name,
                    identity=prep.identity,
                    fresh_after_failure=False,
                    timeout=opts.timeout,
                    startup_timeout=opts.startup_timeout,
                    admission_timeout=opts.admission_timeout,
                    on_log=_log_sink(prep.run.logger, name, opts.log_step, stop)
                    if opts.stream_logs
                    else None,
                    log_step=opts.log_step,
                    log_tail=opts.log_tail,
                    on_update=on_update,
                    reuse_notice=False,  # announced above, as submitted or reattached
                )

            result = supervisor.run(call, publisher.flush)
        except BaseException as exc:
            what = interrupted_sync(
                exc,
                prep.run,
                creds,
                opts.namespace,
                job.name if job else (opts.name if prep.identity is None else None),
                prep.identity,
                prep.action,
            )
            supervisor.abandon(wait=bool(what.acted))
            shown = _bad_ending(exc, job, what.note, link)
            if shown is not None:
                publisher.finish(*shown)
            raise
    publisher.finish(result.name, outputs_summary(result, link=link), _rows(result))
    _finished(prep.run.logger, result)
    return result


async def run_async(
    spec: TrainJobSpec | Mapping[str, Any] | str,
    credentials: CredentialsLike | None,
    opts: RunOptions,
) -> JobOutputs:
    """The async twin of :func:`run_sync`, on the async client (made in this loop)."""
    from kf_trainer_core.client import AsyncTrainerClient

    prep = _prepare(spec, opts)
    creds = await aload_credentials(credentials)
    publisher = AsyncArtifactPublisher(opts.artifacts)
    job: TrainJob | None = None
    link: str | None = None
    async with AsyncTrainerClient(creds.backend_config(), namespace=opts.namespace) as client:
        try:
            submitted = await client.submit(
                prep.spec,
                name=opts.name,
                identity=prep.identity,
                fresh_after_failure=opts.fresh_after_failure,
            )
            job = submitted.job
            link = creds.dashboard_link(job.namespace, job.name)
            _announce(prep.run.logger, job, submitted.created, link)
            await publisher.astart(job, link)
            result = await _with_progress(
                publisher,
                lambda on_update: client.run(
                    prep.spec,
                    name=opts.name,
                    identity=prep.identity,
                    fresh_after_failure=False,
                    timeout=opts.timeout,
                    startup_timeout=opts.startup_timeout,
                    admission_timeout=opts.admission_timeout,
                    on_log=_log_sink(prep.run.logger, job.name, opts.log_step, None)
                    if opts.stream_logs and job is not None
                    else None,
                    log_step=opts.log_step,
                    log_tail=opts.log_tail,
                    on_update=on_update,
                    reuse_notice=False,  # announced above, as submitted or reattached
                ),
            )
        except BaseException as exc:
            await shielded(
                _async_bad_ending(
                    exc,
                    prep.run,
                    creds,
                    opts.namespace,
                    job.name if job else (opts.name if prep.identity is None else None),
                    prep.identity,
                    prep.action,
                    job,
                    publisher,
                    link,
                )
            )
            raise
    await publisher.afinish(result.name, outputs_summary(result, link=link), _rows(result))
    _finished(prep.run.logger, result)
    return result


async def _with_progress(
    publisher: AsyncArtifactPublisher,
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
            await publisher.aflush()

    pumping = asyncio.ensure_future(pump())
    try:
        return await start(on_update)
    finally:
        pumping.cancel()


async def _async_bad_ending(
    exc: BaseException,
    run: RunInfo,
    creds: KubeflowTrainerCredentials,
    namespace: str | None,
    name: str | None,
    identity: Identity | None,
    action: CancelAction,
    job: TrainJob | None,
    publisher: AsyncArtifactPublisher,
    link: str | None,
) -> None:
    what = await interrupted_async(exc, run, creds, namespace, name, identity, action)
    shown = _bad_ending(exc, job, what.note, link)
    if shown is not None:
        await publisher.afinish(*shown)


# ------------------------------------------------------------------------ submit


def submit_sync(
    spec: TrainJobSpec | Mapping[str, Any] | str,
    credentials: CredentialsLike | None,
    opts: RunOptions,
) -> TrainJob:
    """Submit (or reattach to) the task's job and return it."""
    from kf_trainer_core.client import TrainerClient

    prep = _prepare(spec, opts)
    creds = load_credentials(credentials)
    publisher = ArtifactPublisher(opts.artifacts)
    with TrainerClient(creds.backend_config(), namespace=opts.namespace) as client:
        try:
            submitted = client.submit(
                prep.spec,
                name=opts.name,
                identity=prep.identity,
                fresh_after_failure=opts.fresh_after_failure,
            )
        except BaseException as exc:
            # Interrupted mid-request, the job may exist without the task knowing it.
            interrupted_sync(
                exc,
                prep.run,
                creds,
                opts.namespace,
                opts.name if prep.identity is None else None,
                prep.identity,
                prep.action,
            )
            raise
    job = submitted.job
    link = creds.dashboard_link(job.namespace, job.name)
    _announce(prep.run.logger, job, submitted.created, link)
    publisher.link(job, link)
    return job


async def submit_async(
    spec: TrainJobSpec | Mapping[str, Any] | str,
    credentials: CredentialsLike | None,
    opts: RunOptions,
) -> TrainJob:
    """See :func:`submit_sync`."""
    from kf_trainer_core.client import AsyncTrainerClient

    prep = _prepare(spec, opts)
    creds = await aload_credentials(credentials)
    publisher = AsyncArtifactPublisher(opts.artifacts)
    async with AsyncTrainerClient(creds.backend_config(), namespace=opts.namespace) as client:
        try:
            submitted = await client.submit(
                prep.spec,
                name=opts.name,
                identity=prep.identity,
                fresh_after_failure=opts.fresh_after_failure,
            )
        except BaseException as exc:
            await shielded(
                interrupted_async(
                    exc,
                    prep.run,
                    creds,
                    opts.namespace,
                    opts.name if prep.identity is None else None,
                    prep.identity,
                    prep.action,
                )
            )
            raise
    job = submitted.job
    link = creds.dashboard_link(job.namespace, job.name)
    _announce(prep.run.logger, job, submitted.created, link)
    await publisher.alink(job, link)
    return job


# -------------------------------------------------------------------------- wait


@dataclass
class WaitOptions:
    """How :func:`wait_sync` / :func:`wait_async` wait (the task arguments)."""

    namespace: str | None = None
    status: tuple[str, ...] = (JobState.COMPLETE.value,)
    timeout: float | None = None
    startup_timeout: float | None = None
    on_cancel: str = "delete"
    artifacts: bool = True


def wait_sync(job: JobRef, credentials: CredentialsLike | None, opts: WaitOptions) -> JobOutputs:
    """Wait (event-driven) until the job reaches one of ``opts.status``, with the
    progress artifact kept current; return its outputs."""
    from kf_trainer_core.client import TrainerClient, outputs

    run = current_run()
    action = check_action(opts.on_cancel)
    name = job_name_of(job)
    creds = load_credentials(credentials)
    publisher = ArtifactPublisher(opts.artifacts)
    supervisor = Supervisor()
    link: str | None = None
    current: TrainJob | None = None
    with TrainerClient(creds.backend_config(), namespace=opts.namespace) as client:
        try:
            current = client.get_job(name)
            link = creds.dashboard_link(current.namespace, current.name)
            publisher.start(current, None)
            stop = supervisor.stop

            def on_update(update: TrainJob) -> None:
                if stop.is_set():
                    raise _Abandoned(name)
                publisher.progress.observe(update)

            reached, value = supervisor.run(
                lambda: client.wait(
                    name,
                    opts.status,
                    timeout=opts.timeout,
                    startup_timeout=opts.startup_timeout,
                    callbacks=[on_update],
                ),
                publisher.flush,
            )
        except BaseException as exc:
            what = interrupted_sync(exc, run, creds, opts.namespace, name, None, action)
            supervisor.abandon(wait=bool(what.acted))
            shown = _bad_ending(exc, current, what.note, link)
            if shown is not None:
                publisher.finish(*shown)
            raise
    result = outputs(reached, value)
    publisher.finish(result.name, outputs_summary(result, link=link), _rows(result))
    _finished(run.logger, result)
    return result


async def wait_async(
    job: JobRef, credentials: CredentialsLike | None, opts: WaitOptions
) -> JobOutputs:
    """See :func:`wait_sync`."""
    from kf_trainer_core.client import AsyncTrainerClient, outputs

    run = current_run()
    action = check_action(opts.on_cancel)
    name = job_name_of(job)
    creds = await aload_credentials(credentials)
    publisher = AsyncArtifactPublisher(opts.artifacts)
    link: str | None = None
    current: TrainJob | None = None
    async with AsyncTrainerClient(creds.backend_config(), namespace=opts.namespace) as client:
        try:
            current = await client.get_job(name)
            link = creds.dashboard_link(current.namespace, current.name)
            await publisher.astart(current, None)
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
        except BaseException as exc:
            await shielded(
                _async_bad_ending(
                    exc, run, creds, opts.namespace, name, None, action, current, publisher, link
                )
            )
            raise
    result = outputs(reached, value)
    await publisher.afinish(result.name, outputs_summary(result, link=link), _rows(result))
    _finished(run.logger, result)
    return result


# ---------------------------------------------------------------- logs, outputs


def logs_sync(
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
    from kf_trainer_core.client import TrainerClient

    run = current_run()
    name = job_name_of(job)
    creds = load_credentials(credentials)
    supervisor = Supervisor()
    sink = _log_sink(run.logger, name, step, supervisor.stop)
    count = 0

    def call() -> int:
        nonlocal count
        for line in client.get_job_logs(name, step, follow, tail=tail):
            if supervisor.stop.is_set():
                break
            sink(line)
            count += 1
        return count

    with TrainerClient(creds.backend_config(), namespace=namespace) as client:
        try:
            return supervisor.run(call)
        except BaseException:
            supervisor.abandon(wait=False)
            raise


async def logs_async(
    job: JobRef,
    credentials: CredentialsLike | None,
    *,
    namespace: str | None,
    step: str,
    follow: bool,
    tail: int | None,
) -> int:
    """See :func:`logs_sync`."""
    from kf_trainer_core.client import AsyncTrainerClient

    run = current_run()
    name = job_name_of(job)
    creds = await aload_credentials(credentials)
    sink = _log_sink(run.logger, name, step, None)
    count = 0
    async with AsyncTrainerClient(creds.backend_config(), namespace=namespace) as client:
        async for line in client.get_job_logs(name, step, follow, tail=tail):
            sink(line)
            count += 1
    return count


def outputs_sync(
    job: JobRef, credentials: CredentialsLike | None, *, namespace: str | None, artifacts: bool
) -> JobOutputs:
    """The job's outputs now (status, steps, metrics, the function's return value)."""
    from kf_trainer_core.client import TrainerClient

    name = job_name_of(job)
    creds = load_credentials(credentials)
    with TrainerClient(creds.backend_config(), namespace=namespace) as client:
        result = client.get_job_outputs(name)
    if artifacts:
        link = creds.dashboard_link(result.namespace, result.name)
        ArtifactPublisher(True).finish(
            result.name, outputs_summary(result, link=link), _rows(result)
        )
    return result


async def outputs_async(
    job: JobRef, credentials: CredentialsLike | None, *, namespace: str | None, artifacts: bool
) -> JobOutputs:
    """See :func:`outputs_sync`."""
    from kf_trainer_core.client import AsyncTrainerClient

    name = job_name_of(job)
    creds = await aload_credentials(credentials)
    async with AsyncTrainerClient(creds.backend_config(), namespace=namespace) as client:
        result = await client.get_job_outputs(name)
    if artifacts:
        link = creds.dashboard_link(result.namespace, result.name)
        await AsyncArtifactPublisher(True).afinish(
            result.name, outputs_summary(result, link=link), _rows(result)
        )
    return result


def cancel_sync(
    job: JobRef, credentials: CredentialsLike | None, *, namespace: str | None, action: str
) -> bool:
    """Delete, suspend or keep a job; ``True`` if something was done."""
    from kf_trainer_core.client import TrainerClient

    run = current_run()
    chosen = check_action(action)
    name = job_name_of(job)
    creds = load_credentials(credentials)
    with TrainerClient(creds.backend_config(), namespace=namespace) as client:
        done = client.cancel_job(name, chosen)
    run.logger.info("%s TrainJob %s", _past(chosen) if done else f"Nothing to {chosen} for", name)
    return done


async def cancel_async(
    job: JobRef, credentials: CredentialsLike | None, *, namespace: str | None, action: str
) -> bool:
    """See :func:`cancel_sync`."""
    from kf_trainer_core.client import AsyncTrainerClient

    run = current_run()
    chosen = check_action(action)
    name = job_name_of(job)
    creds = await aload_credentials(credentials)
    async with AsyncTrainerClient(creds.backend_config(), namespace=namespace) as client:
        done = await client.cancel_job(name, chosen)
    run.logger.info("%s TrainJob %s", _past(chosen) if done else f"Nothing to {chosen} for", name)
    return done
