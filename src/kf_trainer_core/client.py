"""``TrainerClient`` and ``AsyncTrainerClient``: the Kubeflow SDK's client surface,
idempotent and event-driven, over a real cluster or this machine.

>>> client = TrainerClient()                                  # kubeconfig / in-cluster
>>> name = client.train(trainer=CustomTrainer(train), identity=("dag", "task", "run"))
>>> job = client.wait_for_job_status(name)                    # one shared watch
>>> client.get_job_outputs(name).result                       # the function's return

Both clients run the same programs (:mod:`kf_trainer_core.ops`,
:mod:`kf_trainer_core.waiting`); they differ only in the driver that performs calls.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import Any, Literal

from kf_trainer_core import checks, names, ops
from kf_trainer_core.builder import BuiltTrainJob, build_trainjob, identity_text
from kf_trainer_core.checkpoint_storage import (
    CheckpointLocation,
    Checkpoints,
    CheckpointsUnreachableError,
    checkpoints_program,
    cleaning_job,
    require_storage,
)
from kf_trainer_core.config import KubernetesConfig, LocalConfig, parse_backend
from kf_trainer_core.cost import job_cost
from kf_trainer_core.errors import SpecError
from kf_trainer_core.informer import (
    AsyncInformer,
    AsyncWaker,
    InformerState,
    JobSubscription,
    Subscription,
    SyncInformer,
    SyncWaker,
    async_informer,
    by_involved_object,
    label_predicate,
    slim_trainjob,
    sync_informer,
)
from kf_trainer_core.k8s.calls import Program
from kf_trainer_core.k8s.drivers import AsyncDriver, CallHook, SyncDriver
from kf_trainer_core.k8s.paging import DEFAULT_PAGE_SIZE
from kf_trainer_core.k8s.resources import EVENTS, TRAINJOBS
from kf_trainer_core.k8s.retry import DEFAULT_POLICY, RetryPolicy
from kf_trainer_core.kueue import KueueProbe, QueueTracker, probe_for
from kf_trainer_core.runtimes import RuntimeInfo
from kf_trainer_core.selectors import SUITE_SELECTOR
from kf_trainer_core.spec import TrainJobSpec, train_spec
from kf_trainer_core.status import (
    CREATION_FAILED_REASON,
    Event,
    Failure,
    JobOutputs,
    JobState,
    Progress,
    TrainJob,
    job_state,
)
from kf_trainer_core.waiting import (
    LOG_PROGRESS_INTERVAL,
    TrainJobFailedError,
    WaitGoal,
    conclude,
    job_emitter,
    wait_program,
)

Identity = str | Sequence[str | int | None]
Callback = Callable[[TrainJob], None]


def _brief(informer: Any) -> Any:
    # A per-name watch serves the waits on one foreign job: it ends with the last of them
    # rather than lingering for the next wait, as the shared watch does.
    informer.linger = 0.0
    return informer


def _backend(
    backend: KubernetesConfig | LocalConfig | Mapping[str, Any] | None,
) -> KubernetesConfig | LocalConfig:
    if backend is None:
        return KubernetesConfig()
    if isinstance(backend, (KubernetesConfig, LocalConfig)):
        return backend
    if not isinstance(backend, Mapping):
        raise SpecError.single(
            "backend",
            f"a {type(backend).__name__} ({backend!r}) is not a backend configuration."
            if isinstance(backend, str)
            else f"a {type(backend).__name__} is not a backend configuration.",
            "pass LocalConfig() or {'backend': 'local'} for this machine, "
            "ContainerConfig(image=...) for containers here, "
            "KubernetesConfig(...) or its dict for a cluster, or nothing for the default "
            "kubeconfig.",
            title="Invalid client configuration",
        )
    return parse_backend(dict(backend))


def _required(spec: Any) -> Any:
    if spec is None:
        # train_spec() of nothing is a job without a trainer: never what was meant here.
        raise SpecError.single(
            "spec",
            "no spec was given.",
            "pass a TrainJobSpec (or its dict/JSON form), or call train(trainer=...).",
        )
    return spec


class _Base:
    """What both clients share: configuration, building, and the programs they run."""

    def __init__(
        self,
        backend: KubernetesConfig | LocalConfig | Mapping[str, Any] | None = None,
        *,
        namespace: str | None = None,
        retry: RetryPolicy = DEFAULT_POLICY,
        request_hook: CallHook | None = None,
    ) -> None:
        self.config = _backend(backend)
        if isinstance(self.config, KubernetesConfig):
            # Both clients, before any request: a kubeconfig that is missing or broken.
            self.config.check_usable()
        if namespace is not None:
            checks.check_namespace(namespace)
        # The kubeconfig context's namespace is checked too: it names paths locally.
        self.namespace = checks.check_namespace(namespace or self.config.resolve_namespace())
        self.retry = retry
        self.request_hook = request_hook
        self._runtime_cache: dict[tuple[str, str], RuntimeInfo] = {}

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(backend={self.config.backend!r}, namespace={self.namespace!r})"
        )

    def _informer_key(self, what: str) -> tuple[Any, ...]:
        cfg = self.config
        cluster = cfg.cache_key() if isinstance(cfg, KubernetesConfig) else ("local", cfg.state_dir)
        return (cluster, what, self.namespace)

    def _events_state(self) -> InformerState:
        return InformerState(
            EVENTS,
            self.namespace,
            field_selector=f"involvedObject.kind=TrainJob,reason={CREATION_FAILED_REASON}",
            key=by_involved_object,
            page_size=self._page_size,
        )

    @property
    def _page_size(self) -> int:
        cfg = self.config
        return cfg.list_page_size if isinstance(cfg, KubernetesConfig) else DEFAULT_PAGE_SIZE

    def _jobs_state(self) -> InformerState:
        # The suite's own jobs only, finished ones kept as stubs unless waited on.
        return InformerState(
            TRAINJOBS,
            self.namespace,
            label_selector=SUITE_SELECTOR,
            slim=slim_trainjob,
            finished=lambda obj: job_state(obj).terminal,
            page_size=self._page_size,
        )

    def _named_job_state(self, name: str) -> InformerState:
        # A job the suite did not create: watched by its name alone.
        return InformerState(
            TRAINJOBS, self.namespace, field_selector=f"metadata.name={name}", slim=slim_trainjob
        )

    def _kueue(self) -> KueueProbe | None:
        """What this cluster and namespace have shown of Kueue (shared by every client
        of the process); ``None`` for the local backend, which has no Kueue."""
        if isinstance(self.config, LocalConfig):
            return None
        return probe_for(self._informer_key("kueue"))

    def _tracker(self) -> QueueTracker | None:
        probe = self._kueue()
        return QueueTracker(self.namespace, probe) if probe is not None else None

    def _wait_programs(
        self,
        name: str,
        status: Iterable[str | JobState] | str,
        timeout: float | None,
        polling_interval: float,
        startup_timeout: float | None,
        admission_timeout: float | None,
        callbacks: Iterable[Callback] | None,
        on_progress: Callable[[Progress], None] | None,
        log_progress_interval: float | None,
    ) -> tuple[
        WaitGoal, QueueTracker | None, Callable[..., Program[Any]], Callable[[Any], None] | None
    ]:
        """The goal, the queue tracker, a factory of the wait program and what the
        program's emissions go to, shared by both clients' ``wait``."""
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

        def program(jobs: Any, events: Any, waker: Any) -> Program[Any]:
            return wait_program(
                self.namespace,
                goal,
                jobs,
                events,
                waker,
                timeout=timeout,
                polling_interval=polling_interval,
                tracker=tracker,
                log_progress_interval=log_every,
            )

        return goal, tracker, program, emit

    @staticmethod
    def _spec(
        spec: TrainJobSpec | Mapping[str, Any] | str | None,
        runtime: Any,
        initializer: Any,
        trainer: Any,
        options: Any,
    ) -> TrainJobSpec:
        if spec is not None:
            return spec if isinstance(spec, TrainJobSpec) else TrainJobSpec.parse(spec)
        return train_spec(
            runtime=runtime, trainer=trainer, initializer=initializer, options=options
        )

    @staticmethod
    def _train_args(
        spec: TrainJobSpec | Mapping[str, Any] | None,
        runtime: Any,
        initializer: Any,
        trainer: Any,
        options: list[Any] | None,
        identity: Identity | None,
    ) -> tuple[TrainJobSpec, Identity | None]:
        """The SDK's ``train`` arguments as a spec and an identity: without a name or an
        identity, each call is a new job (the SDK makes a random name per call)."""
        named = any(getattr(o, "type", "") == "Name" for o in options or [])
        if identity is None and spec is None and not named:
            import uuid

            identity = uuid.uuid4().hex
        return _Base._spec(spec, runtime, initializer, trainer, options), identity

    def _runtime_program(self, name: str, kind: str) -> Program[RuntimeInfo]:
        """A runtime as the cluster has it, read once per client."""
        key = (name, kind)
        if key not in self._runtime_cache:
            info, _ = yield from ops.get_runtime(name, kind, self.namespace)
            self._runtime_cache[key] = info
        return self._runtime_cache[key]

    def _build_program(
        self,
        spec: TrainJobSpec | Mapping[str, Any] | str,
        name: str | None,
        identity: Identity | None,
    ) -> Program[BuiltTrainJob]:
        spec = self._spec(_required(spec), None, None, None, None)
        require_storage(spec, cluster=isinstance(self.config, KubernetesConfig))
        runtime = yield from self._runtime_program(spec.runtime.name, spec.runtime.kind.value)
        return build_trainjob(
            spec, namespace=self.namespace, name=name, identity=identity, runtime=runtime
        )

    def _submit_program(
        self,
        spec: TrainJobSpec | Mapping[str, Any] | str,
        name: str | None,
        identity: Identity | None,
        fresh_after_failure: bool,
    ) -> Program[ops.Submitted]:
        spec = self._spec(_required(spec), None, None, None, None)
        require_storage(spec, cluster=isinstance(self.config, KubernetesConfig))
        runtime = yield from self._runtime_program(spec.runtime.name, spec.runtime.kind.value)
        if identity is not None and name is None:
            return (yield from self._identity_program(spec, runtime, identity, fresh_after_failure))
        built = build_trainjob(
            spec, namespace=self.namespace, name=name, identity=identity, runtime=runtime
        )
        return (yield from ops.submit(self.namespace, built))

    def _outputs_program(self, name: str) -> Program[JobOutputs]:
        obj = yield from ops.get_object(self.namespace, name)
        job, result, _ = yield from ops.outputs_of(self.namespace, obj, kueue=self._kueue())
        return outputs(job, result)

    def _stop_program(
        self,
        name: str | None,
        identity: str | Sequence[str | int | None] | None,
        label_selector: str | None,
        action: str,
    ) -> Program[list[str]]:
        return ops.stop_unfinished(
            self.namespace,
            action,
            name=name,
            identity=identity_text(identity),
            label_selector=label_selector,
        )

    def _checkpoints_program(
        self, identity: Identity, option: Checkpoints | None, clean: bool, force: bool
    ) -> Program[CheckpointLocation]:
        return checkpoints_program(
            self.config, self.namespace, identity_text(identity) or "", option, clean, force
        )

    def _identity_program(
        self,
        spec: TrainJobSpec,
        runtime: RuntimeInfo | None,
        identity: Identity,
        fresh_after_failure: bool,
    ) -> Program[ops.Submitted]:
        """Submit for an orchestrator identity: reattach to its job, or — when the last
        attempt failed and ``fresh_after_failure`` — submit the next attempt."""
        ident = identity_text(identity)
        assert ident is not None
        existing = yield from ops.jobs_for_identity(self.namespace, ident)
        attempt = ops.choose_attempt(existing, fresh_after_failure)
        built = build_trainjob(
            spec, namespace=self.namespace, identity=ident, runtime=runtime, attempt=attempt
        )
        return (yield from ops.submit(self.namespace, built))


#: What ``get_runtime_packages`` runs on a node of the runtime.
_PACKAGES_SOURCE = """\
def print_packages():
    import shutil
    import subprocess
    import sys

    pip = [sys.executable, "-m", "pip", "list"]
    print(subprocess.run(pip, capture_output=True, text=True).stdout)
    if shutil.which("nvidia-smi"):
        print(subprocess.run(["nvidia-smi"], capture_output=True, text=True).stdout)
