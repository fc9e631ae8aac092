"""``TrainerClient`` and ``AsyncTrainerClient``: the Kubeflow SDK's client surface,
idempotent and event-driven, over a real cluster or this machine.

>>> client = TrainerClient()                                  # kubeconfig / in-cluster
>>> name = client.train(trainer=CustomTrainer(train), identity=("dag", "task", "run"))
>>> job = client.wait_for_job_status(name)                    # one shared watch
>>> client.get_job_outputs(name).result                       # the function's return

Every operation is written once, as a program of :class:`_Operations` (built from
:mod:`kf_trainer_core.programs`); each client's method is
that program run by its driver (:func:`_blocking`, :func:`_awaiting`). The two clients
differ only in the driver, the informers and the waker they bring.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import time
import types
from collections.abc import (
    AsyncIterator,
    Callable,
    Coroutine,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from typing import Any, Concatenate, Generic, Literal, ParamSpec, TypeVar, overload

from typing_extensions import Unpack

from kf_trainer_core.client.base import (
    ClientBase,
    Identity,
    begin_call,
    end_call,
    interrupted,
    note_submitted,
)
from kf_trainer_core.cluster.outputs import JobOutputs, outputs
from kf_trainer_core.cluster.status import Event, Failure, JobState, Progress, TrainJob
from kf_trainer_core.config import LocalConfig
from kf_trainer_core.errors import RuntimeNotFoundError, TrainJobFailedError
from kf_trainer_core.fields import checks
from kf_trainer_core.fields.retention import PruneOptions
from kf_trainer_core.k8s.calls import Join, Program, Spawn
from kf_trainer_core.k8s.drivers import (
    AsyncDriver,
    AsyncTransportProtocol,
    SyncDriver,
    SyncTransportProtocol,
)
from kf_trainer_core.manifest.builder import BuiltTrainJob, identity_text
from kf_trainer_core.manifest.runtimes import PACKAGES_SOURCE, RuntimeInfo
from kf_trainer_core.programs.cancel import (
    cancel,
    delete,
    resume,
    set_suspended,
    stop_unfinished,
)
from kf_trainer_core.programs.checkpoints import checkpoints_program, cleaning_job
from kf_trainer_core.programs.informer import (
    AsyncInformer,
    InformerState,
    SyncInformer,
    async_informer,
    sync_informer,
)
from kf_trainer_core.programs.logs import follow_logs, read_logs
from kf_trainer_core.programs.outcome import Outcome, explain, get_job, outputs_of
from kf_trainer_core.programs.pod_batch import async_pod_batch, sync_pod_batch
from kf_trainer_core.programs.prune import PruneReport, PruneRules, prune
from kf_trainer_core.programs.reads import (
    get_events,
    get_object,
    list_jobs,
    list_runtimes,
    missing_namespace_error,
    namespace_missing,
)
from kf_trainer_core.programs.submit import Submitted, submit
from kf_trainer_core.programs.wait import (
    LOG_PROGRESS_INTERVAL,
    WaitGoal,
    job_emitter,
    wait_program,
)
from kf_trainer_core.programs.wakers import AsyncWaker, SyncWaker
from kf_trainer_core.spec import TrainJobSpec
from kf_trainer_core.spec.checkpoint_storage import (
    CheckpointLocation,
    Checkpoints,
    CheckpointsUnreachableError,
)

Callback = Callable[[TrainJob], None]
P = ParamSpec("P")
R = TypeVar("R")
S = TypeVar("S")
#: What a client's ``get_job_logs`` returns: an iterator, or an async one.
Lines = TypeVar("Lines", Iterator[str], AsyncIterator[str])


def _ignore(value: Any) -> None:
    """The sink of a wait's updates when nobody watches them."""


CancelAction = Literal["delete", "suspend", "keep"]

#: After a wait ends, a log follower gets this long to drain the last lines.
_LOG_DRAIN_SECONDS = 5.0


