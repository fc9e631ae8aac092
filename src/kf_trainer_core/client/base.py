"""What both clients are made of (:class:`ClientBase`): the backend configuration and
namespace, checked before any request; and what the operations of
:class:`~kf_trainer_core.client.AsyncTrainerClient` share (:class:`Operations`): the
runtime cache, the shared informers' setup, the end of a wait, the builder (and, above
it, :class:`~kf_trainer_core.client.multikueue.Placement`: a MultiKueue job read and
waited for on its worker)."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar, Token
from typing import Any

from kf_trainer_core.base.errors import WaitInterrupted
from kf_trainer_core.base.hints import command, keeps_running
from kf_trainer_core.base.quoting import shown
from kf_trainer_core.cluster.kueue import KueueProbe, QueueStatus, QueueTracker, probe_for
from kf_trainer_core.cluster.status import CREATION_FAILED_REASON, job_state
from kf_trainer_core.config import KubernetesConfig, LocalConfig, parse_backend
from kf_trainer_core.errors import SpecError
from kf_trainer_core.fields import checks
from kf_trainer_core.k8s.api import Api, CallHook, TransportProtocol
from kf_trainer_core.k8s.paging import DEFAULT_PAGE_SIZE
from kf_trainer_core.k8s.resources import EVENTS, TRAINJOBS
from kf_trainer_core.k8s.retry import DEFAULT_POLICY, RetryPolicy
from kf_trainer_core.manifest.builder import BuiltTrainJob, build_trainjob, identity_text
from kf_trainer_core.manifest.runtimes import RuntimeInfo
from kf_trainer_core.manifest.selectors import SUITE_SELECTOR
from kf_trainer_core.programs.checkpoints import locate_program
from kf_trainer_core.programs.informer import (
    Informer,
    InformerState,
    JobSubscription,
    Subscription,
    by_involved_object,
    informer,
    label_predicate,
    slim_trainjob,
)
from kf_trainer_core.programs.outcome import Outcome
from kf_trainer_core.programs.pod_batch import pod_batch
from kf_trainer_core.programs.reads import get_runtime
from kf_trainer_core.programs.submit import Submitted, submit_identity
from kf_trainer_core.programs.wait import Verdict, WaitGoal, conclude
from kf_trainer_core.programs.wakers import Waker
from kf_trainer_core.spec import TrainJobSpec
from kf_trainer_core.spec.checkpoint_storage import (
    CheckpointLocation,
    Checkpoints,
    require_storage,
)


class _Call:
    """What one call of the sync client has submitted so far."""

    submitted: Submitted | None = None


#: The running call of the sync client: the job it submitted is what a Ctrl-C during
#: the wait that follows leaves running. The call's coroutine runs on the portal's loop
#: in a copy of the caller's context, which holds the same :class:`_Call`.
_CALL: ContextVar[_Call | None] = ContextVar("kf_trainer_call", default=None)


def note_submitted(submitted: Submitted) -> None:
    """Remember the job this call submitted (or reattached to)."""
    call = _CALL.get()
    if call is not None:
        call.submitted = submitted


def begin_call() -> Token[_Call | None]:
    """A call of the sync client starts: it has submitted nothing yet."""
    return _CALL.set(_Call())


def end_call(token: Token[_Call | None]) -> None:
    """The call has ended (see :func:`begin_call`)."""
    _CALL.reset(token)


def interrupted(config: Any, exc: KeyboardInterrupt) -> KeyboardInterrupt:
    """What a Ctrl-C during a call of the sync client raises: after the call submitted a
    job, :class:`~kf_trainer_core.errors.WaitInterrupted`, which says the job keeps
    running and how to stop or follow it (the ``kf-trainer`` commands and the client's
    methods), as the CLI says it; before that, ``exc`` as it is."""
    call = _CALL.get()
    submitted = call.submitted if call is not None else None
    if submitted is None or isinstance(exc, WaitInterrupted):
        return exc
    return wait_interrupted(config, submitted.job.name, submitted.job.namespace)


def wait_interrupted(config: Any, name: str, namespace: str) -> WaitInterrupted:
    """The error of a wait on ``name`` stopped by Ctrl-C."""
    stop = command(config, ["jobs", "cancel", name], namespace=namespace)
    again = command(config, ["jobs", "wait", name], namespace=namespace)
    return WaitInterrupted(
        keeps_running(
            namespace,
            name,
            f"client.cancel_job({name!r}) or `{stop}`",
            f"client.wait({name!r}) or `{again}`",
        ),
        name,
        namespace,
    )


Identity = str | Sequence[str | int | None]

#: Objects per list request of the clients (see :attr:`Operations._page_cap`).
ASYNC_PAGE_CAP = 50
Backend = KubernetesConfig | LocalConfig | Mapping[str, Any] | None


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
            f"a {type(backend).__name__} ({shown(backend)}) is not a backend configuration."
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


class ClientBase:
    """What both clients share: the configuration and namespace, checked before any
    request."""

    def __init__(
        self,
        backend: Backend = None,
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

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(backend={self.config.backend!r}, namespace={self.namespace!r})"
        )


class Operations(ClientBase):
    """What the operations of :class:`~kf_trainer_core.client.AsyncTrainerClient` share:
    the connection (:meth:`_api`), the runtime cache, the shared informers, the end of a
    wait, the builder. Its constructor is :class:`ClientBase`'s: what it adds starts
    empty."""

    _connection: Api | None = None
    _connecting: asyncio.Task[Api] | None = None

    @functools.cached_property
    def _runtime_cache(self) -> dict[tuple[str, str], RuntimeInfo]:
        """Runtimes as the cluster has them, by (name, kind): read once per client."""
        return {}

    async def _new_api(self, worker: KubernetesConfig | None = None) -> Api:
        """A connection of this client's own: a transport over its backend (or over a
        MultiKueue ``worker``'s configuration)."""
        from kf_trainer_core.base.offloop import imported

        config = worker or self.config
        # The transports' modules import the backends' libraries: off the loop.
        transport: TransportProtocol
        if isinstance(config, LocalConfig):
            local = await imported("kf_trainer_core.backends.local")
            transport = local.AsyncLocalTransport(config)
        else:
            k8s = await imported("kf_trainer_core.backends.kubernetes.transport")
            transport = await k8s.AsyncTransport.create(config)
        return Api(transport, self.retry, self.request_hook)

    async def _api(self) -> Api:
        """This client's connection, made once, whatever the number of calls waiting for
        it (a thousand concurrent waits on a fresh client make one connection)."""
        if self._connection is None:
            if self._connecting is None or (
                self._connecting.done() and self._connecting.exception() is not None
            ):
                self._connecting = asyncio.get_running_loop().create_task(self._new_api())
            api = await asyncio.shield(self._connecting)
            if self._connection is None:
                self._connection = api
        return self._connection

    async def _disconnect(self) -> None:
        self._connecting = None
        if self._connection is not None:
            api, self._connection = self._connection, None
            await api.close()

    # -- informers -------------------------------------------------------------------
    def _informer_key(self, what: str, worker: KubernetesConfig | None = None) -> tuple[Any, ...]:
        """The key of the process's informer of ``what`` in this client's namespace: of
        its cluster, or of a MultiKueue ``worker`` (informers of their own)."""
        if worker is not None:
            return ("multikueue-worker", worker.cache_key(), what, self.namespace)
        cfg = self.config
        cluster = cfg.cache_key() if isinstance(cfg, KubernetesConfig) else ("local", cfg.state_dir)
        return (cluster, what, self.namespace)

    def _informer_timing(self) -> dict[str, Any]:
        cfg = self.config
        timeout, poll = (
            (cfg.watch_timeout, cfg.poll_interval)
            if isinstance(cfg, KubernetesConfig)
            else (30, 0.5)
        )
        return {"watch_timeout": timeout, "poll_interval": poll, "policy": self.retry}

    def _events_state(self) -> InformerState:
        return InformerState(
            EVENTS,
            self.namespace,
            field_selector=f"involvedObject.kind=TrainJob,reason={CREATION_FAILED_REASON}",
            key=by_involved_object,
            page_size=self._page_size,
        )

    #: The most objects a list request asks for (``None``: the config's page size). A
    #: page of a list is decoded and read in one callback of the loop (``json.loads``
    #: holds the GIL): small pages keep each under a few milliseconds.
    _page_cap: int | None = ASYNC_PAGE_CAP

    @property
    def _page_size(self) -> int:
        cfg = self.config
        size = cfg.list_page_size if isinstance(cfg, KubernetesConfig) else DEFAULT_PAGE_SIZE
        return size if self._page_cap is None else min(size, self._page_cap)

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

    @contextmanager
    def _subscriptions(
        self, name: str, worker: KubernetesConfig | None = None
    ) -> Iterator[tuple[JobSubscription, Subscription, Waker]]:
        """The job's and its creation events' subscriptions, and the waker they wake: in
        this client's cluster, or on a MultiKueue ``worker`` (informers of their own,
        keyed by the worker's configuration, each with its own connection)."""
        waker = Waker()

        def subscribe(what: str, state: InformerState, brief: bool) -> Subscription:
            # The informer is made on first use; a ``brief`` one ends with its last wait.
            def make() -> Informer:
                new_api = functools.partial(self._new_api, worker)
                made = Informer(state, new_api, **self._informer_timing())
                if brief:
                    made.linger = 0.0
                return made

            key = self._informer_key(what, worker)
            return informer((*key, name) if brief else key, make).subscribe(name, waker)

        # A per-name watch serves the waits on one foreign job: it ends with the last of
        # them rather than lingering for the next wait, as the shared watch does.
        jobs = JobSubscription(
            subscribe("trainjobs", self._jobs_state(), False),
            label_predicate(SUITE_SELECTOR),
            lambda: subscribe("trainjob", self._named_job_state(name), True),
        )
        events = subscribe("events", self._events_state(), False)
        try:
            yield jobs, events, waker
        finally:
            jobs.close()
            events.close()

    async def _conclude(
        self,
        api: Api,
        goal: WaitGoal,
        verdict: Verdict,
        obj: dict[str, Any],
        *,
        timeout: float | None,
        queue: QueueStatus | None,
        batched: bool = True,
    ) -> Outcome:
        """A wait's end (see :func:`conclude`). ``batched``: the finished job's pods are
        read in a batch with those of the loop's other waits (one LIST for many jobs
        finishing together), and the waits on the same job share one reading of its
        outcome — not for a job read on a MultiKueue worker, whose pods a batch of the
        manager's namespace would look for in the wrong cluster."""
        batch = pod_batch(self._informer_key("pods"), self.namespace) if batched else None
        return await conclude(
            api,
            self.namespace,
            goal,
            verdict,
            obj,
            timeout=timeout,
            queue=queue,
            pods_of=batch.reader(api) if batch else None,
            share=batch.shared.run if batch else None,
            hint=self._hint,
        )

    def _hint(self, args: Sequence[str]) -> str:
        """The ``kf-trainer ARGS`` command line that reaches this client's jobs (the
        fixes an error prints)."""
        return command(self.config, args, namespace=self.namespace)

    # -- building --------------------------------------------------------------------
    def _given_spec(self, spec: TrainJobSpec | Mapping[str, Any] | str | None) -> TrainJobSpec:
        """The spec to build or submit, checked for what this backend needs of it."""
        spec = _required(spec)
        given = spec if isinstance(spec, TrainJobSpec) else TrainJobSpec.parse(spec)
        require_storage(given, cluster=isinstance(self.config, KubernetesConfig))
        return given

    async def _runtime(self, api: Api, name: str, kind: str) -> RuntimeInfo:
        """A runtime as the cluster has it, read once per client."""
        key = (name, kind)
        if key not in self._runtime_cache:
            info, _ = await get_runtime(api, name, kind, self.namespace)
            self._runtime_cache[key] = info
        return self._runtime_cache[key]

    def _builder(self, runtime: RuntimeInfo | None) -> functools.partial[BuiltTrainJob]:
        """:func:`build_trainjob` against ``runtime``, for this client: its namespace, its
        backend's retention. Every manifest a client builds or submits is made by it."""
        return functools.partial(
            build_trainjob,
            namespace=self.namespace,
            runtime=runtime,
            retention=self.config.retention,
        )

    async def _submit_identity(
        self,
        api: Api,
        spec: TrainJobSpec,
        runtime: RuntimeInfo | None,
        identity: Identity,
        fresh_after_failure: bool,
    ) -> Submitted:
        """Submit for an orchestrator identity: reattach to its job, or — when the last
        attempt failed and ``fresh_after_failure`` — submit the next attempt."""
        ident = identity_text(identity)
        assert ident is not None

        build = self._builder(runtime)

        def build_attempt(attempt: int) -> BuiltTrainJob:
            return build(spec, identity=ident, attempt=attempt)

        return await submit_identity(api, self.namespace, ident, build_attempt, fresh_after_failure)

    async def _located(
        self, identity: Identity, option: Checkpoints | None
    ) -> tuple[CheckpointLocation, list[dict[str, Any]]]:
        """Where ``identity``'s checkpoints are, with its jobs (see :func:`locate_program`)."""
        ident = identity_text(identity) or ""
        return await locate_program(await self._api(), self.config, self.namespace, ident, option)
