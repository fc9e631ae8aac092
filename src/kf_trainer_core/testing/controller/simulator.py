"""The public face of the simulated controllers: :class:`TrainerController`."""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import Any

from kf_trainer_core.testing.controller.cluster import Cluster
from kf_trainer_core.testing.controller.deleting import GC_PASS_SECONDS, reapply_while_deleting
from kf_trainer_core.testing.controller.vocab import JOBS, JSON
from kf_trainer_core.testing.scenarios import Scenario
from kf_trainer_core.testing.store import (
    CLUSTER_TRAINING_RUNTIMES,
    JOBSETS,
    PODS,
    TRAINING_RUNTIMES,
    TRAINJOBS,
    PodLogs,
    Store,
    WatchEvent,
)


class TrainerController:
    """Simulated Trainer v2.3 + JobSet + Job controller + kubelets over a :class:`Store`.

    ``clock_scale`` multiplies every scenario duration (and ``activeDeadlineSeconds``):
    ``2.0`` runs twice as slow, ``0.5`` twice as fast.
    """

    def __init__(self, store: Store, logs: PodLogs, *, clock_scale: float = 1.0) -> None:
        if clock_scale <= 0:
            raise ValueError("clock_scale must be positive")
        self.store = store
        self.logs = logs
        self._cx = Cluster(store, logs, clock_scale)
        self._unsubscribe: Callable[[], None] | None = None

    @property
    def clock_scale(self) -> float:
        """How much slower (> 1) or faster (< 1) than written scenarios run."""
        return self._cx.worker.clock_scale

    @clock_scale.setter
    def clock_scale(self, value: float) -> None:
        self._cx.worker.clock_scale = value

    @property
    def status_server(self) -> Any:
        """The TrainJob status server whose endpoint trainer pods get (None: off)."""
        return self._cx.status_server

    @status_server.setter
    def status_server(self, value: Any) -> None:
        self._cx.status_server = value

    @property
    def default_preset(self) -> str:
        """The preset :attr:`default_scenario` is reset to (``default``: a job's training
        function really runs where it can; ``success``: every run simulated)."""
        return self._cx.scenarios.preset

    @default_preset.setter
    def default_preset(self, name: str) -> None:
        self._cx.scenarios.default = Scenario.preset(name)  # an unknown name raises here
        self._cx.scenarios.preset = name

    @property
    def default_scenario(self) -> Scenario:
        """The scenario of TrainJobs that neither the annotation nor a script selects."""
        return self._cx.scenarios.default

    @default_scenario.setter
    def default_scenario(self, value: Scenario) -> None:
        self._cx.scenarios.default = value

    # ------------------------------------------------------------------ public API

    def start(self) -> None:
        """Start the worker thread and follow the store (TrainJobs that already exist
        are picked up too)."""
        if not self._cx.worker.start():
            return
        self._unsubscribe = self.store.subscribe(self._on_store_event, copy=False)
        # Trainer v2.3 re-applies the JobSet of an unfinished TrainJob being deleted.
        self.store.foreground_hooks[TRAINJOBS] = reapply_while_deleting
        # A TrainJob deleted in the background goes at once; its JobSet a moment later.
        self.store.background_gc_delays[TRAINJOBS] = GC_PASS_SECONDS
        items, _ = self.store.list(TRAINJOBS)
        for obj in items:
            self._cx.worker.post(partial(self._cx.trainjobs.on_trainjob, "ADDED", obj))

    def stop(self) -> None:
        """Stop following the store, stop the worker and kill running subprocesses."""
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
            self.store.foreground_hooks.pop(TRAINJOBS, None)
            self.store.background_gc_delays.pop(TRAINJOBS, None)
        was_running = self._cx.worker.stop()
        if was_running or self._cx.sims:
            self._cx.reset_state()
        self._cx.runner.shutdown()

    def script(self, match: str | Callable[[JSON], bool], scenario: Scenario) -> None:
        """Use ``scenario`` for TrainJobs named ``match`` (or for which the predicate
        ``match(trainjob_dict)`` is true). Later registrations win; the scenario
        annotation on a TrainJob wins over any script."""
        if not isinstance(scenario, Scenario):
            raise TypeError("scenario must be a Scenario (use Scenario.preset(name))")
        self._cx.scenarios.add(match, scenario)

    def reset(self) -> None:
        """Forget scripts (and a changed ``default_scenario``: back to the default preset) and stop
        every running simulation and subprocess. The store is left alone: TrainJobs in
        it are only simulated again when they change."""
        self._cx.scenarios.reset()
        self._cx.worker.clear()
        self._cx.worker.run_on_worker(self._cx.reset_state)

    def wait_idle(self, timeout: float = 10) -> bool:
        """Wait until no work is queued, no timer is pending and no subprocess runs;
        False on timeout. Jobs that never finish (or are stuck pulling an image) leave
        nothing pending, so they count as idle."""
        # A garbage collector pass still to come (a TrainJob deleted in the background)
        # counts as work: it deletes objects the controllers then react to.
        end = time.monotonic() + timeout
        if not self.store.wait_collected(timeout):
            return False
        return self._cx.worker.wait_idle(max(0.0, end - time.monotonic()))

    # ------------------------------------------------------------------ store events

    def _on_store_event(self, ev: WatchEvent) -> None:
        # Runs on the writer's thread: only queue work, never touch simulation state.
        cx, res = self._cx, ev.resource
        post = cx.worker.post
        if res == TRAINJOBS:
            post(partial(cx.trainjobs.on_trainjob, ev.type, ev.object))
        elif ev.type == "DELETED":
            if res == PODS:
                post(partial(cx.job_ctl.on_pod_deleted, ev.object))
            elif res == JOBS:
                post(partial(cx.job_ctl.on_job_deleted, ev.object))
            elif res == JOBSETS:
                post(partial(cx.trainjobs.on_jobset_deleted, ev.object))
        elif ev.type in ("ADDED", "MODIFIED") and res in (
            CLUSTER_TRAINING_RUNTIMES,
            TRAINING_RUNTIMES,
        ):
            post(partial(cx.trainjobs.on_runtime_changed, res, ev.object))
