"""What the clients do for a job MultiKueue dispatched to a worker cluster
(:mod:`kf_trainer_core.cluster.multikueue`): read it across both clusters, and wait for
it where it runs.

Reads (``get_job``, events, logs, outputs, failures) take one
:class:`~kf_trainer_core.k8s.api.Api` over a
:class:`~kf_trainer_core.backends.kubernetes.workers.RoutedTransport`: the TrainJob and
its Workload from the manager, pods, logs, events and JobSet from the worker, so that
every operation of :mod:`kf_trainer_core.programs` serves unchanged. Cancel and delete
stay on the manager (MultiKueue removes the worker's copy).

A wait follows the manager until Kueue admits the job on a worker, then the worker's
copy of the TrainJob: the worker says Complete about a second before its status is
copied back, and MultiKueue deletes the worker's copy — pods, termination messages,
logs — moments after the manager's Workload finishes, so the result is read there
first. A worker that cannot be reached leaves the wait on the manager (the copied
status), said once, with the fix.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from contextlib import suppress
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from kf_trainer_core.client.base import Operations
from kf_trainer_core.cluster.kueue import (
    QueueStatus,
    QueueTracker,
    lookup,
)
from kf_trainer_core.cluster.multikueue import (
    WorkerCluster,
    dispatched,
    worker_result_missing,
)
from kf_trainer_core.cluster.status import Event, TrainJob, job_state
from kf_trainer_core.config import KubernetesConfig
from kf_trainer_core.errors import WorkerUnreachableError
from kf_trainer_core.k8s.api import Api
from kf_trainer_core.k8s.calls import Get
from kf_trainer_core.k8s.errors import ApiError
from kf_trainer_core.k8s.resources import TRAINJOBS
from kf_trainer_core.programs.outcome import Outcome
from kf_trainer_core.programs.reads import get_events, get_object
from kf_trainer_core.programs.wait import JobWait, Verdict, WaitGoal, judged

if TYPE_CHECKING:
    from kf_trainer_core.backends.kubernetes.workers import Workers

__all__ = ["Placement", "handoff_due"]

#: How often a log follower looks whether MultiKueue has dispatched its job yet.
_DISPATCH_POLL_SECONDS = 1.0


def handoff_due(obj: Mapping[str, Any], queue: QueueStatus | None) -> bool:
    """Whether a wait on the manager hands over to the worker: a MultiKueue job that
    Kueue admitted on a worker and that has not finished."""
    return (
        dispatched(obj)
        and queue is not None
        and queue.worker is not None
        and not job_state(obj).terminal
    )


class Placement(Operations):
    """:class:`~kf_trainer_core.client.base.Operations` and what they do for a job
    MultiKueue dispatched to a worker (the base of
    :class:`~kf_trainer_core.client.AsyncTrainerClient`)."""

    _workers_of: Workers | None = None

    def _dispatched(self, obj: Mapping[str, Any]) -> bool:
        """Whether ``obj`` is a MultiKueue job this client follows to its worker."""
        return isinstance(self.config, KubernetesConfig) and dispatched(obj)

    def _handoff(self) -> Callable[[Mapping[str, Any], QueueStatus | None], bool] | None:
        """The predicate that ends a manager wait to follow the job on its worker
        (``None`` off a cluster)."""
        return handoff_due if isinstance(self.config, KubernetesConfig) else None

    async def _workers(self) -> Workers:
        if self._workers_of is None:
            from kf_trainer_core.base.offloop import imported

            mod = await imported("kf_trainer_core.backends.kubernetes.workers")
            self._workers_of = mod.Workers(self.config, self.namespace)
        return self._workers_of

    async def _disconnect(self) -> None:
        # The MultiKueue workers' connections go with the client's own.
        workers, self._workers_of = self._workers_of, None
        if workers is not None:
            await workers.close()
        await super()._disconnect()

    async def _placed(
        self, api: Api, obj: Mapping[str, Any], cluster: str | None = None
    ) -> tuple[Api, WorkerCluster | None]:
        """The Api that reads job ``obj`` where it runs, and where that is: ``api``
        itself for a job its own cluster runs (``None``); for a MultiKueue job, an Api
        across manager and worker, or ``api`` with the reason the worker cannot be
        reached (its pods then show as none, its state as the manager has it)."""
        if not isinstance(self.config, KubernetesConfig) or not dispatched(obj):
            return api, None
        if cluster is None:
            probe = self._kueue()
            queue = (
                await lookup(api, self.namespace, obj, probe, positions=False) if probe else None
            )
            cluster = queue.worker if queue is not None else None
        if cluster is None:
            return api, WorkerCluster()
        from kf_trainer_core.base.offloop import imported

        mod = await imported("kf_trainer_core.backends.kubernetes.workers")
        try:
            transport = await (await self._workers()).transport(api, cluster)
        except mod.WorkerUnreachable as exc:
            return api, WorkerCluster(name=cluster, problem=str(exc))
        routed = Api(mod.RoutedTransport(api.transport, transport), api.policy, api.hook)
        return routed, WorkerCluster(name=cluster, reachable=True)

    async def _reader(self, name: str, *, follow: bool = False) -> Api:
        """The Api that reads job ``name``'s pods and logs where it runs. With
        ``follow``, a MultiKueue job not dispatched yet is waited for (its log exists
        only once a worker runs it). A worker that cannot be reached raises
        :class:`~kf_trainer_core.errors.WorkerUnreachableError`, naming the fix."""
        api = await self._api()
        if not isinstance(self.config, KubernetesConfig):
            return api
        while True:
            obj = await get_object(api, self.namespace, name)
            reader, where = await self._placed(api, obj)
            if where is None or where.reachable:
                return reader
            if where.problem is not None:
                raise WorkerUnreachableError(where.problem)
            if not follow or job_state(obj).terminal:
                return reader
            await api.sleep(_DISPATCH_POLL_SECONDS)

    async def _as_run(
        self, reader: Api, obj: dict[str, Any], where: WorkerCluster | None
    ) -> dict[str, Any]:
        """``obj`` with the worker's status where the worker's copy has finished and
        the manager's has not heard yet (MultiKueue copies it back about a second
        later): what a wait just returned is what a read right after it shows."""
        if where is None or not where.reachable or job_state(obj).terminal:
            return obj
        worker = getattr(reader.transport, "worker", None)
        if worker is None:
            return obj
        try:
            copy = await Api(worker, reader.policy)(
                Get(TRAINJOBS, self.namespace, str((obj.get("metadata") or {}).get("name")))
            )
        except ApiError:
            return obj  # gone or unreadable: the manager's word stands
        if not job_state(copy).terminal:
            return obj
        return {**obj, "status": copy.get("status") or {}}

    async def _with_manager_events(
        self, api: Api, reader: Api, obj: dict[str, Any], events: list[Event]
    ) -> list[Event]:
        """A MultiKueue job's events read on its worker, with those of its TrainJob on
        the manager (Kueue's there: its Workload created, quota reserved, admitted on the
        worker), oldest first."""
        if reader is api:
            return events
        name = str((obj.get("metadata") or {}).get("name"))
        ours = await get_events(api, self.namespace, name, pods=[], obj=obj)
        both = [*ours, *events]
        far = datetime.min.replace(tzinfo=timezone.utc)
        return sorted(both, key=lambda e: e.event_time or far)

    @staticmethod
    def _shown_on(job: TrainJob, where: WorkerCluster | None) -> TrainJob:
        return job if where is None else job.model_copy(update={"worker": where})

    @staticmethod
    def _outcome_on(done: Outcome, where: WorkerCluster | None) -> Outcome:
        if where is None:
            return done
        job = done.job.model_copy(update={"worker": where})
        missing = worker_result_missing(done.missing, f"{job.namespace}/{job.name}", where)
        return dataclasses.replace(done, job=job, missing=missing)

    async def _manager_wait(
        self,
        api: Api,
        goal: WaitGoal,
        tracker: QueueTracker | None,
        args: dict[str, Any],
        left: float | None,
    ) -> tuple[Verdict, dict[str, Any]]:
        """A wait on the manager's informers (``args``: the wait's other settings)."""
        with self._subscriptions(goal.name) as (jobs, events, waker):
            wait = JobWait(api, self.namespace, goal, jobs, events, waker, tracker=tracker, **args)
            return await judged(wait, left)

    async def _follow_worker(
        self,
        api: Api,
        goal: WaitGoal,
        obj: dict[str, Any],
        tracker: QueueTracker | None,
        wait_args: dict[str, Any],
        timeout: float | None,
        verdict: Verdict,
        started: float,
    ) -> Outcome:
        """The rest of a wait on a MultiKueue job. Handed over (:func:`handoff_due`):
        on the worker when it can be reached, else on the manager saying why. Ended on
        the manager (the job had finished, or failed to be admitted): its outcome read
        across both clusters."""
        deadline_at = None if timeout is None else started + timeout

        queue = tracker.status if tracker else None
        cluster = queue.worker if queue is not None else None
        routed, where = await self._placed(api, obj, cluster)
        if verdict.kind != "handoff":
            return await self._concluded(routed, goal, verdict, obj, tracker, where, timeout)
        if where is None or not where.reachable:
            verdict, last = await self._manager_wait(
                api, goal, tracker, wait_args, _left(deadline_at)
            )
            return await self._concluded(api, goal, verdict, last, tracker, where, timeout)
        workers = await self._workers()
        assert cluster is not None
        cfg = workers.configs[cluster]
        # The worker's informers serve the job; a read by name (before they list the
        # copy) goes through the routed Api to the manager's TrainJob, whose copied
        # status ends the wait all the same should the worker's copy never be seen.
        with self._subscriptions(goal.name, cfg) as (jobs, events, waker):
            wait = JobWait(routed, self.namespace, goal, jobs, events, waker, **wait_args)
            verdict, seen = await judged(wait, _left(deadline_at))
        if tracker is not None:
            # Kueue names the worker (the handoff) before the Workload reads Admitted,
            # and nothing refreshed the manager's queue status since: read it again, so
            # that the outcome and a timeout's message say where the job stands now
            # (admitted, finished), not "queued" as at the handoff.
            with suppress(ApiError):  # the outcome stands without it
                await tracker.refresh(api, obj)
        if verdict.kind == "deleted":
            # The worker's copy went first (the manager's Workload finished, was evicted
            # or deleted): the manager says what became of the job.
            verdict, last = await self._manager_wait(
                api, goal, tracker, wait_args, _left(deadline_at)
            )
            return await self._concluded(routed, goal, verdict, last, tracker, where, timeout)
        return await self._concluded(routed, goal, verdict, seen, tracker, where, timeout)

    async def _concluded(
        self,
        api: Api,
        goal: WaitGoal,
        verdict: Verdict,
        obj: dict[str, Any],
        tracker: QueueTracker | None,
        where: WorkerCluster | None,
        timeout: float | None,
    ) -> Outcome:
        queue = tracker.status if tracker else None
        done = await self._conclude(
            api, goal, verdict, obj, timeout=timeout, queue=queue, batched=False
        )
        return self._outcome_on(done, where)


def _left(deadline_at: float | None) -> float | None:
    if deadline_at is None:
        return None
    return max(0.0, deadline_at - time.monotonic())