"""

CancelAction = Literal["delete", "suspend", "keep"]

#: After a wait ends, a log follower gets this long to drain the last lines.
_LOG_DRAIN_SECONDS = 5.0


class TrainerClient(_Base):
    """Runs TrainJobs on a cluster (``KubernetesConfig``, the default) or on this
    machine (``LocalConfig``), with the Kubeflow SDK's methods."""

    def __init__(
        self,
        backend: KubernetesConfig | LocalConfig | Mapping[str, Any] | None = None,
        *,
        namespace: str | None = None,
        retry: RetryPolicy = DEFAULT_POLICY,
        request_hook: CallHook | None = None,
    ) -> None:
        super().__init__(backend, namespace=namespace, retry=retry, request_hook=request_hook)
        self._driver = SyncDriver(self._make_transport(), retry, request_hook)

    def _make_transport(self) -> Any:
        if isinstance(self.config, LocalConfig):
            from kf_trainer_core.local import LocalTransport

            return LocalTransport(self.config)
        from kf_trainer_core.k8s.transport import SyncTransport

        return SyncTransport(self.config)

    def _run(self, program: Program[Any], on_emit: Callable[[Any], None] | None = None) -> Any:
        return self._driver.run(program, on_emit)

    def close(self) -> None:
        """Release connections (informers shared with other clients keep theirs)."""
        self._driver.transport.close()

    def __enter__(self) -> TrainerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- runtimes ----------------------------------------------------------------
    def list_runtimes(self) -> list[RuntimeInfo]:
        """Cluster-wide and namespaced runtimes."""
        result: list[RuntimeInfo] = self._run(ops.list_runtimes(self.namespace))
        return result

    def get_runtime(self, name: str, kind: str = "ClusterTrainingRuntime") -> RuntimeInfo:
        """One runtime (cached for this client)."""
        info: RuntimeInfo = self._run(self._runtime_program(name, kind))
        return info

    # -- submitting -------------------------------------------------------------
    def build(
        self,
        spec: TrainJobSpec | Mapping[str, Any] | str,
        *,
        name: str | None = None,
        identity: Identity | None = None,
    ) -> BuiltTrainJob:
        """The manifest that :meth:`train` would submit, checked against the runtime
        as the cluster has it."""
        built: BuiltTrainJob = self._run(self._build_program(spec, name, identity))
        return built

    def submit(
        self,
        spec: TrainJobSpec | Mapping[str, Any] | str,
        *,
        name: str | None = None,
        identity: Identity | None = None,
        fresh_after_failure: bool = True,
    ) -> ops.Submitted:
        """Create the TrainJob, idempotently.

        With an ``identity`` (e.g. ``(dag_id, task_id, run_id, map_index)``) the job is
        found again by that identity: a retry after a crash reattaches to it, a retry
        after a failed job submits a fresh attempt (unless ``fresh_after_failure`` is
        off). Without one, a job of the same name and spec is adopted and a different
        spec under that name raises :class:`~kf_trainer_core.ops.SpecConflictError`.
        """
        submitted: ops.Submitted = self._run(
            self._submit_program(spec, name, identity, fresh_after_failure)
        )
        return submitted

    def train(
        self,
        runtime: Any = None,
        initializer: Any = None,
        trainer: Any = None,
        options: list[Any] | None = None,
        *,
        spec: TrainJobSpec | Mapping[str, Any] | None = None,
        identity: Identity | None = None,
    ) -> str:
        """Submit a job (SDK signature) and return its name."""
        job_spec, ident = self._train_args(spec, runtime, initializer, trainer, options, identity)
        return self.submit(job_spec, identity=ident).job.name

    # -- reading ----------------------------------------------------------------
    def list_jobs(
        self,
        runtime: str | None = None,
        label_selector: str | None = None,
        *,
        page_size: int | None = None,
    ) -> list[TrainJob]:
        """Jobs of the namespace (optionally of one runtime), with their steps. Read
        ``page_size`` jobs a request (default: the config's ``list_page_size``)."""
        jobs: list[TrainJob] = self._run(
            ops.list_jobs(self.namespace, label_selector, page_size or self._page_size)
        )
        return [j for j in jobs if runtime is None or j.runtime == runtime]

    def get_job(self, name: str, *, log_progress: bool = False) -> TrainJob:
        """One job with its steps (and its Kueue queue status when Kueue queues it).
        With ``log_progress``, a job that reports in its log on a cluster without a
        status server gets its progress from there."""
        program = ops.get_job(self.namespace, name, kueue=self._kueue(), log_progress=log_progress)
        job: TrainJob = self._run(program)
        return job

    def get_job_logs(
        self, name: str, step: str = "node-0", follow: bool = False, *, tail: int | None = None
    ) -> Iterator[str]:
        """Log lines of one step; with ``follow``, as they are written, waiting for a
        pending pod and resuming after dropped connections."""
        checks.check_step(step)
        checks.check_count(tail=tail)
        if not follow:
            lines: list[str] = self._run(
                ops.read_logs(self.namespace, name, step, tail, strict=True)
            )
            return iter(lines)
        # Checked now, not at the first line: the follow's program starts lazily.
        names.require_job_name(name)
        return self._driver.iterate(ops.follow_logs(self.namespace, name, step, tail=tail or 1000))

    def get_job_events(self, name: str) -> list[Event]:
        """Events of the job, its JobSet, Jobs and pods."""
        events: list[Event] = self._run(ops.get_events(self.namespace, name))
        return events

    def get_job_outputs(self, name: str) -> JobOutputs:
        """Status, steps, metrics and the function's return value."""
        result: JobOutputs = self._run(self._outputs_program(name))
        return result

    def explain_failure(self, name: str) -> Failure:
        """Why a job failed (or is stuck): its Failed condition, failing step and pod,
        container reason and exit code, warning events and its last log lines."""
        failure: Failure = self._run(ops.explain(self.namespace, name, kueue=self._kueue()))
        return failure

    # -- waiting ----------------------------------------------------------------
    @contextmanager
    def _subscriptions(self, name: str) -> Iterator[tuple[Any, Any, SyncWaker]]:
        waker = SyncWaker()
        jobs = sync_informer(
            self._informer_key("trainjobs"), lambda: self._sync_informer(self._jobs_state())
        )
        events = sync_informer(
            self._informer_key("events"), lambda: self._sync_informer(self._events_state())
        )

        def by_name() -> Subscription:
            named = sync_informer(
                (*self._informer_key("trainjob"), name),
                lambda: _brief(self._sync_informer(self._named_job_state(name))),
            )
            return named.subscribe(name, waker)

        subs = (
            JobSubscription(jobs.subscribe(name, waker), label_predicate(SUITE_SELECTOR), by_name),
            events.subscribe(name, waker),
        )
        try:
            yield subs[0], subs[1], waker
        finally:
            for sub in subs:
                sub.close()

    def _sync_informer(self, state: InformerState) -> SyncInformer:
        cfg = self.config
        timeout, poll = (
            (cfg.watch_timeout, cfg.poll_interval)
            if isinstance(cfg, KubernetesConfig)
            else (30, 0.5)
        )
        return SyncInformer(
            state,
            lambda: SyncDriver(self._make_transport(), self.retry, self.request_hook),
            watch_timeout=timeout,
            poll_interval=poll,
            policy=self.retry,
        )

    def wait(
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
    ) -> tuple[TrainJob, Any]:
        """Wait until the job reaches one of ``status``; return it with the function's
        return value. Raises TrainJobFailedError (a subclass per failure class, with the
        reason, failing step, exit code and log tail), TrainJobCreationFailedError,
        TrainJobTimeoutError, and TrainJobAdmissionTimeoutError when Kueue has not
        admitted a queued job within ``admission_timeout`` seconds.

        ``callbacks`` get every new version of the job (a job queued by Kueue with its
        :class:`~kf_trainer_core.kueue.QueueStatus`); ``on_progress`` gets the job's
        :class:`Progress` each time what it reports changes (from the status server's
        ``trainerStatus`` or, without one, from node-0's log, read every
        ``log_progress_interval`` seconds while it runs; ``None`` never reads it)."""
        goal, tracker, program, emit = self._wait_programs(
            name,
            status,
            timeout,
            polling_interval,
            startup_timeout,
            admission_timeout,
            callbacks,
            on_progress,
            log_progress_interval,
        )
        with self._subscriptions(name) as (jobs, events, waker):
            verdict, obj = self._run(program(jobs, events, waker), emit)
        result: tuple[TrainJob, Any] = self._run(
            conclude(
                self.namespace,
                goal,
                verdict,
                obj,
                timeout=timeout,
                queue=tracker.status if tracker else None,
            )
        )
        return result

    def wait_for_job_status(
        self,
        name: str,
        status: Iterable[str] | str = ("Complete",),
        timeout: float | None = 600,
        polling_interval: float = 2,
        callbacks: Iterable[Callback] | None = None,
    ) -> TrainJob:
        """SDK signature: wait and return the job. Watches; ``polling_interval`` is
        used only where watching is forbidden."""
        return self.wait(
            name, status, timeout=timeout, polling_interval=polling_interval, callbacks=callbacks
        )[0]

    def run(
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
        on_submitted: Callable[[ops.Submitted], None] | None = None,
        fresh_after_failure: bool = True,
        reuse_notice: bool = True,
        on_progress: Callable[[Progress], None] | None = None,
        log_progress_interval: float | None = LOG_PROGRESS_INTERVAL,
    ) -> JobOutputs:
        """Submit (idempotently), stream one step's log to ``on_log``, wait, and return
        the outputs — what an orchestrator task does. Raises as :meth:`wait` does.

        When the submit finds a job that had already finished (a rerun), ``on_log`` gets
        "reusing the finished job …" instead of its log replayed as if it trained again;
        callers that have just submitted the job themselves turn ``reuse_notice`` off."""
        import threading

        # Settle the waiting and logging arguments before anything is submitted.
        checks.check_seconds(
            timeout=timeout, startup_timeout=startup_timeout, admission_timeout=admission_timeout
        )
        checks.check_step(log_step, "log_step")
        checks.check_count(log_tail=log_tail)
        submitted = self.submit(
            spec, name=name, identity=identity, fresh_after_failure=fresh_after_failure
        )
        if on_submitted is not None:
            on_submitted(submitted)
        job_name = submitted.job.name
        stop = threading.Event()
        follower = None
        notice = submitted.reuse_notice() if reuse_notice else None
        if notice is not None and on_log is not None:
            on_log(notice)
        elif on_log is not None:
            sink = on_log
            # Its own driver over the same connection pool: drivers keep per-run state.
            driver = SyncDriver(self._driver.transport, self.retry, self.request_hook)

            def follow() -> None:
                try:
                    for line in driver.iterate(
                        ops.follow_logs(
                            self.namespace, job_name, log_step, tail=log_tail, hide_progress=True
                        )
                    ):
                        sink(line)
                        if stop.is_set():
                            return
                except Exception as exc:  # logs are a courtesy: never fail the task for them
                    sink(f"[kf-trainer] log stream ended: {exc}")

            follower = threading.Thread(target=follow, name=f"kf-logs-{job_name}", daemon=True)
            follower.start()

        def drain() -> None:
            # The stream ends by itself once the containers have ended; the deadline
            # only bounds a log endpoint that keeps the connection open.
            if follower is not None:
                follower.join(_LOG_DRAIN_SECONDS)
                stop.set()

        try:
            job, result = self.wait(
                job_name,
                timeout=timeout,
                startup_timeout=startup_timeout,
                admission_timeout=admission_timeout,
                callbacks=[on_update] if on_update else None,
                on_progress=on_progress,
                log_progress_interval=log_progress_interval,
            )
        except TrainJobFailedError:
            drain()  # the containers ended: keep their last lines
            raise
        except BaseException:
            stop.set()  # timeouts and cancellation do not wait for logs
            raise
        drain()
        return outputs(job, result)

    def get_runtime_packages(
        self, runtime: str = "torch-distributed", *, timeout: float = 600
    ) -> list[str]:
        """Run a one-node job on ``runtime`` that lists its Python packages (and GPUs),
        and return that output (SDK ``get_runtime_packages``)."""
        from kf_trainer_core.spec import CustomTrainer

        spec = TrainJobSpec(runtime=runtime, trainer=CustomTrainer(_PACKAGES_SOURCE, num_nodes=1))
        name = self.train(spec=spec, identity=f"runtime-packages/{runtime}/{time.time_ns()}")
        self.wait(name, timeout=timeout)
        return list(self.get_job_logs(name))

    # -- cancelling -------------------------------------------------------------
    def cancel_job(self, name: str, action: CancelAction = "delete") -> bool:
        """Stop a job: ``delete`` it (pods and JobSet go with it), ``suspend`` it (kept,
        resumable) or ``keep`` it running. ``True`` if something was done."""
        done: bool = self._run(ops.cancel(self.namespace, name, action))
        return done

    def stop_unfinished(
        self,
        name: str | None = None,
        *,
        identity: str | Sequence[str | int | None] | None = None,
        label_selector: str | None = None,
        action: CancelAction = "delete",
    ) -> list[str]:
        """Apply ``action`` to the unfinished jobs picked by ``name``, by an orchestrator
        ``identity`` (every attempt submitted for it: how a task killed before it learnt
        its job's name stops that job) or by ``label_selector``; return the names acted
        on. Finished jobs are left alone, their results kept for a retry to collect."""
        done: list[str] = self._run(self._stop_program(name, identity, label_selector, action))
        return done

    def checkpoint_location(
        self, identity: Identity, *, checkpoints: Checkpoints | None = None
    ) -> CheckpointLocation:
        """Where every attempt of ``identity`` keeps its checkpoints (``docs/checkpoints.md``)."""
        loc: CheckpointLocation = self._run(
            self._checkpoints_program(identity, checkpoints, False, False)
        )
        return loc

    def clean_checkpoints(
        self,
        identity: Identity,
        *,
        checkpoints: Checkpoints | None = None,
        force: bool = False,
        timeout: float | None = 600,
    ) -> CheckpointLocation:
        """Remove the checkpoints every attempt of ``identity`` shared, and nothing else:
        the only way they are deleted. Refused while an attempt runs (unless ``force``).
        On a cluster a one-node job that mounts the claim removes them (``timeout``)."""
        try:
            loc: CheckpointLocation = self._run(
                self._checkpoints_program(identity, checkpoints, True, force)
            )
        except CheckpointsUnreachableError as exc:
            job = cleaning_job(exc.location)
            if job is None:
                raise
            done = self.run(job[0], identity=job[1], timeout=timeout, fresh_after_failure=True)
            self.delete_job(done.name)  # the suite's own helper job, finished
            return exc.location
        return loc

    def delete_job(self, name: str, *, propagation: str = "Foreground") -> bool:
        """Delete the TrainJob (never only its JobSet); ``False`` if already gone."""
        deleted: bool = self._run(ops.delete(self.namespace, name, propagation))
        return deleted

    def suspend_job(self, name: str) -> TrainJob:
        """Suspend: the pods go, the job stays and can be resumed."""
        job: TrainJob = self._run(ops.set_suspended(self.namespace, name, True))
        return job

    def resume_job(self, name: str) -> TrainJob:
        job: TrainJob = self._run(ops.set_suspended(self.namespace, name, False))
        return job


