"""The simulated cluster as each of its parts sees it.

The reconciler, the Job controller, the kubelet and the runner call one another through the
cluster (:class:`~kf_trainer_core.testing.controller.cluster.Cluster`), which builds all of
them. They are typed against these protocols, not against the cluster or one another, so
that the cluster depends on its parts and no part depends back on it.
"""

from __future__ import annotations

from typing import Any, Protocol

from kf_trainer_core.testing.controller.events import Recorder
from kf_trainer_core.testing.controller.state import JobSim, PodSim, RJob, Run, Sim
from kf_trainer_core.testing.controller.status import StatusWriter
from kf_trainer_core.testing.controller.vocab import JSON
from kf_trainer_core.testing.controller.worker import Worker
from kf_trainer_core.testing.scenarios import Executor, Scenario
from kf_trainer_core.testing.store import PodLogs, Store

__all__ = ["ClusterParts", "JobControl", "PodControl", "RunControl", "ScenarioChoice"]


class ScenarioChoice(Protocol):
    """Picks the scenario of a new TrainJob (the reconciler asks)."""

    def select(self, obj: JSON) -> tuple[Scenario, str | None]:
        """The scenario for TrainJob ``obj``, and why its annotation was ignored."""
        ...


class JobControl(Protocol):
    """What the reconciler and the kubelet ask of the Job controller."""

    def check_startup(self, sim: Sim) -> None:
        """Start the replicated jobs whose startup order now allows it."""
        ...

    def start_rjob(self, sim: Sim, rjob: RJob, *, suspended: bool) -> None:
        """Create the Jobs of one replicated job."""
        ...

    def fill_job(self, job: JobSim) -> None:
        """Create the pods a Job still lacks."""
        ...

    def pod_done(self, pod: PodSim, success: bool) -> None:
        """A pod of a Job ended."""
        ...

    def drop_all(self, sim: Sim) -> None:
        """Stop driving every Job of a TrainJob."""
        ...


class PodControl(Protocol):
    """What the Job controller, the reconciler and the runner ask of the kubelet."""

    def admit(self, pod: PodSim) -> None:
        """Schedule a new pod, or leave it Pending."""
        ...

    def finish(self, pod: PodSim, exit_code: int, reason: str, message: str | None) -> None:
        """The pod's main container exited (the runner reports a real run's end)."""
        ...

    def log(self, pod: PodSim, text: str) -> None:
        """Lines the pod's main container wrote (the runner's real runs)."""
        ...

    def kill(self, pod: PodSim, *, delete: bool) -> None:
        """Stop a pod (and delete its object when ``delete``)."""
        ...


class RunControl(Protocol):
    """What the kubelet asks of the runner of real pod runs."""

    def start(self, pod: PodSim, executor: Executor | None) -> None:
        """Run the pod's main container for real."""
        ...

    def stop(self, run: Run) -> None:
        """Stop a real run."""
        ...


class ClusterParts(Protocol):
    """The shared state and the parts of one simulation. Each part sees the other parts
    only through the protocols above (read-only: the cluster builds them)."""

    store: Store
    logs: PodLogs
    #: The TrainJob status server whose endpoint trainer pods get (None: off).
    status_server: Any
    status: StatusWriter
    worker: Worker
    events: Recorder
    sims: dict[tuple[str, str], Sim]
    pods: dict[tuple[str, str], PodSim]
    jobs: dict[tuple[str, str], JobSim]

    @property
    def scenarios(self) -> ScenarioChoice: ...
    @property
    def job_ctl(self) -> JobControl: ...
    @property
    def kubelet(self) -> PodControl: ...
    @property
    def runner(self) -> RunControl: ...