def _finishing(
    program: Callable[Concatenate[S, P], Program[Outcome]],
) -> Callable[[Callable[[Outcome], R]], Callable[Concatenate[S, P], Program[R]]]:
    """Decorate ``finish`` (what a wait returns of its :class:`Outcome`) into an operation:
    ``program``, taking its arguments, then ``finish``. The waits share one signature
    and one program; each says only what it returns (the docstring is ``finish``'s)."""

    def finishing(finish: Callable[[Outcome], R]) -> Callable[Concatenate[S, P], Program[R]]:
        def operation(self: S, /, *args: P.args, **kwargs: P.kwargs) -> Program[R]:
            return finish((yield from program(self, *args, **kwargs)))

        operation.__name__ = finish.__name__
        operation.__qualname__ = finish.__qualname__
        operation.__doc__ = finish.__doc__
        # help() and _named read the program's parameters and what ``finish`` returns.
        returns = inspect.signature(finish).return_annotation
        operation.__signature__ = inspect.signature(program).replace(  # type: ignore[attr-defined]
            return_annotation=f"Program[{returns}]"
        )
        return operation

    return finishing


class _Method(Generic[P, R]):
    """An operation as a method of both clients, declared once on :class:`_Operations`:
    ``factory``'s program, run by the client's face (its ``_face``: :func:`_blocking`
    runs it to its end, :func:`_awaiting` awaits it). Each client's method is made once,
    when the client class is made (``_Operations.__init_subclass__``)."""

    def __init__(self, factory: Callable[Concatenate[_Operations[Any], P], Program[R]]) -> None:
        self._factory = factory

    @overload
    def __get__(self, client: TrainerClient, owner: type[Any] | None = None) -> Callable[P, R]: ...

    @overload
    def __get__(
        self, client: AsyncTrainerClient, owner: type[Any] | None = None
    ) -> Callable[P, Coroutine[Any, Any, R]]: ...

    @overload
    def __get__(self, client: None, owner: type[Any]) -> Callable[..., Any]: ...

    def __get__(self, client: Any, owner: type[Any] | None = None) -> Callable[..., Any]:
        method = (owner if owner is not None else type(client))._face(self._factory)
        # From the class, the function (help() shows it); from a client, bound to it.
        return method if client is None else types.MethodType(method, client)


