"""The simulation state of one TrainJob and its JobSet, Jobs, pods and real runs.

Only the controller's worker thread touches these objects (a :class:`Run`'s lock and
event are what other threads may use).
"""

from __future__ import annotations

import logging
import subprocess
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kf_trainer_core.emulation.jobs import JobCounts, JobRef
from kf_trainer_core.testing.controller.vocab import JSON, LOG_TAIL
from kf_trainer_core.testing.scenarios import Scenario, Step
from kf_trainer_core.testing.store import Resource, Store, StoreError

_log = logging.getLogger(__name__)


class BuildError(Exception):
    """The JobSet cannot be built: a Warning Event, and the job stays pending."""


class Token:
    """Cancels the timers that captured it (suspend, terminal state, deletion)."""

    __slots__ = ("cancelled",)

    def __init__(self) -> None:
        self.cancelled = False


@dataclass(eq=False)
class Run:
    """One pod container executed for real (subprocess or custom executor)."""

    pod: PodSim
    workdir: Path
    termination_log: Path
    cancelled: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    proc: subprocess.Popen[bytes] | None = None


@dataclass(eq=False)
class PodSim:
    """A pod of a simulated Job, as its kubelet sees it."""

    job: JobSim
    index: int
    name: str
    uid: str
    spec: JSON
    labels: dict[str, str]
    annotations: dict[str, str]
    main: str
    node: str = ""
    ip: str = ""
    host_ip: str = ""
    phase: str = "Pending"
    started: bool = False  # containers created and started
    ready: bool = False
    alive: bool = True  # tracked (not deleted)
    started_at: str | None = None
    run: Run | None = None
    tail: deque[str] = field(default_factory=lambda: deque(maxlen=LOG_TAIL))
    logs_closed: bool = False
    waiting: JSON | None = None

    @property
    def active(self) -> bool:
        return self.alive and self.phase in ("Pending", "Running")

    @property
    def containers(self) -> list[JSON]:
        return list(self.spec.get("containers") or [])

    @property
    def namespace(self) -> str:
        return self.job.sim.namespace

    @property
    def is_rank0(self) -> bool:
        return self.index == 0 and self.job.index == 0


@dataclass(eq=False)
class JobSim:
    """A ``batch/v1`` Job of a replicated job."""

    sim: Sim
    rjob: RJob
    index: int
    name: str
    uid: str = ""
    alive: bool = True
    suspended: bool = False
    pods: dict[int, PodSim] = field(default_factory=dict)  # live pod per index
    succeeded: set[int] = field(default_factory=set)
    failed: int = 0
    finished: str = ""  # "", "Complete", "Failed"
    failed_at: float = 0.0
    conditions: list[JSON] = field(default_factory=list)
    start_time: str | None = None
    completion_time: str | None = None

    @property
    def pod_count(self) -> int:
        return min(self.rjob.parallelism, self.rjob.completions)

    @property
    def active_count(self) -> int:
        return sum(1 for p in self.pods.values() if p.active)

    @property
    def ready_count(self) -> int:
        return sum(1 for p in self.pods.values() if p.active and p.ready)

    @property
    def ref(self) -> JobRef:
        """Which Job this is, as its labels say."""
        sim = self.sim
        rjobs = tuple((r.name, r.replicas, r.group) for r in sim.rjobs)
        return JobRef(
            sim.namespace, sim.name, sim.jobset_uid, rjobs, self.rjob.name, self.index, self.uid
        )

    def counts(self) -> JobCounts:
        """What the JobSet controller reads of this Job."""
        return JobCounts(
            finished=self.finished,
            active=self.active_count,
            ready=self.ready_count,
            succeeded=len(self.succeeded),
            pods=self.pod_count,
            suspended=self.suspended,
        )


@dataclass(eq=False)
class RJob:
    """A replicated job of the JobSet, with the scenario step that drives its pods."""

    name: str
    replicas: int
    parallelism: int
    completions: int
    ancestor: str | None
    kind: str  # trainer | initializer | server | other
    depends_on: list[tuple[str, str]]
    template: JSON  # the Job template (metadata + spec)
    step: Step
    main: str
    backoff_limit: int
    group: str = "default"  # the JobSet's groupName of it
    jobs: list[JobSim] = field(default_factory=list)
    started: bool = False

    def live_jobs(self) -> list[JobSim]:
        return [j for j in self.jobs if j.alive]


@dataclass(eq=False)
class Sim:
    """The simulated state of one TrainJob."""

    namespace: str
    name: str
    uid: str
    generation: int
    obj: JSON  # latest TrainJob seen (never mutated: the store shares it)
    scenario: Scenario
    token: Token = field(default_factory=Token)  # this run (suspend/terminal cancel)
    life: Token = field(default_factory=Token)  # the sim (teardown/terminal cancel)
    state: str = "new"  # new | build-failed | active | finished | gone
    suspended: bool = False
    terminal: str = ""  # "" | Complete | Failed
    rjobs: list[RJob] = field(default_factory=list)
    jobset: JSON = field(default_factory=dict)
    jobset_uid: str = ""
    jobset_gone: bool = False
    js_conditions: list[JSON] = field(default_factory=list)
    tj_conditions: list[JSON] = field(default_factory=list)
    jobs_status: list[JSON] | None = None
    last_js_status: JSON | None = None
    last_tj_status: JSON | None = None
    dirty_jobs: set[JobSim] = field(default_factory=set)
    success_operator: str = "All"
    success_targets: list[str] = field(default_factory=list)
    is_mpi: bool = False
    nnodes: int = 1
    nproc: str = "auto"
    auto_suspended: bool = False
    auto_suspend_done: bool = False
    event_keys: dict[tuple[str, str, str], str] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)

    @property
    def spec(self) -> JSON:
        spec = self.obj.get("spec")
        return spec if isinstance(spec, dict) else {}

    def rjob(self, name: str) -> RJob | None:
        return next((r for r in self.rjobs if r.name == name), None)

    def live_jobs(self) -> list[JobSim]:
        """Every tracked Job of every replicated job."""
        return [j for r in self.rjobs for j in r.live_jobs()]

    def new_run(self) -> None:
        """Cancel the timers of the current run (suspend, resume, rebuild)."""
        self.token.cancelled = True
        self.token = Token()

    def end(self) -> None:
        """Cancel every timer of this TrainJob (terminal state, deletion)."""
        self.token.cancelled = True
        self.life.cancelled = True


@dataclass
class Built:
    """What :func:`~kf_trainer_core.testing.controller.jobset.build_jobset` makes."""

    jobset: JSON
    rjobs: list[RJob]
    extra: list[tuple[Resource, JSON]]
    is_mpi: bool
    nnodes: int
    nproc: str


def safe(fn: Callable[..., JSON], *args: Any, **kwargs: Any) -> JSON | None:
    """A store call where the object may be gone or changed meanwhile: a race with a
    deletion is normal, not an error."""
    try:
        return fn(*args, **kwargs)
    except StoreError as exc:
        if exc.code in (404, 409, 410):
            _log.debug("store race ignored: %s", exc)
        else:
            _log.warning("store refused a simulated write: %s", exc)
        return None


def create_or_replace(store: Store, res: Resource, obj: JSON) -> None:
    """Create ``obj``, or overwrite the object of that name."""
    try:
        store.create(res, obj)
    except StoreError as exc:
        if exc.reason != "AlreadyExists":
            _log.warning("cannot create %s: %s", res.kind, exc)
            return
        safe(store.update, res, obj, check_rv=False)