class AsyncTrainerClient(_Base):
    """The same client for event loops (Airflow triggers, Prefect async tasks).
    Create it inside the loop that uses it."""

    def __init__(
        self,
        backend: KubernetesConfig | LocalConfig | Mapping[str, Any] | None = None,
        *,
        namespace: str | None = None,
        retry: RetryPolicy = DEFAULT_POLICY,
        request_hook: CallHook | None = None,
    ) -> None:
        super().__init__(backend, namespace=namespace, retry=retry, request_hook=request_hook)
        self._driver: AsyncDriver | None = None

    async def _make_driver(self) -> AsyncDriver:
        if isinstance(self.config, LocalConfig):
            from kf_trainer_core.local import AsyncLocalTransport

            transport: Any = AsyncLocalTransport(self.config)
        else:
            from kf_trainer_core.k8s.transport import AsyncTransport

            transport = await AsyncTransport.create(self.config)
        return AsyncDriver(transport, self.retry, self.request_hook)

    async def _ensure_driver(self) -> AsyncDriver:
        if self._driver is None:
            self._driver = await self._make_driver()
        return self._driver

    async def _run(
        self, program: Program[Any], on_emit: Callable[[Any], None] | None = None
    ) -> Any:
        driver = await self._ensure_driver()
        return await driver.run(program, on_emit)

    async def close(self) -> None:
        if self._driver is not None:
            await self._driver.transport.close()
            self._driver = None

    async def __aenter__(self) -> AsyncTrainerClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def list_runtimes(self) -> list[RuntimeInfo]:
        result: list[RuntimeInfo] = await self._run(ops.list_runtimes(self.namespace))
        return result

    async def get_runtime(self, name: str, kind: str = "ClusterTrainingRuntime") -> RuntimeInfo:
        info: RuntimeInfo = await self._run(self._runtime_program(name, kind))
        return info

    async def build(
        self,
        spec: TrainJobSpec | Mapping[str, Any] | str,
        *,
        name: str | None = None,
        identity: Identity | None = None,
    ) -> BuiltTrainJob:
        """See :meth:`TrainerClient.build`."""
        built: BuiltTrainJob = await self._run(self._build_program(spec, name, identity))
        return built

    async def get_runtime_packages(
        self, runtime: str = "torch-distributed", *, timeout: float = 600
    ) -> list[str]:
        """See :meth:`TrainerClient.get_runtime_packages`."""
        from kf_trainer_core.spec import CustomTrainer

        spec = TrainJobSpec(runtime=runtime, trainer=CustomTrainer(_PACKAGES_SOURCE, num_nodes=1))
        name = await self.train(spec=spec, identity=f"runtime-packages/{runtime}/{time.time_ns()}")
        await self.wait(name, timeout=timeout)
        return [line async for line in self.get_job_logs(name)]

    async def submit(
        self,
        spec: TrainJobSpec | Mapping[str, Any] | str,
        *,
        name: str | None = None,
        identity: Identity | None = None,
        fresh_after_failure: bool = True,
    ) -> ops.Submitted:
        """See :meth:`TrainerClient.submit`."""
        submitted: ops.Submitted = await self._run(
            self._submit_program(spec, name, identity, fresh_after_failure)
        )
        return submitted

    async def train(
        self,
        runtime: Any = None,
        initializer: Any = None,
        trainer: Any = None,
        options: list[Any] | None = None,
        *,
        spec: TrainJobSpec | Mapping[str, Any] | None = None,
        identity: Identity | None = None,
    ) -> str:
        """See :meth:`TrainerClient.train`."""
        job_spec, ident = self._train_args(spec, runtime, initializer, trainer, options, identity)
        return (await self.submit(job_spec, identity=ident)).job.name

    async def list_jobs(
        self,
        runtime: str | None = None,
        label_selector: str | None = None,
        *,
        page_size: int | None = None,
    ) -> list[TrainJob]:
        """See :meth:`TrainerClient.list_jobs`."""
        jobs: list[TrainJob] = await self._run(
            ops.list_jobs(self.namespace, label_selector, page_size or self._page_size)
        )
        return [j for j in jobs if runtime is None or j.runtime == runtime]

    async def get_job(self, name: str, *, log_progress: bool = False) -> TrainJob:
        """See :meth:`TrainerClient.get_job`."""
        program = ops.get_job(self.namespace, name, kueue=self._kueue(), log_progress=log_progress)
        job: TrainJob = await self._run(program)
        return job

    async def get_job_logs(
        self, name: str, step: str = "node-0", follow: bool = False, *, tail: int | None = None
    ) -> AsyncIterator[str]:
        """Log lines of one step (see :meth:`TrainerClient.get_job_logs`)."""
        checks.check_step(step)
        checks.check_count(tail=tail)
        driver = await self._ensure_driver()
        if not follow:
            for line in await self._run(
                ops.read_logs(self.namespace, name, step, tail, strict=True)
            ):
                yield line
            return
        async for line in driver.iterate(
            ops.follow_logs(self.namespace, name, step, tail=tail or 1000)
        ):
            yield line

    async def get_job_events(self, name: str) -> list[Event]:
        events: list[Event] = await self._run(ops.get_events(self.namespace, name))
        return events

    async def get_job_outputs(self, name: str) -> JobOutputs:
        result: JobOutputs = await self._run(self._outputs_program(name))
        return result

    async def explain_failure(self, name: str) -> Failure:
        """See :meth:`TrainerClient.explain_failure`."""
        failure: Failure = await self._run(ops.explain(self.namespace, name, kueue=self._kueue()))
        return failure

    @asynccontextmanager
    async def _subscriptions(self, name: str) -> AsyncIterator[tuple[Any, Any, AsyncWaker]]:
        waker = AsyncWaker()
        jobs = async_informer(
            self._informer_key("trainjobs"), lambda: self._async_informer(self._jobs_state())
        )
        events = async_informer(
            self._informer_key("events"), lambda: self._async_informer(self._events_state())
        )

        def by_name() -> Subscription:
            named = async_informer(
                (*self._informer_key("trainjob"), name),
                lambda: _brief(self._async_informer(self._named_job_state(name))),
            )
            return named.subscribe(name, waker)

        subs = (
            JobSubscription(jobs.subscribe(name, waker), label_predicate(SUITE_SELECTOR), by_name),
            events.subscribe(name, waker),
        )
        try:
            yield subs[0], subs[1], waker
        finally:
            for sub in subs:
                sub.close()

    def _async_informer(self, state: InformerState) -> AsyncInformer:
        cfg = self.config
        timeout, poll = (
            (cfg.watch_timeout, cfg.poll_interval)
            if isinstance(cfg, KubernetesConfig)
            else (30, 0.5)
        )
        return AsyncInformer(
            state, self._make_driver, watch_timeout=timeout, poll_interval=poll, policy=self.retry
        )

    async def wait(
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
    ) -> tuple[TrainJob, Any]:
        """See :meth:`TrainerClient.wait`."""
        goal, tracker, program, emit = self._wait_programs(
            name,
            status,
            timeout,
            polling_interval,
            startup_timeout,
            admission_timeout,
            callbacks,
            on_progress,
            log_progress_interval,
        )
        async with self._subscriptions(name) as (jobs, events, waker):
            verdict, obj = await self._run(program(jobs, events, waker), emit)
        result: tuple[TrainJob, Any] = await self._run(
            conclude(
                self.namespace,
                goal,
                verdict,
                obj,
                timeout=timeout,
                queue=tracker.status if tracker else None,
            )
        )
        return result

    async def wait_for_job_status(
        self,
        name: str,
        status: Iterable[str] | str = ("Complete",),
        timeout: float | None = 600,
        polling_interval: float = 2,
        callbacks: Iterable[Callback] | None = None,
    ) -> TrainJob:
        return (
            await self.wait(
                name,
                status,
                timeout=timeout,
                polling_interval=polling_interval,
                callbacks=callbacks,
            )
        )[0]

    async def run(
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
        on_submitted: Callable[[ops.Submitted], None] | None = None,
        fresh_after_failure: bool = True,
        reuse_notice: bool = True,
        on_progress: Callable[[Progress], None] | None = None,
        log_progress_interval: float | None = LOG_PROGRESS_INTERVAL,
    ) -> JobOutputs:
        """See :meth:`TrainerClient.run`."""
        import asyncio

        checks.check_seconds(
            timeout=timeout, startup_timeout=startup_timeout, admission_timeout=admission_timeout
        )
        checks.check_step(log_step, "log_step")
        checks.check_count(log_tail=log_tail)
        submitted = await self.submit(
            spec, name=name, identity=identity, fresh_after_failure=fresh_after_failure
        )
        if on_submitted is not None:
            on_submitted(submitted)
        job_name = submitted.job.name
        follower = None
        notice = submitted.reuse_notice() if reuse_notice else None
        if notice is not None and on_log is not None:
            on_log(notice)
        elif on_log is not None:
            sink = on_log
            driver = AsyncDriver(
                (await self._ensure_driver()).transport, self.retry, self.request_hook
            )

            async def follow() -> None:
                try:
                    async for line in driver.iterate(
                        ops.follow_logs(
                            self.namespace, job_name, log_step, tail=log_tail, hide_progress=True
                        )
                    ):
                        sink(line)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # logs are a courtesy: never fail the task for them
                    sink(f"[kf-trainer] log stream ended: {exc}")

            follower = asyncio.create_task(follow(), name=f"kf-logs-{job_name}")

        async def drain() -> None:
            if follower is not None:
                try:
                    await asyncio.wait_for(asyncio.shield(follower), _LOG_DRAIN_SECONDS)
                except (asyncio.TimeoutError, Exception):
                    follower.cancel()

        try:
            job, result = await self.wait(
                job_name,
                timeout=timeout,
                startup_timeout=startup_timeout,
                admission_timeout=admission_timeout,
                callbacks=[on_update] if on_update else None,
                on_progress=on_progress,
                log_progress_interval=log_progress_interval,
            )
        except TrainJobFailedError:
            await drain()  # the containers ended: keep their last lines
            raise
        except BaseException:
            if follower is not None:
                follower.cancel()  # timeouts and cancellation do not wait for logs
            raise
        await drain()
        return outputs(job, result)

    async def cancel_job(self, name: str, action: CancelAction = "delete") -> bool:
        """See :meth:`TrainerClient.cancel_job`."""
        done: bool = await self._run(ops.cancel(self.namespace, name, action))
        return done

    async def stop_unfinished(
        self,
        name: str | None = None,
        *,
        identity: str | Sequence[str | int | None] | None = None,
        label_selector: str | None = None,
        action: CancelAction = "delete",
    ) -> list[str]:
        """See :meth:`TrainerClient.stop_unfinished`."""
        program = self._stop_program(name, identity, label_selector, action)
        done: list[str] = await self._run(program)
        return done

    async def checkpoint_location(
        self, identity: Identity, *, checkpoints: Checkpoints | None = None
    ) -> CheckpointLocation:
        """See :meth:`TrainerClient.checkpoint_location`."""
        program = self._checkpoints_program(identity, checkpoints, False, False)
        loc: CheckpointLocation = await self._run(program)
        return loc

    async def clean_checkpoints(
        self,
        identity: Identity,
        *,
        checkpoints: Checkpoints | None = None,
        force: bool = False,
        timeout: float | None = 600,
    ) -> CheckpointLocation:
        """See :meth:`TrainerClient.clean_checkpoints`."""
        program = self._checkpoints_program(identity, checkpoints, True, force)
        try:
            loc: CheckpointLocation = await self._run(program)
        except CheckpointsUnreachableError as exc:
            job = cleaning_job(exc.location)
            if job is None:
                raise
            done = await self.run(
                job[0], identity=job[1], timeout=timeout, fresh_after_failure=True
            )
            await self.delete_job(done.name)
            return exc.location
        return loc

    async def delete_job(self, name: str, *, propagation: str = "Foreground") -> bool:
        deleted: bool = await self._run(ops.delete(self.namespace, name, propagation))
        return deleted

    async def suspend_job(self, name: str) -> TrainJob:
        job: TrainJob = await self._run(ops.set_suspended(self.namespace, name, True))
        return job

    async def resume_job(self, name: str) -> TrainJob:
        job: TrainJob = await self._run(ops.set_suspended(self.namespace, name, False))
        return job


def outputs(job: TrainJob, result: Any) -> JobOutputs:
    """A finished job's outputs for an orchestrator: its result, the metrics it
    reported, and what it cost (wall, pending and running time, GPU-hours)."""
    cost = job_cost(job)
    return JobOutputs(
        name=job.name,
        namespace=job.namespace,
        status=job.status,
        runtime=job.runtime,
        steps=job.steps,
        metrics=job.progress.metrics if job.progress else {},
        result=result,
        duration_seconds=cost.wall_seconds if job.completion_timestamp else None,
        failure=job.failure,
        queue=job.queue,
        pending_seconds=cost.pending_seconds,
        running_seconds=cost.running_seconds,
        gpu_hours=cost.gpu_hours,
        progress=job.progress,
    )
