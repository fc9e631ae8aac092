"""``AsyncTrainerClient``: the client. Each method awaits the operations of
:mod:`kf_trainer_core.programs` over one connection (:class:`~kf_trainer_core.k8s.api.Api`);
:mod:`kf_trainer_core.client.sync` puts the same methods behind the process's portal.
"""

from __future__ import annotations

import time
from collections.abc import (
    AsyncIterator,
    Callable,
    Iterable,
    Mapping,
    Sequence,
)
from typing import Any, Literal, TypeVar

from typing_extensions import Unpack

from kf_trainer_core.client.base import Identity, note_submitted
from kf_trainer_core.client.multikueue import Placement
from kf_trainer_core.cluster.outputs import JobOutputs, outputs
from kf_trainer_core.cluster.status import Event, Failure, JobState, Progress, TrainJob
from kf_trainer_core.errors import RuntimeNotFoundError
from kf_trainer_core.fields import checks, names
from kf_trainer_core.fields.retention import PruneOptions
from kf_trainer_core.manifest.builder import BuiltTrainJob, identity_text
from kf_trainer_core.manifest.runtimes import PACKAGES_SOURCE, RuntimeInfo
from kf_trainer_core.programs.cancel import (
    cancel,
    delete,
    resume,
    set_suspended,
    stop_unfinished,
)
from kf_trainer_core.programs.checkpoints import clean_program, cleaning_job
from kf_trainer_core.programs.logs import LogFollower, follow_logs, read_logs, shown_logs
from kf_trainer_core.programs.outcome import Outcome, explain, get_job, outputs_of
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
    JobWait,
    WaitGoal,
    job_emitter,
    judged,
)
from kf_trainer_core.spec import TrainJobSpec, train_spec
from kf_trainer_core.spec.checkpoint_storage import (
    CheckpointLocation,
    Checkpoints,
    CheckpointsUnreachableError,
)

__all__ = ["AsyncTrainerClient", "CancelAction", "Submitted"]

_NOT_CREATED = "The TrainJob cannot be created"

R = TypeVar("R")
Callback = Callable[[TrainJob], None]
CancelAction = Literal["delete", "suspend", "keep"]
Status = Iterable[str | JobState] | str