class _Operations(ClientBase, Generic[Lines]):
    """Every operation of the clients, once, as a program (``_name``: its docstring is
    the method's), and the clients' methods, once: ``name = _Method(_name)``, which each
    client runs through its driver (its ``_face``), and ``get_job_logs``."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "_face" not in cls.__dict__:
            return
        # Each client gets its methods as plain functions in its own namespace, made by
        # its face: what ``unittest.mock.create_autospec`` and ``vars()`` look for (a
        # descriptor there would make autospec keep ``self`` in every signature). The
        # ``_Method`` declarations stay for the type checker.
        for name, declared in vars(_Operations).items():
            if isinstance(declared, _Method):
                setattr(cls, name, declared.__get__(None, cls))

    # -- runtimes ----------------------------------------------------------------
    def _list_runtimes(self) -> Program[list[RuntimeInfo]]:
        """Cluster-wide and namespaced runtimes."""
        return list_runtimes(self.namespace)

    def _get_runtime(self, name: str, kind: str = "ClusterTrainingRuntime") -> Program[RuntimeInfo]:
        """One runtime (cached for this client)."""
        return self._runtime_program(name, kind)

    # -- submitting -------------------------------------------------------------
    def _build(
        self,
        spec: TrainJobSpec | Mapping[str, Any] | str,
        *,
        name: str | None = None,
        identity: Identity | None = None,
    ) -> Program[BuiltTrainJob]:
        """The manifest that :meth:`train` would submit, checked against the runtime
        and the namespace as the cluster has them: a namespace the cluster says does not
        exist raises :class:`~kf_trainer_core.errors.NamespaceNotFoundError`, as the
        submit would (``kf-trainer check`` is this call)."""
        spec = self._given_spec(spec)
        # The runtime first: a cluster out of reach fails there, once. A namespace that
        # does not exist is the cause, not its runtime, when both are missing.
        try:
            runtime = yield from self._runtime_program(spec.runtime.name, spec.runtime.kind.value)
        except RuntimeNotFoundError:
            missing = yield from namespace_missing(self.namespace)
            if not missing:
                raise
        else:
            missing = yield from namespace_missing(self.namespace)
        if missing:
            raise missing_namespace_error(self.namespace, "The TrainJob cannot be created")
        return self._builder(runtime)(spec, name=name, identity=identity)

    def _submit(
        self,
        spec: TrainJobSpec | Mapping[str, Any] | str,
        *,
        name: str | None = None,
        identity: Identity | None = None,
        fresh_after_failure: bool = True,
    ) -> Program[Submitted]:
        """Create the TrainJob, idempotently.

        With an ``identity`` (e.g. ``(dag_id, task_id, run_id, map_index)``) the job is
        found again by that identity: a retry after a crash reattaches to it, a retry
        after a failed job submits a fresh attempt (unless ``fresh_after_failure`` is
        off). Without one, a job of the same name and spec is adopted and a different
        spec under that name raises :class:`~kf_trainer_core.errors.SpecConflictError`.
        """
        spec = self._given_spec(spec)
        runtime = yield from self._runtime_program(spec.runtime.name, spec.runtime.kind.value)
        if identity is not None and name is None:
            done = yield from self._identity_program(spec, runtime, identity, fresh_after_failure)
        else:
            built = self._builder(runtime)(spec, name=name, identity=identity)
            done = yield from submit(self.namespace, built)
        note_submitted(done)  # a Ctrl-C from now on leaves this job running: say so
        return done

    def _train(
        self,
        runtime: Any = None,
        initializer: Any = None,
        trainer: Any = None,
        options: list[Any] | None = None,
        *,
        spec: TrainJobSpec | Mapping[str, Any] | None = None,
        identity: Identity | None = None,
    ) -> Program[str]:
        """Submit a job (SDK signature) and return its name. Without a name or an
        identity, each call is a new job (the SDK makes a random name per call)."""
        named = any(getattr(o, "type", "") == "Name" for o in options or [])
        if identity is None and spec is None and not named:
            import uuid

            identity = uuid.uuid4().hex
        job_spec = self._spec(spec, runtime, initializer, trainer, options)
        return (yield from self._submit(job_spec, identity=identity)).job.name

    # -- reading ----------------------------------------------------------------
    def _list_jobs(
        self,
        runtime: str | None = None,
        label_selector: str | None = None,
        *,
        page_size: int | None = None,
    ) -> Program[list[TrainJob]]:
        """Jobs of the namespace (optionally of one runtime), with their steps. Read
        ``page_size`` jobs a request (default: the config's ``list_page_size``)."""
        size = page_size or self._page_size
        jobs = yield from list_jobs(self.namespace, label_selector, size)
        return [j for j in jobs if runtime is None or j.runtime == runtime]

    def _get_job(self, name: str, *, log_progress: bool = False) -> Program[TrainJob]:
        """One job with its steps (and its Kueue queue status when Kueue queues it).
        With ``log_progress``, a job that reports in its log on a cluster without a
        status server gets its progress from there."""
        return get_job(self.namespace, name, kueue=self._kueue(), log_progress=log_progress)

    def _get_job_events(self, name: str) -> Program[list[Event]]:
        """Events of the job, its JobSet, Jobs and pods; :class:`TrainJobNotFoundError`
        for a job that does not exist (never an empty list that looks like a quiet job)."""
        yield from get_object(self.namespace, name)
        return (yield from get_events(self.namespace, name))

    def _get_job_outputs(self, name: str) -> Program[JobOutputs]:
        """Status, steps, metrics and the function's return value (``result_missing``
        says why a succeeded job's return value could not be read; nothing raises for
        it)."""
        obj = yield from get_object(self.namespace, name)
        done = yield from outputs_of(self.namespace, obj, kueue=self._kueue())
        return outputs(done.job, done.result, done.missing)

    def _explain_failure(self, name: str) -> Program[Failure]:
        """Why a job failed (or is stuck): its Failed condition, failing step and pod,
        container reason and exit code, warning events and its last log lines."""
        return explain(self.namespace, name, kueue=self._kueue())

    # -- waiting ----------------------------------------------------------------
    def _wait_outcome(
        self,
        name: str,
        status: Iterable[str | JobState] | str = ("Complete",),
        *,
        timeout: float | None = 600,
        polling_interval: float = 2,
        callbacks: Iterable[Callback] | None = None,
        startup_timeout: float | None = None,
        admission_timeout: float | None = None,
        on_progress: Callable[[Progress], None] | None = None,
        log_progress_interval: float | None = LOG_PROGRESS_INTERVAL,
    ) -> Program[Outcome]:
        """The program of a wait (see :meth:`_wait`), ending in the job's outcome: with
        the pods and why a result could not be read. :func:`_finishing` turns it into
        the waits that return less."""
        checks.check_seconds(
            timeout=timeout,
            polling_interval=polling_interval,
            startup_timeout=startup_timeout,
            admission_timeout=admission_timeout,
            log_progress_interval=log_progress_interval,
        )
        goal = WaitGoal.of(name, status, startup_timeout, admission_timeout)
        tracker = self._tracker()
        emit, log_every = job_emitter(callbacks, on_progress, log_progress_interval)
        with self._subscriptions(name) as (jobs, events, waker):
            verdict, obj = yield from wait_program(
                self.namespace,
                goal,
                jobs,
                events,
                waker,
                timeout=timeout,
                polling_interval=polling_interval,
                tracker=tracker,
                log_progress_interval=log_every,
                sink=emit or _ignore,
                explain_restarts=emit is not None,
            )
        queue = tracker.status if tracker else None
        return (yield from self._conclude(goal, verdict, obj, timeout=timeout, queue=queue))

    @_finishing(_wait_outcome)
    def _wait(done: Outcome) -> tuple[TrainJob, Any]:
        """Wait until the job reaches one of ``status``; return it with the function's
        return value. Raises TrainJobFailedError (a subclass per failure class, with the
        reason, failing step, exit code and log tail), TrainJobCreationFailedError,
        TrainJobTimeoutError, and TrainJobAdmissionTimeoutError when Kueue has not
        admitted a queued job within ``admission_timeout`` seconds. A job that reached
        the status is returned whatever node-0's log does: a return value that cannot be
        read (no termination message, log refused or gone) comes back as ``None``, and
        ``get_job_outputs(name).result_missing`` says why.

        ``callbacks`` get every new version of the job (a job queued by Kueue with its
        :class:`~kf_trainer_core.cluster.kueue.QueueStatus`); ``on_progress`` gets the job's
        :class:`Progress` each time what it reports changes (from the status server's
        ``trainerStatus`` or, without one, from node-0's log, read every
        ``log_progress_interval`` seconds while it runs; ``None`` never reads it)."""
        return done.job, done.result

    @_finishing(_wait_outcome)
    def _wait_outputs(done: Outcome) -> JobOutputs:
        """:meth:`wait`, returning the job's outputs (what an orchestrator keeps): the
        function's return value, metrics and cost, and ``result_missing`` saying why a
        succeeded job's return value could not be read. Raises as :meth:`wait` does."""
        return outputs(done.job, done.result, done.missing)

    def _wait_for_job_status(
        self,
        name: str,
        status: Iterable[str] | str = ("Complete",),
        timeout: float | None = 600,
        polling_interval: float = 2,
        callbacks: Iterable[Callback] | None = None,
    ) -> Program[TrainJob]:
        """SDK signature: wait and return the job. Watches; ``polling_interval`` is
        used only where watching is forbidden."""
        wait = self._wait(
            name, status, timeout=timeout, polling_interval=polling_interval, callbacks=callbacks
        )
        return (yield from wait)[0]

    def _run_job(
        self,
        spec: TrainJobSpec | Mapping[str, Any] | str,
        *,
        identity: Identity | None = None,
        name: str | None = None,
        timeout: float | None = None,
        startup_timeout: float | None = None,
        admission_timeout: float | None = None,
        on_log: Callable[[str], None] | None = None,
        log_step: str = "node-0",
        log_tail: int = 1000,
        on_update: Callable[[TrainJob], None] | None = None,
        on_submitted: Callable[[Submitted], None] | None = None,
        fresh_after_failure: bool = True,
        reuse_notice: bool = True,
        on_progress: Callable[[Progress], None] | None = None,
        log_progress_interval: float | None = LOG_PROGRESS_INTERVAL,
    ) -> Program[JobOutputs]:
        """Submit (idempotently), stream one step's log to ``on_log``, wait, and return
        the outputs — what an orchestrator task does. Raises as :meth:`wait` does.

        When the submit finds a job that had already finished (a rerun), ``on_log`` gets
        "reusing the finished job …" instead of its log replayed as if it trained again;
        callers that have just submitted the job themselves turn ``reuse_notice`` off.

        Ctrl-C while it waits (the sync client) raises
        :class:`~kf_trainer_core.errors.WaitInterrupted`, a ``KeyboardInterrupt`` whose
        message says that the job keeps running and how to stop or follow it."""
        # Settle the waiting and logging arguments before anything is submitted.
        checks.check_seconds(
            timeout=timeout, startup_timeout=startup_timeout, admission_timeout=admission_timeout
        )
        checks.check_step(log_step, "log_step")
        checks.check_count(log_tail=log_tail)
        submitted = yield from self._submit(
            spec, name=name, identity=identity, fresh_after_failure=fresh_after_failure
        )
        if on_submitted is not None:
            on_submitted(submitted)
        job_name = submitted.job.name
        follower = None
        notice = submitted.reuse_notice(self.config) if reuse_notice else None
        if notice is not None and on_log is not None:
            on_log(notice)
        elif on_log is not None:
            sink = on_log

            def ended(exc: Exception) -> None:  # logs are a courtesy: never fail for them
                sink(f"[kf-trainer] log stream ended: {exc}")

            # Beside the wait; stopped with the run when it ends otherwise than below
            # (timeouts and cancellation do not wait for logs).
            follower = yield Spawn(
                follow_logs(self.namespace, job_name, log_step, tail=log_tail),
                on_emit=sink,
                on_error=ended,
                name=f"kf-logs-{job_name}",
            )
        # The stream ends by itself once the containers have ended; the drain deadline
        # only bounds a log endpoint that keeps the connection open.
        drain = Join(follower, _LOG_DRAIN_SECONDS) if follower is not None else None
        try:
            done = yield from self._wait_outcome(
                job_name,
                timeout=timeout,
                startup_timeout=startup_timeout,
                admission_timeout=admission_timeout,
                callbacks=[on_update] if on_update else None,
                on_progress=on_progress,
                log_progress_interval=log_progress_interval,
            )
        except TrainJobFailedError:
            if drain is not None:
                yield drain  # the containers ended: keep their last lines
            raise
        if drain is not None:
            yield drain
        return outputs(done.job, done.result, done.missing)

    def _get_runtime_packages(
        self, runtime: str = "torch-distributed", *, timeout: float = 600
    ) -> Program[list[str]]:
        """Run a one-node job on ``runtime`` that lists its Python packages (and GPUs),
        and return that output (SDK ``get_runtime_packages``)."""
        from kf_trainer_core.spec import CustomTrainer

        spec = TrainJobSpec(runtime=runtime, trainer=CustomTrainer(PACKAGES_SOURCE, num_nodes=1))
        identity = f"runtime-packages/{runtime}/{time.time_ns()}"
        name = yield from self._train(spec=spec, identity=identity)
        yield from self._wait(name, timeout=timeout)
        return (yield from read_logs(self.namespace, name, "node-0", None, strict=True))

    # -- cancelling -------------------------------------------------------------
    def _cancel_job(self, name: str, action: CancelAction = "delete") -> Program[bool]:
        """Stop a job: ``delete`` it (pods and JobSet go with it), ``suspend`` it (kept,
        resumable) or ``keep`` it running. ``True`` if something was done; ``False`` for
        ``keep`` or a job already gone (a cancel is idempotent: an orchestrator's kill
        may come after the job ended and was deleted)."""
        return cancel(self.namespace, name, action)

    def _stop_unfinished(
        self,
        name: str | None = None,
        *,
        identity: str | Sequence[str | int | None] | None = None,
        label_selector: str | None = None,
        action: CancelAction = "delete",
    ) -> Program[list[str]]:
        """Apply ``action`` to the unfinished jobs picked by ``name``, by an orchestrator
        ``identity`` (every attempt submitted for it: how a task killed before it learnt
        its job's name stops that job) or by ``label_selector``; return the names acted
        on. Finished jobs are left alone, their results kept for a retry to collect."""
        return stop_unfinished(
            self.namespace,
            action,
            name=name,
            identity=identity_text(identity),
            label_selector=label_selector,
        )

    def _prune_jobs(
        self, *, page_size: int | None = None, **options: Unpack[PruneOptions]
    ) -> Program[PruneReport]:
        """Delete finished TrainJobs (and with them their JobSets, pods and Kueue
        Workloads); never an unfinished one, never checkpoints (``docs/retention.md``).
        The options are :class:`~kf_trainer_core.fields.retention.PruneOptions`.

        Picked: jobs that finished more than ``older_than`` ago (``"7d"``, ``"12h"``,
        seconds) and/or that are not among the newest ``keep_last`` attempts of their
        identity (both must hold when both are given), plus — unless
        ``honour_retention`` is off — jobs whose own stamped
        :class:`~kf_trainer_core.fields.retention.Retention` says they are due. Only jobs in
        ``statuses``, matching ``label_selector`` and ``identity_prefix``, and made by
        this suite (unless ``include_foreign``); at most ``limit`` a run, oldest first.
        Each is deleted only if it is unchanged since listed (a precondition on its uid
        and resourceVersion). ``dry_run`` returns the plan and deletes nothing."""
        rules = PruneRules.of(options)  # checked before the first request
        return prune(
            self.namespace,
            rules,
            dry_run=options.get("dry_run", False),
            page_size=page_size or self._page_size,
        )

    # -- checkpoints ------------------------------------------------------------
    def _checkpoint_location(
        self, identity: Identity, *, checkpoints: Checkpoints | None = None
    ) -> Program[CheckpointLocation]:
        """Where every attempt of ``identity`` keeps its checkpoints (``docs/checkpoints.md``)."""
        ident = identity_text(identity) or ""
        return checkpoints_program(self.config, self.namespace, ident, checkpoints, False, False)

    def _clean_checkpoints(
        self,
        identity: Identity,
        *,
        checkpoints: Checkpoints | None = None,
        force: bool = False,
        timeout: float | None = 600,
    ) -> Program[CheckpointLocation]:
        """Remove the checkpoints every attempt of ``identity`` shared, and nothing else:
        the only way they are deleted. Refused while an attempt runs (unless ``force``).
        On a cluster a one-node job that mounts the claim removes them (``timeout``)."""
        ident = identity_text(identity) or ""
        try:
            return (
                yield from checkpoints_program(
                    self.config, self.namespace, ident, checkpoints, True, force
                )
            )
        except CheckpointsUnreachableError as exc:
            location = exc.location
            job = cleaning_job(location)
            if job is None:
                raise
        done = yield from self._run_job(
            job[0], identity=job[1], timeout=timeout, fresh_after_failure=True
        )
        yield from self._delete_job(done.name)  # the suite's own helper job, finished
        return location

    def _delete_job(self, name: str, *, propagation: str = "Background") -> Program[bool]:
        """Delete the TrainJob (never only its JobSet); ``False`` if already gone."""
        return delete(self.namespace, name, propagation)

    def _suspend_job(self, name: str) -> Program[TrainJob]:
        """Suspend: the pods go, the job stays and can be resumed."""
        return set_suspended(self.namespace, name, True)

    def _resume_job(self, name: str) -> Program[TrainJob]:
        """Resume a suspended job. A job Kueue holds (labelled for a queue, its Workload
        not admitted) is left to Kueue, which would suspend it again at once: it comes
        back as it is, with its queue status, and runs when Kueue admits it."""
        return resume(self.namespace, name, self._kueue())

    # -- the clients' methods ----------------------------------------------------
    #: What each client brings: how it makes a method of an operation's program.
    _face: Callable[[Callable[..., Program[Any]]], Callable[..., Any]]

    def _lines(self, logs: Callable[[], Program[Any]], follow: bool) -> Lines:
        """The lines of the log program that ``logs`` makes, as this client gives them."""
        raise NotImplementedError

    def get_job_logs(
        self,
        name: str,
        step: str = "node-0",
        follow: bool = False,
        *,
        tail: int | None = None,
        raw: bool = False,
    ) -> Lines:
        """Log lines of one step; with ``follow``, as they are written, waiting for a
        pending pod and resuming after dropped connections.

        The lines are what a person reads: the suite's own progress and result lines
        are left out, control characters and terminal escapes neutralised and each line
        cut at 4,096 characters, saying so (the job wrote them: they are untrusted).
        ``raw``: every line exactly as the log holds it."""
        return self._lines(lambda: self._logs(name, step, follow, tail, raw), follow)

    list_runtimes = _Method(_list_runtimes)
    get_runtime = _Method(_get_runtime)
    build = _Method(_build)
    submit = _Method(_submit)
    train = _Method(_train)
    list_jobs = _Method(_list_jobs)
    get_job = _Method(_get_job)
    get_job_events = _Method(_get_job_events)
    get_job_outputs = _Method(_get_job_outputs)
    explain_failure = _Method(_explain_failure)
    wait = _Method(_wait)
    wait_for_job_status = _Method(_wait_for_job_status)
    wait_outputs = _Method(_wait_outputs)
    run = _Method(_run_job)
    get_runtime_packages = _Method(_get_runtime_packages)
    cancel_job = _Method(_cancel_job)
    stop_unfinished = _Method(_stop_unfinished)
    prune_jobs = _Method(_prune_jobs)
    checkpoint_location = _Method(_checkpoint_location)
    clean_checkpoints = _Method(_clean_checkpoints)
    delete_job = _Method(_delete_job)
    suspend_job = _Method(_suspend_job)
    resume_job = _Method(_resume_job)


def _named(method: Callable[..., Any], factory: Callable[..., Any], owner: str) -> None:
    # The operation's name without the program's underscore: how it shows in help().
    method.__name__ = factory.__name__.lstrip("_").replace("run_job", "run")
    method.__qualname__ = f"{owner}.{method.__name__}"
    # What the method returns is what the program returns (help() and IDEs show it).
    sig = inspect.signature(factory)
    result = sig.return_annotation
    if isinstance(result, str) and result.startswith("Program[") and result.endswith("]"):
        method.__signature__ = sig.replace(  # type: ignore[attr-defined]
            return_annotation=result[len("Program[") : -1]
        )


def _blocking(
    factory: Callable[Concatenate[_Operations[Any], P], Program[R]],
) -> Callable[Concatenate[TrainerClient, P], R]:
    """A :class:`TrainerClient` method: the operation's program, run to its end."""

    @functools.wraps(factory)
    def method(self: TrainerClient, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return self._run(factory(self, *args, **kwargs))

    _named(method, factory, "TrainerClient")
    return method


def _awaiting(
    factory: Callable[Concatenate[_Operations[Any], P], Program[R]],
) -> Callable[Concatenate[AsyncTrainerClient, P], Coroutine[Any, Any, R]]:
    """An :class:`AsyncTrainerClient` method: the same program, awaited."""

    @functools.wraps(factory)
    async def method(self: AsyncTrainerClient, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return await self._run(factory(self, *args, **kwargs))

    _named(method, factory, "AsyncTrainerClient")
    return method


class TrainerClient(_Operations[Iterator[str]]):
    """Runs TrainJobs on a cluster (``KubernetesConfig``, the default) or on this
    machine (``LocalConfig``), with the Kubeflow SDK's methods."""

    _driver: SyncDriver

    def _open(self) -> None:
        self._driver = SyncDriver(self._make_transport(), self.retry, self.request_hook)

    def _make_transport(self) -> SyncTransportProtocol:
        if isinstance(self.config, LocalConfig):
            from kf_trainer_core.backends.local import LocalTransport

            return LocalTransport(self.config)
        from kf_trainer_core.backends.kubernetes.transport import SyncTransport

        return SyncTransport(self.config)

    def _run(self, program: Program[R], on_emit: Callable[[Any], None] | None = None) -> R:
        token = begin_call()
        try:
            return self._driver.run(program, on_emit)
        except KeyboardInterrupt as exc:
            stopped = interrupted(self.config, exc)
            if stopped is exc:
                raise
            raise stopped from None  # the job keeps running: said, not a driver traceback
        finally:
            end_call(token)

    _waker = SyncWaker
    _registry = staticmethod(sync_informer)
    _pod_batch = staticmethod(sync_pod_batch)

    def _informer(self, state: InformerState) -> SyncInformer:
        def driver() -> SyncDriver:  # a fresh connection each time the loop restarts
            return SyncDriver(self._make_transport(), self.retry, self.request_hook)

        return SyncInformer(state, driver, **self._informer_timing())

    def close(self) -> None:
        """Release connections (informers shared with other clients keep theirs)."""
        self._driver.transport.close()

    def __enter__(self) -> TrainerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _lines(self, logs: Callable[[], Program[Any]], follow: bool) -> Iterator[str]:
        program = logs()
        return self._driver.iterate(program) if follow else iter(self._run(program))

    _face = staticmethod(_blocking)


#: Objects per list request of the async client (see ``AsyncTrainerClient``).
ASYNC_PAGE_CAP = 50


class AsyncTrainerClient(_Operations[AsyncIterator[str]]):
    """The same client for event loops (Airflow triggers, Prefect async tasks).
    Create it inside the loop that uses it."""

    _driver: AsyncDriver | None = None  # made inside the loop, on first use
    # A page of a list is decoded and read in one callback of the loop (json.loads
    # holds the GIL): small pages keep each under a few milliseconds.
    _page_cap = ASYNC_PAGE_CAP

    async def _make_driver(self) -> AsyncDriver:
        from kf_trainer_core.base.offloop import imported

        # The transports' modules import the backends' libraries: off the loop.
        transport: AsyncTransportProtocol
        if isinstance(self.config, LocalConfig):
            local = await imported("kf_trainer_core.backends.local")
            transport = local.AsyncLocalTransport(self.config)
        else:
            k8s = await imported("kf_trainer_core.backends.kubernetes.transport")
            transport = await k8s.AsyncTransport.create(self.config)
        return AsyncDriver(transport, self.retry, self.request_hook)

    _making: asyncio.Task[AsyncDriver] | None = None

    async def _ensure_driver(self) -> AsyncDriver:
        # Made once, whatever the number of calls waiting for it (a thousand concurrent
        # waits on a fresh client must not make a thousand connections).
        if self._driver is None:
            if self._making is None or (self._making.done() and self._making.exception()):
                self._making = asyncio.get_running_loop().create_task(self._make_driver())
            driver = await asyncio.shield(self._making)
            if self._driver is None:
                self._driver = driver
        return self._driver

    async def _run(self, program: Program[R], on_emit: Callable[[Any], None] | None = None) -> R:
        driver = await self._ensure_driver()
        return await driver.run(program, on_emit)

    _waker = AsyncWaker
    _registry = staticmethod(async_informer)
    _pod_batch = staticmethod(async_pod_batch)

    def _informer(self, state: InformerState) -> AsyncInformer:
        return AsyncInformer(state, self._make_driver, **self._informer_timing())

    async def close(self) -> None:
        self._making = None
        if self._driver is not None:
            await self._driver.transport.close()
            self._driver = None

    async def __aenter__(self) -> AsyncTrainerClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _lines(self, logs: Callable[[], Program[Any]], follow: bool) -> AsyncIterator[str]:
        # An async generator: the arguments are checked at the first line, as the
        # program is made only then.
        program = logs()
        driver = await self._ensure_driver()
        lines = driver.iterate(program) if follow else _aiter(await driver.run(program))
        async for line in lines:
            yield line

    _face = staticmethod(_awaiting)


async def _aiter(items: Iterable[str]) -> AsyncIterator[str]:
    for item in items:
        yield item
