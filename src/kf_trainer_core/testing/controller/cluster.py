"""The parts of the simulated cluster and what they share.

Each collaborator (reconciler, Job controller, kubelet, runner) holds the
:class:`Cluster` and reaches the others through it; the tracked objects live here.
"""

from __future__ import annotations

from typing import Any

from kf_trainer_core.testing.controller.events import Recorder
from kf_trainer_core.testing.controller.executor import Runner
from kf_trainer_core.testing.controller.jobs import JobController
from kf_trainer_core.testing.controller.kubelet import Kubelet
from kf_trainer_core.testing.controller.reconcile import ScenarioBook, TrainJobReconciler
from kf_trainer_core.testing.controller.state import JobSim, PodSim, Sim
from kf_trainer_core.testing.controller.status import StatusWriter
from kf_trainer_core.testing.controller.worker import Worker
from kf_trainer_core.testing.store import PodLogs, Store


class Cluster:
    """The store, the worker, the recorders and the controllers of one simulation."""

    def __init__(self, store: Store, logs: PodLogs, clock_scale: float) -> None:
        self.store = store
        self.logs = logs
        #: The TrainJob status server whose endpoint trainer pods get (None: off).
        self.status_server: Any = None
        self.scenarios = ScenarioBook()
        self.status = StatusWriter(store)
        self.worker = Worker(clock_scale, self.status.flush_dirty)
        self.events = Recorder(store)
        # Owned by the worker thread only.
        self.sims: dict[tuple[str, str], Sim] = {}
        self.pods: dict[tuple[str, str], PodSim] = {}
        self.jobs: dict[tuple[str, str], JobSim] = {}
        self.trainjobs = TrainJobReconciler(self)
        self.job_ctl = JobController(self)
        self.kubelet = Kubelet(self)
        self.runner = Runner(self)

    def reset_state(self) -> None:
        """Forget every simulation and stop every real run (the store is left alone)."""
        for sim in list(self.sims.values()):
            sim.end()
            sim.state = "gone"
        self.runner.stop_all()
        self.sims.clear()
        self.pods.clear()
        self.jobs.clear()
        self.status.forget()