class AsyncTrainerClient(Placement):
    """Runs TrainJobs on a cluster (``KubernetesConfig``, the default) or on this
    machine (``LocalConfig``), with the Kubeflow SDK's methods, for event loops (Airflow
    triggers, Prefect async tasks). Use it inside one event loop: its connection is made
    in the loop of its first call."""

    # -- runtimes --------------------------------------------------------------------
    async def list_runtimes(self) -> list[RuntimeInfo]:
        """Cluster-wide and namespaced runtimes."""
        return await list_runtimes(await self._api(), self.namespace)

    async def get_runtime(self, name: str, kind: str = "ClusterTrainingRuntime") -> RuntimeInfo:
        """One runtime (cached for this client)."""
        return await self._runtime(await self._api(), name, kind)

    # -- submitting ------------------------------------------------------------------
    async def build(
        self,
        spec: TrainJobSpec | Mapping[str, Any] | str,
        *,
        name: str | None = None,
        identity: Identity | None = None,
    ) -> BuiltTrainJob:
        """The manifest that :meth:`train` would submit, checked against the runtime
        and the namespace as the cluster has them: a namespace the cluster says does not
        exist raises :class:`~kf_trainer_core.errors.NamespaceNotFoundError`, as the
        submit would (``kf-trainer check`` is this call)."""
        spec = self._given_spec(spec)
        api = await self._api()
        # The runtime first: a cluster out of reach fails there, once. A namespace that
        # does not exist is the cause, not its runtime, when both are missing.
        try:
            runtime = await self._runtime(api, spec.runtime.name, spec.runtime.kind.value)
        except RuntimeNotFoundError:
            if not await namespace_missing(api, self.namespace):
                raise
            raise missing_namespace_error(self.namespace, _NOT_CREATED) from None
        # Built first: a bad name or identity is refused before the namespace is read.
        built = self._builder(runtime)(spec, name=name, identity=identity)
        if await namespace_missing(api, self.namespace):
            raise missing_namespace_error(self.namespace, _NOT_CREATED)
        return built

    async def submit(
        self,
        spec: TrainJobSpec | Mapping[str, Any] | str,
        *,
        name: str | None = None,
        identity: Identity | None = None,
        fresh_after_failure: bool = True,
    ) -> Submitted:
        """Create the TrainJob, idempotently.

        With an ``identity`` (e.g. ``(dag_id, task_id, run_id, map_index)``) the job is
        found again by that identity: a retry after a crash reattaches to it, a retry
        after a failed job submits a fresh attempt (unless ``fresh_after_failure`` is
        off). Without one, a job of the same name and spec is adopted and a different
        spec under that name raises :class:`~kf_trainer_core.errors.SpecConflictError`.
        """
        spec = self._given_spec(spec)
        api = await self._api()
        runtime = await self._runtime(api, spec.runtime.name, spec.runtime.kind.value)
        if identity is not None and name is None:
            done = await self._submit_identity(api, spec, runtime, identity, fresh_after_failure)
        else:
            built = self._builder(runtime)(spec, name=name, identity=identity)
            done = await submit(api, self.namespace, built)
        note_submitted(done)
        return done

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
        """Submit a job (SDK signature) and return its name. Without a name or an
        identity, each call is a new job (the SDK makes a random name per call)."""
        named = any(getattr(o, "type", "") == "Name" for o in options or [])
        if identity is None and spec is None and not named:
            import uuid

            identity = uuid.uuid4().hex
        if spec is None:
            spec = train_spec(
                runtime=runtime, trainer=trainer, initializer=initializer, options=options
            )
        return (await self.submit(spec, identity=identity)).job.name

    # -- reading ---------------------------------------------------------------------
    async def list_jobs(
        self,
        runtime: str | None = None,
        label_selector: str | None = None,
        *,
        page_size: int | None = None,
    ) -> list[TrainJob]:
        """Jobs of the namespace (optionally of one runtime), with their steps. Read
        ``page_size`` jobs a request (default: the config's ``list_page_size``)."""
        jobs = await list_jobs(
            await self._api(), self.namespace, label_selector, page_size or self._page_size
        )
        return [j for j in jobs if runtime is None or j.runtime == runtime]

    async def get_job(self, name: str, *, log_progress: bool = False) -> TrainJob:
        """One job with its steps (and its Kueue queue status when Kueue queues it).
        With ``log_progress``, a job that reports in its log on a cluster without a
        status server gets its progress from there."""
        api = await self._api()
        obj = await get_object(api, self.namespace, name)
        reader, where = await self._placed(api, obj)  # a MultiKueue job: its worker
        obj = await self._as_run(reader, obj, where)
        job = await get_job(
            reader, self.namespace, name, obj, kueue=self._kueue(), log_progress=log_progress
        )
        return self._shown_on(job, where)

    async def get_job_events(self, name: str) -> list[Event]:
        """Events of the job, its JobSet, Jobs and pods; :class:`TrainJobNotFoundError`
        for a job that does not exist (never an empty list that looks like a quiet job)."""
        api = await self._api()
        obj = await get_object(api, self.namespace, name)
        reader, _ = await self._placed(api, obj)
        events = await get_events(reader, self.namespace, name, obj=obj)
        return await self._with_manager_events(api, reader, obj, events)

    async def get_job_outputs(self, name: str) -> JobOutputs:
        """Status, steps, metrics and the function's return value (``result_missing``
        says why a succeeded job's return value could not be read; nothing raises for
        it)."""
        api = await self._api()
        obj = await get_object(api, self.namespace, name)
        reader, where = await self._placed(api, obj)
        done = self._outcome_on(
            await outputs_of(reader, self.namespace, obj, kueue=self._kueue()), where
        )
        return outputs(done.job, done.result, done.missing)

    async def explain_failure(self, name: str) -> Failure:
        """Why a job failed (or is stuck): its Failed condition, failing step and pod,
        container reason and exit code, warning events and its last log lines."""
        reader = await self._reader(name)
        return await explain(reader, self.namespace, name, kueue=self._kueue())

    def get_job_logs(
        self,
        name: str,
        step: str = "node-0",
        follow: bool = False,
        *,
        tail: int | None = None,
        raw: bool = False,
    ) -> AsyncIterator[str]:
        """Log lines of one step; with ``follow``, as they are written, waiting for a
        pending pod and resuming after dropped connections.

        The lines are what a person reads: the suite's own progress and result lines
        are left out, control characters and terminal escapes neutralised and each line
        cut at 4,096 characters, saying so (the job wrote them: they are untrusted).
        ``raw``: every line exactly as the log holds it. The arguments are checked now,
        not at the first line."""
        checks.check_step(step)
        checks.check_count(tail=tail)
        names.require_job_name(name)
        return self._log_lines(name, step, follow, tail, raw)

    async def _log_lines(
        self, name: str, step: str, follow: bool, tail: int | None, raw: bool
    ) -> AsyncIterator[str]:
        api = await self._reader(name, follow=follow)
        if follow:
            async for line in follow_logs(
                api, self.namespace, name, step, tail=1000 if tail is None else tail, raw=raw
            ):
                yield line
            return
        for line in await shown_logs(api, self.namespace, name, step, tail, raw, strict=True):
            yield line

    # -- waiting ---------------------------------------------------------------------
    async def wait(
        self,
        name: str,
        status: Status = ("Complete",),
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
        admitted a queued job within ``admission_timeout`` seconds. A job that reached
        the status is returned whatever node-0's log does: a return value that cannot be
        read (no termination message, log refused or gone) comes back as ``None``, and
        ``get_job_outputs(name).result_missing`` says why.

        ``callbacks`` get every new version of the job (a job queued by Kueue with its
        :class:`~kf_trainer_core.cluster.kueue.QueueStatus`); ``on_progress`` gets the job's
        :class:`Progress` each time what it reports changes (from the status server's
        ``trainerStatus`` or, without one, from node-0's log, read every
        ``log_progress_interval`` seconds while it runs; ``None`` never reads it)."""
        done = await self._outcome(
            name,
            status,
            timeout=timeout,
            polling_interval=polling_interval,
            callbacks=callbacks,
            startup_timeout=startup_timeout,
            admission_timeout=admission_timeout,
            on_progress=on_progress,
            log_progress_interval=log_progress_interval,
        )
        return done.job, done.result

    async def wait_outputs(
        self,
        name: str,
        status: Status = ("Complete",),
        *,
        timeout: float | None = 600,
        polling_interval: float = 2,
        callbacks: Iterable[Callback] | None = None,
        startup_timeout: float | None = None,
        admission_timeout: float | None = None,
        on_progress: Callable[[Progress], None] | None = None,
        log_progress_interval: float | None = LOG_PROGRESS_INTERVAL,
    ) -> JobOutputs:
        """:meth:`wait`, returning the job's outputs (what an orchestrator keeps): the
        function's return value, metrics and cost, and ``result_missing`` saying why a
        succeeded job's return value could not be read. Raises as :meth:`wait` does."""
        done = await self._outcome(
            name,
            status,
            timeout=timeout,
            polling_interval=polling_interval,
            callbacks=callbacks,
            startup_timeout=startup_timeout,
            admission_timeout=admission_timeout,
            on_progress=on_progress,
            log_progress_interval=log_progress_interval,
        )
        return outputs(done.job, done.result, done.missing)

    async def wait_for_job_status(
        self,
        name: str,
        status: Iterable[str] | str = ("Complete",),
        timeout: float | None = 600,
        polling_interval: float = 2,
        callbacks: Iterable[Callback] | None = None,
    ) -> TrainJob:
        """SDK signature: wait and return the job. Watches; ``polling_interval`` is
        used only where watching is forbidden."""
        done = await self._outcome(
            name, status, timeout=timeout, polling_interval=polling_interval, callbacks=callbacks
        )
        return done.job

    async def _outcome(
        self,
        name: str,
        status: Status,
        *,
        timeout: float | None,
        polling_interval: float = 2,
        callbacks: Iterable[Callback] | None = None,
        startup_timeout: float | None = None,
        admission_timeout: float | None = None,
        on_progress: Callable[[Progress], None] | None = None,
        log_progress_interval: float | None = LOG_PROGRESS_INTERVAL,
    ) -> Outcome:
        """A wait, ending in the job's outcome: with the pods and why a result could
        not be read. The wait itself is a deadline around: read the job (from the
        shared informer, by name where it cannot serve), look at it, sleep on the
        waker until the informers have news or an alarm of the wait rings."""
        checks.check_seconds(
            timeout=timeout,
            polling_interval=polling_interval,
            startup_timeout=startup_timeout,
            admission_timeout=admission_timeout,
            log_progress_interval=log_progress_interval,
        )
        goal = WaitGoal.of(name, status, startup_timeout, admission_timeout)
        api = await self._api()
        tracker = self._tracker()
        emit, log_every = job_emitter(callbacks, on_progress, log_progress_interval)
        args: dict[str, Any] = {
            "polling_interval": polling_interval,
            "log_every": log_every,
            "sink": emit,
            "explain_restarts": emit is not None,
        }
        started = time.monotonic()
        with self._subscriptions(name) as (jobs, events, waker):
            wait = JobWait(api, self.namespace, goal, jobs, events, waker, tracker=tracker, **args)
            verdict, obj = await judged(wait, timeout, self._handoff())
        if verdict.kind == "handoff" or self._dispatched(obj):  # MultiKueue: on a worker
            done = self._follow_worker(api, goal, obj, tracker, args, timeout, verdict, started)
            return await done
        queue = tracker.status if tracker else None
        return await self._conclude(api, goal, verdict, obj, timeout=timeout, queue=queue)

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
        on_submitted: Callable[[Submitted], None] | None = None,
        fresh_after_failure: bool = True,
        reuse_notice: bool = True,
        on_progress: Callable[[Progress], None] | None = None,
        log_progress_interval: float | None = LOG_PROGRESS_INTERVAL,
    ) -> JobOutputs:
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
        submitted = await self.submit(
            spec, name=name, identity=identity, fresh_after_failure=fresh_after_failure
        )
        if on_submitted is not None:
            on_submitted(submitted)
        job_name = submitted.job.name
        notice = submitted.reuse_notice(self.config) if reuse_notice else None
        if notice is not None and on_log is not None:
            on_log(notice)
        # One step's log beside the wait (read from the worker for a MultiKueue job).
        lines = None
        if notice is None and on_log is not None:
            lines = self.get_job_logs(job_name, log_step, follow=True, tail=log_tail)
        async with LogFollower(lines, on_log):
            done = await self._outcome(
                job_name,
                ("Complete",),
                timeout=timeout,
                startup_timeout=startup_timeout,
                admission_timeout=admission_timeout,
                callbacks=[on_update] if on_update else None,
                on_progress=on_progress,
                log_progress_interval=log_progress_interval,
            )
        return outputs(done.job, done.result, done.missing)

    async def get_runtime_packages(
        self, runtime: str = "torch-distributed", *, timeout: float = 600
    ) -> list[str]:
        """Run a one-node job on ``runtime`` that lists its Python packages (and GPUs),
        and return that output (SDK ``get_runtime_packages``)."""
        from kf_trainer_core.spec import CustomTrainer

        spec = TrainJobSpec(runtime=runtime, trainer=CustomTrainer(PACKAGES_SOURCE, num_nodes=1))
        identity = f"runtime-packages/{runtime}/{time.time_ns()}"
        name = await self.train(spec=spec, identity=identity)
        await self.wait(name, timeout=timeout)
        return await read_logs(await self._api(), self.namespace, name, "node-0", None, strict=True)

    # -- stopping --------------------------------------------------------------------
    async def cancel_job(self, name: str, action: CancelAction = "delete") -> bool:
        """Stop a job: ``delete`` it (pods and JobSet go with it), ``suspend`` it (kept,
        resumable) or ``keep`` it running. ``True`` if something was done; ``False`` for
        ``keep`` or a job already gone (a cancel is idempotent: an orchestrator's kill
        may come after the job ended and was deleted)."""
        return await cancel(await self._api(), self.namespace, name, action)

    async def stop_unfinished(
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
        return await stop_unfinished(
            await self._api(),
            self.namespace,
            action,
            name=name,
            identity=identity_text(identity),
            label_selector=label_selector,
        )

    async def prune_jobs(
        self, *, page_size: int | None = None, **options: Unpack[PruneOptions]
    ) -> PruneReport:
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
        Each goes through the one safe delete, read again first and deleted only if it is
        still the finished, due job that was listed; an identity's attempt 0 goes last.
        ``dry_run`` returns the plan and deletes nothing."""
        rules = PruneRules.of(options)  # checked before the first request
        return await prune(
            await self._api(),
            self.namespace,
            rules,
            dry_run=options.get("dry_run", False),
            page_size=page_size or self._page_size,
        )

    async def delete_job(self, name: str, *, propagation: str = "Background") -> bool:
        """Delete the TrainJob (never only its JobSet) through the one safe delete
        (docs/safety.md); ``False`` if it was already gone."""
        return await delete(await self._api(), self.namespace, name, propagation)

    async def suspend_job(self, name: str) -> TrainJob:
        """Suspend: the pods go, the job stays and can be resumed. Returns once the
        Trainer has marked the job ``Suspended`` (a job Kueue holds: its Workload
        deactivated, see docs/kueue.md), so the job returned reads so; after 5 s
        without it, the job as it is."""
        return await set_suspended(await self._api(), self.namespace, name, True, settle=True)

    async def resume_job(self, name: str) -> TrainJob:
        """Resume a suspended job. A job Kueue holds (labelled for a queue, or dispatched
        by MultiKueue) has its Workload made active again and runs when Kueue admits it
        (``spec.suspend`` would be set back at once): it comes back with its queue
        status, still suspended until then."""
        return await resume(await self._api(), self.namespace, name, self._kueue())

    # -- checkpoints -----------------------------------------------------------------
    async def checkpoint_location(
        self, identity: Identity, *, checkpoints: Checkpoints | None = None
    ) -> CheckpointLocation:
        """Where every attempt of ``identity`` keeps its checkpoints (``docs/checkpoints.md``)."""
        return (await self._located(identity, checkpoints))[0]

    async def clean_checkpoints(
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
        loc, existing = await self._located(identity, checkpoints)
        try:
            return clean_program(loc, existing, self.config, force)
        except CheckpointsUnreachableError as exc:
            location = exc.location
            job = cleaning_job(location)
            if job is None:
                raise
        done = await self.run(job[0], identity=job[1], timeout=timeout, fresh_after_failure=True)
        await self.delete_job(done.name)  # the suite's own helper job, finished
        return location

    # -- the connection --------------------------------------------------------------
    async def close(self) -> None:
        """Release this client's connection (shared watches keep theirs)."""
        await self._disconnect()

    async def __aenter__(self) -> AsyncTrainerClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
