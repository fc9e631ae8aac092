"""A simulated Kubeflow Trainer controller for the Kubernetes-API test server.

:class:`TrainerController` makes the in-process :class:`~kf_trainer_core.testing.store.Store`
behave like a cluster that runs Kubeflow Trainer v2.3.0, JobSet v0.12, the Job
controller, the scheduler and kubelets:

* a TrainJob gets a JobSet built from its (Cluster)TrainingRuntime (trainer and
  initializer overrides, ML-policy environment, runtime patches), owned by the TrainJob;
* the JobSet gets ``batch/v1`` Jobs (stored as :data:`JOBS`), the Jobs get Pods that go
  ``Pending`` -> ``Running`` -> ``Succeeded``/``Failed`` with realistic conditions,
  container states, logs (:class:`~kf_trainer_core.testing.store.PodLogs`) and core/v1
  Events;
* statuses flow back up: Job status, JobSet ``replicatedJobsStatus``/conditions, and the
  TrainJob's ``conditions`` (only ``Suspended``, ``Complete``, ``Failed``, with the reasons
  and messages the real controllers use), ``jobsStatus`` and ``trainerStatus``.

How each TrainJob behaves is scripted by a :class:`~kf_trainer_core.testing.scenarios.Scenario`
(annotation ``testing.kf-trainer-suite/scenario``, :meth:`TrainerController.script`, or
:attr:`TrainerController.default_scenario`); ``executor="exec"`` runs the trainer
container's command for real as a local subprocess.

Design: one worker thread owns all simulation state. Store changes (via
:meth:`Store.subscribe`) and finished subprocesses post work items to it; timed steps
sit in one heap. Scripted jobs cost no threads, so hundreds run concurrently.
Everything the worker does is guarded: an object deleted meanwhile is ignored, an
unexpected exception is logged and the worker carries on.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import heapq
import itertools
import logging
import os
import random
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import partial
from pathlib import Path
from typing import Any

from kf_trainer_core.function import (
    RESULT_MARKER,
    TERMINATION_LOG_ENV,
    TERMINATION_MESSAGE_LIMIT,
)
from kf_trainer_core.report import URL_ENV
from kf_trainer_core.testing.crd import find_upstream
from kf_trainer_core.testing.runtimes import install_runtimes
from kf_trainer_core.testing.scenarios import (
    PRESETS,
    SCENARIO_ANNOTATION,
    PodContext,
    PodResult,
    Scenario,
    Step,
    evict_pod_status,
)
from kf_trainer_core.testing.store import (
    CLUSTER_TRAINING_RUNTIMES,
    CONFIGMAPS,
    EVENTS,
    JOBSETS,
    PODS,
    SECRETS,
    TRAINING_RUNTIMES,
    TRAINJOBS,
    PodLogs,
    Resource,
    Store,
    StoreError,
    WatchEvent,
    apply_strategic_merge_patch,
    format_timestamp,
    json_copy,
)

__all__ = [
    "JOBS",
    "PRESETS",
    "SCENARIO_ANNOTATION",
    "PodContext",
    "PodResult",
    "Scenario",
    "Step",
    "TrainerController",
    "find_upstream",
    "install_runtimes",
]

_log = logging.getLogger(__name__)

JSON = dict[str, Any]

#: ``batch/v1`` Jobs: the store holds them (so owner-reference cascades reach the pods)
#: although the test server need not serve them.
JOBS = Resource("batch", "v1", "jobs", "Job")

# --- API groups and well-known names -------------------------------------------------
_TRAINER_GROUP = "trainer.kubeflow.org"
_TRAINER_API = "trainer.kubeflow.org/v1alpha1"
_JOBSET_API = "jobset.x-k8s.io/v1alpha2"
_MULTIKUEUE = "kueue.x-k8s.io/multikueue"
_ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"
_INITIALIZERS = ("dataset-initializer", "model-initializer")
#: Trainer's ContainerTrainerPort (pkg/constants/constants.go): PET_MASTER_PORT.
TORCH_MASTER_PORT = 29500
#: The suite's generated launcher uses plain python (no torchrun/mpirun here).
LAUNCHER_ENV = "KF_TRAINER_LAUNCHER"

# --- Conditions, reasons and messages ------------------------------------------------
# kubeflow/trainer pkg/apis/trainer/v1alpha1/trainjob_types.go and pkg/constants.
_TJ_SUSPENDED, _TJ_COMPLETE, _TJ_FAILED = "Suspended", "Complete", "Failed"
_R_SUSPENDED, _M_SUSPENDED = "Suspended", "TrainJob is suspended"
_R_RESUMED, _M_RESUMED = "Resumed", "TrainJob is resumed"
_R_DEADLINE, _M_DEADLINE = "DeadlineExceeded", "TrainJob exceeded its active deadline"
_R_NOT_SUPPORTED = "TrainingRuntimeNotSupported"
# pkg/controller/trainjob_controller.go: the Warning event on a failed reconcile.
_E_CREATION_FAILED = "TrainJobResourcesCreationFailed"
_CREATION_FAILED_PREFIX = "TrainJob resources reconciliation failed: "
_TRAINER_COMPONENT = "trainer-trainjob-controller"
# kubernetes-sigs/jobset pkg/constants/constants.go (v0.12).
_JS_COMPLETED = ("AllJobsCompleted", "jobset completed successfully")
_JS_FAILED = ("FailedJobs", "jobset failed due to one or more job failures")
_JS_SUSPENDED = ("SuspendedJobs", "jobset is suspended")
_JS_RESUMED = ("ResumeJobs", "jobset is resumed")
_JOBSET_COMPONENT = "jobset"
# kubernetes pkg/controller/job.
_JOB_COMPONENT = "job-controller"
_JOB_BACKOFF = ("BackoffLimitExceeded", "Job has reached the specified backoff limit")
_JOB_COMPLETE = ("CompletionsReached", "Reached expected number of succeeded pods")

# --- Labels and annotations ------------------------------------------------------------
_L_JOBSET = "jobset.sigs.k8s.io/jobset-name"
_L_RJOB = "jobset.sigs.k8s.io/replicatedjob-name"
_L_RJOB_REPLICAS = "jobset.sigs.k8s.io/replicatedjob-replicas"
_L_JOB_INDEX = "jobset.sigs.k8s.io/job-index"
_L_JOB_GLOBAL_INDEX = "jobset.sigs.k8s.io/job-global-index"
_L_RESTART = "jobset.sigs.k8s.io/restart-attempt"
_L_JOB_KEY = "jobset.sigs.k8s.io/job-key"
_L_JOBSET_UID = "jobset.sigs.k8s.io/jobset-uid"
_L_COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
_L_JOB_NAME = "batch.kubernetes.io/job-name"
_L_CONTROLLER_UID = "batch.kubernetes.io/controller-uid"
_COMPLETION_INDEX_PATH = f"metadata.annotations['{_L_COMPLETION_INDEX}']"

_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # the apiserver's generateName alphabet
_SIM_NODES = 4  # pods are spread over kf-sim-node-0..3
_LOG_TAIL = 80  # lines kept per pod for terminationMessagePolicy FallbackToLogsOnError


def _micro_now() -> str:
    # metav1.MicroTime, as Event.eventTime serialises.
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _truncate_bytes(text: str, limit: int) -> str:
    data = text.encode()
    if len(data) <= limit:
        return text
    return data[:limit].decode(errors="ignore")


class _BuildError(Exception):
    """The JobSet cannot be built: a Warning Event, and the job stays pending."""


class _Token:
    """Cancels the timers that captured it (suspend, terminal state, deletion)."""

    __slots__ = ("cancelled",)

    def __init__(self) -> None:
        self.cancelled = False


@dataclass(eq=False)
class _Run:
    """One pod container executed for real (subprocess or custom executor)."""

    pod: _PodSim
    workdir: Path
    termination_log: Path
    cancelled: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    proc: subprocess.Popen[str] | None = None


@dataclass(eq=False)
class _PodSim:
    job: _JobSim
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
    scheduled_at: str | None = None
    run: _Run | None = None
    tail: deque[str] = field(default_factory=lambda: deque(maxlen=_LOG_TAIL))
    logs_closed: bool = False
    waiting: JSON | None = None

    @property
    def active(self) -> bool:
        return self.alive and self.phase in ("Pending", "Running")

    @property
    def containers(self) -> list[JSON]:
        return list(self.spec.get("containers") or [])


@dataclass(eq=False)
class _JobSim:
    sim: _Sim
    rjob: _RJob
    index: int
    global_index: int
    name: str
    uid: str = ""
    alive: bool = True
    suspended: bool = False
    pods: dict[int, _PodSim] = field(default_factory=dict)  # live pod per index
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


@dataclass(eq=False)
class _RJob:
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
    jobs: list[_JobSim] = field(default_factory=list)
    started: bool = False

    def live_jobs(self) -> list[_JobSim]:
        return [j for j in self.jobs if j.alive]


@dataclass(eq=False)
class _Sim:
    """The simulated state of one TrainJob."""

    namespace: str
    name: str
    uid: str
    generation: int
    obj: JSON  # latest TrainJob seen (never mutated: the store shares it)
    scenario: Scenario
    token: _Token = field(default_factory=_Token)  # this run (suspend/terminal cancel)
    life: _Token = field(default_factory=_Token)  # the sim (teardown/terminal cancel)
    state: str = "new"  # new | build-failed | active | finished | gone
    suspended: bool = False
    terminal: str = ""  # "" | Complete | Failed
    rjobs: list[_RJob] = field(default_factory=list)
    jobset: JSON = field(default_factory=dict)
    jobset_uid: str = ""
    jobset_gone: bool = False
    js_conditions: list[JSON] = field(default_factory=list)
    tj_conditions: list[JSON] = field(default_factory=list)
    jobs_status: list[JSON] | None = None
    last_js_status: JSON | None = None
    last_tj_status: JSON | None = None
    dirty_jobs: set[_JobSim] = field(default_factory=set)
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

    def rjob(self, name: str) -> _RJob | None:
        return next((r for r in self.rjobs if r.name == name), None)


@dataclass
class _Built:
    jobset: JSON
    rjobs: list[_RJob]
    extra: list[tuple[Resource, JSON]]
    is_mpi: bool
    nnodes: int
    nproc: str


# ======================================================================================
# The controller
# ======================================================================================


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
        self.clock_scale = clock_scale
        #: The TrainJob status server whose endpoint trainer pods get (None: off).
        self.status_server: Any = None
        #: The scenario of TrainJobs that neither the annotation nor a script selects.
        self.default_scenario: Scenario = Scenario(name="success")
        self._scripts: list[tuple[str | Callable[[JSON], bool], Scenario]] = []
        self._cv = threading.Condition()
        self._queue: deque[Callable[[], None]] = deque()
        self._heap: list[tuple[float, int, _Token, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._busy = False
        self._running = False
        self._thread: threading.Thread | None = None
        self._unsubscribe: Callable[[], None] | None = None
        self._active_runs = 0
        self._pool: ThreadPoolExecutor | None = None
        # Owned by the worker thread only.
        self._sims: dict[tuple[str, str], _Sim] = {}
        self._pods: dict[tuple[str, str], _PodSim] = {}
        self._jobs: dict[tuple[str, str], _JobSim] = {}
        self._runs: set[_Run] = set()
        self._dirty: set[_Sim] = set()
        self._event_seq = itertools.count()
        self._node_seq = itertools.count()
        self._ip_seq = itertools.count()

    # ------------------------------------------------------------------ public API

    def start(self) -> None:
        """Start the worker thread and follow the store (TrainJobs that already exist
        are picked up too)."""
        with self._cv:
            if self._running:
                return
            self._running = True
        self._unsubscribe = self.store.subscribe(self._on_store_event, copy=False)
        self._thread = threading.Thread(
            target=self._loop, name="kf-sim-trainer-controller", daemon=True
        )
        self._thread.start()
        items, _ = self.store.list(TRAINJOBS)
        for obj in items:
            self._post(partial(self._on_trainjob, "ADDED", obj))

    def stop(self) -> None:
        """Stop following the store, stop the worker and kill running subprocesses."""
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        with self._cv:
            was_running = self._running
            self._running = False
            self._cv.notify_all()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=10)
        self._thread = None
        if was_running or self._sims:
            self._reset_state()
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    def script(self, match: str | Callable[[JSON], bool], scenario: Scenario) -> None:
        """Use ``scenario`` for TrainJobs named ``match`` (or for which the predicate
        ``match(trainjob_dict)`` is true). Later registrations win; the scenario
        annotation on a TrainJob wins over any script."""
        if not isinstance(scenario, Scenario):
            raise TypeError("scenario must be a Scenario (use Scenario.preset(name))")
        with self._cv:
            self._scripts.append((match, scenario))

    def reset(self) -> None:
        """Forget scripts (and a changed ``default_scenario``: back to ``success``) and stop
        every running simulation and subprocess. The store is left alone: TrainJobs in
        it are only simulated again when they change."""
        self.default_scenario = Scenario(name="success")
        with self._cv:
            self._scripts.clear()
            self._queue.clear()
            self._heap.clear()
        thread = self._thread
        if thread is not None and thread.is_alive() and thread is not threading.current_thread():
            self._call_sync(self._reset_state)
        else:
            self._reset_state()

    def wait_idle(self, timeout: float = 10) -> bool:
        """Wait until no work is queued, no timer is pending and no subprocess runs;
        False on timeout. Jobs that never finish (or are stuck pulling an image) leave
        nothing pending, so they count as idle."""
        deadline = time.monotonic() + timeout
        with self._cv:
            while True:
                if self._idle_locked():
                    return True
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cv.wait(min(remaining, 0.05))

    # ------------------------------------------------------------------ worker loop

    def _idle_locked(self) -> bool:
        if self._queue or self._busy or self._active_runs:
            return False
        return all(entry[2].cancelled for entry in self._heap)

    def _post(self, fn: Callable[[], None]) -> None:
        with self._cv:
            self._queue.append(fn)
            self._cv.notify_all()

    def _after(self, delay: float, token: _Token, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the worker after ``delay`` scenario seconds (scaled), unless
        ``token`` is cancelled by then."""
        when = time.monotonic() + max(0.0, delay) * self.clock_scale
        with self._cv:
            heapq.heappush(self._heap, (when, next(self._seq), token, fn))
            self._cv.notify_all()

    def _call_sync(self, fn: Callable[[], None], timeout: float = 30) -> None:
        done = threading.Event()

        def wrapped() -> None:
            try:
                fn()
            finally:
                done.set()

        self._post(wrapped)
        done.wait(timeout)

    def _loop(self) -> None:
        while True:
            with self._cv:
                while self._running:
                    if self._queue:
                        break
                    now = time.monotonic()
                    while self._heap and self._heap[0][2].cancelled:
                        heapq.heappop(self._heap)  # drop cancelled timers early
                    if self._heap and self._heap[0][0] <= now:
                        break
                    timeout = (self._heap[0][0] - now) if self._heap else None
                    self._cv.wait(timeout)
                if not self._running:
                    return
                items = list(self._queue)
                self._queue.clear()
                due: list[tuple[_Token, Callable[[], None]]] = []
                now = time.monotonic()
                while self._heap and self._heap[0][0] <= now:
                    _, _, token, fn = heapq.heappop(self._heap)
                    if not token.cancelled:
                        due.append((token, fn))
                self._busy = True
            try:
                for fn in items:
                    self._guarded(fn)
                for token, fn in due:
                    # An earlier item of this batch (a deletion, a suspend) may have
                    # cancelled it meanwhile.
                    if not token.cancelled:
                        self._guarded(fn)
                self._guarded(self._flush_dirty)
            finally:
                with self._cv:
                    self._busy = False
                    self._cv.notify_all()

    def _guarded(self, fn: Callable[[], None]) -> None:
        try:
            fn()
        except Exception:  # a simulator bug must not kill the worker
            _log.exception("simulated Trainer controller: internal error (ignored)")

    def _reset_state(self) -> None:
        for sim in list(self._sims.values()):
            sim.token.cancelled = True
            sim.life.cancelled = True
            sim.state = "gone"
        for run in list(self._runs):
            self._stop_run(run)
        self._runs.clear()
        self._sims.clear()
        self._pods.clear()
        self._jobs.clear()
        self._dirty.clear()

    # ------------------------------------------------------------------ store events

    def _on_store_event(self, ev: WatchEvent) -> None:
        # Runs on the writer's thread: only queue work, never touch simulation state.
        res = ev.resource
        if res == TRAINJOBS:
            self._post(partial(self._on_trainjob, ev.type, ev.object))
        elif ev.type == "DELETED":
            if res == PODS:
                self._post(partial(self._on_pod_deleted, ev.object))
            elif res == JOBS:
                self._post(partial(self._on_job_deleted, ev.object))
            elif res == JOBSETS:
                self._post(partial(self._on_jobset_deleted, ev.object))
        elif ev.type in ("ADDED", "MODIFIED") and res in (
            CLUSTER_TRAINING_RUNTIMES,
            TRAINING_RUNTIMES,
        ):
            self._post(partial(self._on_runtime_changed, res, ev.object))

    def _on_trainjob(self, kind: str, obj: JSON) -> None:
        meta = obj.get("metadata") or {}
        ns, name, uid = (
            str(meta.get("namespace") or ""),
            str(meta.get("name")),
            str(meta.get("uid")),
        )
        sim = self._sims.get((ns, name))
        if kind == "DELETED":
            if sim is not None and sim.uid == uid:
                self._teardown(sim)
            return
        if sim is not None and sim.uid != uid:
            self._teardown(sim)  # deleted and recreated under the same name
            sim = None
        if meta.get("deletionTimestamp"):
            if sim is not None:
                self._teardown(sim)
            return
        spec = obj.get("spec") or {}
        if sim is None:
            if spec.get("managedBy") == _MULTIKUEUE:
                return  # the real controller leaves these to Kueue's MultiKueue
            self._create_sim(obj)
            return
        sim.obj = obj
        generation = int(meta.get("generation") or 1)
        if generation == sim.generation:
            return  # a status write (ours, mostly): nothing to do
        sim.generation = generation
        if sim.state == "build-failed":
            self._build(sim)
        elif sim.state == "active":
            want = bool(spec.get("suspend"))
            if want and not sim.suspended:
                self._suspend(sim)
            elif not want and sim.suspended:
                self._resume(sim)

    def _on_runtime_changed(self, res: Resource, obj: JSON) -> None:
        # The real controller retries a failed reconcile with backoff; here a runtime
        # appearing (or changing) is what makes a retry worthwhile.
        ns = (obj.get("metadata") or {}).get("namespace")
        for sim in list(self._sims.values()):
            if sim.state != "build-failed":
                continue
            if res == TRAINING_RUNTIMES and sim.namespace != ns:
                continue
            self._build(sim)

    def _on_pod_deleted(self, obj: JSON) -> None:
        meta = obj.get("metadata") or {}
        pod = self._pods.get((str(meta.get("namespace")), str(meta.get("name"))))
        if pod is None or pod.uid != meta.get("uid") or not pod.alive:
            return  # ours, or already forgotten
        was_active = pod.active
        self._kill_pod(pod, delete=False)
        job = pod.job
        # The Job controller replaces a deleted pod (a real cluster's default
        # backoffLimit of 6 tolerates it), unless the Job is done or suspended.
        if was_active and job.alive and not job.finished and not job.suspended:
            self._fill_job(job)
            self._mark(job.sim, job)

    def _on_job_deleted(self, obj: JSON) -> None:
        meta = obj.get("metadata") or {}
        job = self._jobs.get((str(meta.get("namespace")), str(meta.get("name"))))
        if job is None or job.uid != meta.get("uid") or not job.alive:
            return
        sim = job.sim
        self._drop_job(job, delete=False)
        if sim.state == "active" and not sim.terminal:
            # The JobSet controller recreates a missing Job.
            rjob = job.rjob
            rjob.jobs = [j for j in rjob.jobs if j is not job]
            self._create_job(sim, rjob, job.index, suspended=sim.suspended)
            self._mark(sim)

    def _on_jobset_deleted(self, obj: JSON) -> None:
        meta = obj.get("metadata") or {}
        sim = self._sims.get((str(meta.get("namespace")), str(meta.get("name"))))
        if sim is None or sim.jobset_gone or sim.jobset_uid != meta.get("uid"):
            return
        sim.jobset_gone = True
        for rjob in sim.rjobs:
            for job in rjob.live_jobs():
                self._drop_job(job, delete=False)
        if sim.state == "active" and not sim.terminal:
            # The Trainer rebuilds the JobSet of an unfinished TrainJob: start over.
            sim.token.cancelled = True
            sim.token = _Token()
            self._build(sim)

    # ------------------------------------------------------------------ scenarios

    def _select_scenario(self, obj: JSON) -> tuple[Scenario, str | None]:
        meta = obj.get("metadata") or {}
        note = (meta.get("annotations") or {}).get(SCENARIO_ANNOTATION)
        error: str | None = None
        if note:
            try:
                return Scenario.from_annotation(str(note)), None
            except ValueError as exc:
                error = f"invalid {SCENARIO_ANNOTATION} annotation ({exc}); using the default"
        with self._cv:
            scripts = list(self._scripts)
        for match, scenario in reversed(scripts):
            try:
                hit = match == meta.get("name") if isinstance(match, str) else bool(match(obj))
            except Exception:
                _log.exception("scenario predicate %r failed", match)
                hit = False
            if hit:
                return scenario, error
        return self.default_scenario, error

    # ------------------------------------------------------------------ TrainJob level

    def _create_sim(self, obj: JSON) -> None:
        meta = obj["metadata"]
        scenario, error = self._select_scenario(obj)
        sim = _Sim(
            namespace=str(meta.get("namespace") or ""),
            name=str(meta["name"]),
            uid=str(meta.get("uid")),
            generation=int(meta.get("generation") or 1),
            obj=obj,
            scenario=scenario,
        )
        self._sims[sim.key] = sim
        finished = [
            c
            for c in (obj.get("status") or {}).get("conditions") or []
            if c.get("type") in (_TJ_COMPLETE, _TJ_FAILED) and c.get("status") == "True"
        ]
        if finished:
            # Seen finished (a controller restart): the Trainer never touches it again.
            sim.state, sim.terminal = "finished", str(finished[0]["type"])
            sim.tj_conditions = json_copy((obj.get("status") or {}).get("conditions") or [])
            return
        if error:
            _log.warning("TrainJob %s/%s: %s", sim.namespace, sim.name, error)
            self._trainjob_event(
                sim, "Warning", "InvalidTestScenario", error, component="kf-trainer-suite-simulator"
            )
        self._build(sim)

    def _build(self, sim: _Sim) -> None:
        spec = sim.spec
        ref = spec.get("runtimeRef") or {}
        kind = str(ref.get("kind") or "ClusterTrainingRuntime")
        group = str(ref.get("apiGroup") or _TRAINER_GROUP)
        suspended = bool(spec.get("suspend"))
        if group != _TRAINER_GROUP or kind not in ("ClusterTrainingRuntime", "TrainingRuntime"):
            # Only the runtime registry lookup fails this way: a Failed condition.
            gk = f"{kind}.{group}" if group else kind
            sim.state, sim.terminal = "finished", _TJ_FAILED
            self._set_condition(
                sim.tj_conditions,
                _TJ_FAILED,
                "True",
                _R_NOT_SUPPORTED,
                f"unsupported runtime: {gk}",
            )
            self._mark(sim)
            return
        try:
            if sim.scenario.creation_failure:
                raise _BuildError(sim.scenario.creation_failure)
            runtime = self._get_runtime(kind, sim.namespace, str(ref.get("name") or ""))
            built = self._build_jobset(sim, kind, runtime)
        except _BuildError as exc:
            sim.state = "build-failed"
            text = str(exc)
            message = f"{_CREATION_FAILED_PREFIX}{text[:950]}" + (" ..." if len(text) > 950 else "")
            self._trainjob_event(sim, "Warning", _E_CREATION_FAILED, message, action="Reconciling")
            if suspended:
                self._set_condition(
                    sim.tj_conditions, _TJ_SUSPENDED, "True", _R_SUSPENDED, _M_SUSPENDED
                )
            self._mark(sim)
            return
        self._launch(sim, built)

    def _get_runtime(self, kind: str, namespace: str, name: str) -> JSON:
        if kind == "TrainingRuntime":
            obj = self.store.try_get(TRAINING_RUNTIMES, namespace, name)
            if obj is None:
                raise _BuildError(
                    "TrainingRuntime specified in TrainJob is not found: "
                    f'{TRAINING_RUNTIMES.plural}.{TRAINING_RUNTIMES.group} "{name}" not found'
                )
            return obj
        obj = self.store.try_get(CLUSTER_TRAINING_RUNTIMES, None, name)
        if obj is None:
            raise _BuildError(
                "not found ClusterTrainingRuntime specified in TrainJob: "
                f"{CLUSTER_TRAINING_RUNTIMES.plural}.{CLUSTER_TRAINING_RUNTIMES.group} "
                f'"{name}" not found'
            )
        return obj

    def _launch(self, sim: _Sim, built: _Built) -> None:
        for res, obj in built.extra:
            self._create_or_replace(res, obj)
        jobset = built.jobset
        created = self._safe(self.store.create, JOBSETS, jobset)
        if created is None:
            # A JobSet of that name is left over (e.g. from before a controller restart):
            # replace it, as server-side apply with force ownership would.
            self._safe(self.store.delete, JOBSETS, sim.namespace, sim.name)
            created = self._safe(self.store.create, JOBSETS, jobset)
            if created is None:
                _log.warning("cannot create JobSet %s/%s", sim.namespace, sim.name)
                return
        sim.jobset = created
        sim.jobset_uid = str(created["metadata"]["uid"])
        sim.jobset_gone = False
        sim.rjobs = built.rjobs
        sim.is_mpi, sim.nnodes, sim.nproc = built.is_mpi, built.nnodes, built.nproc
        policy = (jobset.get("spec") or {}).get("successPolicy") or {}
        sim.success_operator = str(policy.get("operator") or "All")
        sim.success_targets = list(policy.get("targetReplicatedJobs") or [])
        sim.state = "active"
        sim.last_js_status = None
        sim.js_conditions = []  # a new JobSet starts without conditions
        sim.suspended = bool(sim.spec.get("suspend"))
        if sim.suspended:
            # A suspended JobSet still gets its (suspended) Jobs, but no pods.
            for rjob in sim.rjobs:
                if not rjob.depends_on:
                    self._start_rjob(sim, rjob, suspended=True)
            self._jobset_event(sim, "Normal", *_JS_SUSPENDED)
            self._set_condition(sim.js_conditions, "Suspended", "True", *_JS_SUSPENDED)
            self._set_condition(
                sim.tj_conditions, _TJ_SUSPENDED, "True", _R_SUSPENDED, _M_SUSPENDED
            )
        else:
            self._check_startup(sim)
            self._arm_run_timers(sim)
        self._mark(sim)

    def _arm_run_timers(self, sim: _Sim) -> None:
        sc = sim.scenario
        deadline = sc.deadline
        if deadline is None:
            ads = sim.spec.get("activeDeadlineSeconds")
            deadline = float(ads) if isinstance(ads, (int, float)) and ads > 0 else None
        if deadline is not None:
            self._after(deadline, sim.token, partial(self._deadline_hit, sim))
        if sc.suspend_after is not None and not sim.auto_suspend_done:
            self._after(sc.suspend_after, sim.life, partial(self._auto_suspend, sim))

    def _auto_suspend(self, sim: _Sim) -> None:
        if sim.state != "active" or sim.suspended or sim.terminal:
            return
        sim.auto_suspend_done = True
        sim.auto_suspended = True
        # Kueue preempts by patching spec.suspend; the change comes back as an event.
        self._safe(
            self.store.patch, TRAINJOBS, sim.namespace, sim.name, {"spec": {"suspend": True}}
        )

    def _auto_resume(self, sim: _Sim) -> None:
        if sim.state != "active" or not sim.suspended or sim.terminal:
            return
        sim.auto_suspended = False
        self._safe(
            self.store.patch, TRAINJOBS, sim.namespace, sim.name, {"spec": {"suspend": False}}
        )

    def _suspend(self, sim: _Sim) -> None:
        sim.suspended = True
        sim.token.cancelled = True
        sim.token = _Token()
        for rjob in sim.rjobs:
            for job in rjob.live_jobs():
                if job.finished or job.suspended:
                    continue
                for pod in list(job.pods.values()):
                    if pod.active:
                        self._job_event(
                            job, "Normal", "SuccessfulDelete", f"Deleted pod: {pod.name}"
                        )
                    self._kill_pod(pod, delete=True)
                job.suspended = True
                job.start_time = None
                self._set_condition(
                    job.conditions, "Suspended", "True", "JobSuspended", "Job suspended", probe=True
                )
                self._job_event(job, "Normal", "Suspended", "Job suspended")
                self._mark(sim, job)
        self._patch_jobset_suspend(sim, True)
        self._set_condition(sim.js_conditions, "Suspended", "True", *_JS_SUSPENDED)
        self._jobset_event(sim, "Normal", *_JS_SUSPENDED)
        self._set_condition(sim.tj_conditions, _TJ_SUSPENDED, "True", _R_SUSPENDED, _M_SUSPENDED)
        if sim.auto_suspended and sim.scenario.resume_after is not None:
            self._after(sim.scenario.resume_after, sim.life, partial(self._auto_resume, sim))
        self._mark(sim)

    def _resume(self, sim: _Sim) -> None:
        sim.suspended = False
        sim.token.cancelled = True
        sim.token = _Token()
        self._patch_jobset_suspend(sim, False)
        self._set_condition(sim.js_conditions, "Suspended", "False", *_JS_RESUMED)
        self._jobset_event(sim, "Normal", *_JS_RESUMED)
        now = format_timestamp()
        for rjob in sim.rjobs:
            for job in rjob.live_jobs():
                if not job.suspended:
                    continue
                job.suspended = False
                job.start_time = now
                self._set_condition(
                    job.conditions, "Suspended", "False", "JobResumed", "Job resumed", probe=True
                )
                self._job_event(job, "Normal", "Resumed", "Job resumed")
                self._fill_job(job)
                self._mark(sim, job)
        # The deadline counts from the resume (the Suspended=False transition time).
        self._set_condition(sim.tj_conditions, _TJ_SUSPENDED, "False", _R_RESUMED, _M_RESUMED)
        self._check_startup(sim)
        self._arm_run_timers(sim)
        self._mark(sim)

    def _patch_jobset_suspend(self, sim: _Sim, value: bool) -> None:
        if sim.jobset_gone:
            return

        def fn(obj: JSON) -> None:
            obj.setdefault("spec", {})["suspend"] = value

        self._safe(self.store.mutate, JOBSETS, sim.namespace, sim.name, fn)

    def _deadline_hit(self, sim: _Sim) -> None:
        if sim.state != "active" or sim.terminal or sim.suspended:
            return
        sim.terminal, sim.state = _TJ_FAILED, "finished"
        self._set_condition(sim.tj_conditions, _TJ_FAILED, "True", _R_DEADLINE, _M_DEADLINE)
        sim.token.cancelled = True
        sim.life.cancelled = True
        # The Trainer deletes the JobSet; the cascade takes Jobs and pods with it.
        for rjob in sim.rjobs:
            for job in rjob.live_jobs():
                self._drop_job(job, delete=False)
        sim.jobset_gone = True
        self._safe(self.store.delete, JOBSETS, sim.namespace, sim.name)
        self._mark(sim)

    def _teardown(self, sim: _Sim) -> None:
        """The TrainJob is gone: stop driving it (the store cascades the objects)."""
        sim.state = "gone"
        sim.token.cancelled = True
        sim.life.cancelled = True
        for rjob in sim.rjobs:
            for job in rjob.live_jobs():
                self._drop_job(job, delete=False)
        if self._sims.get(sim.key) is sim:
            del self._sims[sim.key]
        self._dirty.discard(sim)

    # ------------------------------------------------------------------ JobSet build

    def _build_jobset(self, sim: _Sim, kind: str, runtime: JSON) -> _Built:
        spec = sim.spec
        rt_name = str((runtime.get("metadata") or {}).get("name"))
        rspec = runtime.get("spec") or {}
        template = json_copy(rspec.get("template") or {})
        ml = rspec.get("mlPolicy") or {}
        js_meta = template.get("metadata") or {}
        js_spec: JSON = template.get("spec") or {}
        rjob_specs: list[JSON] = [
            r for r in js_spec.get("replicatedJobs") or [] if isinstance(r, dict)
        ]
        if not rjob_specs:
            raise _BuildError(f'{kind} "{rt_name}" has no spec.template.spec.replicatedJobs')
        js_spec["replicatedJobs"] = rjob_specs
        labels: dict[str, str] = dict(js_meta.get("labels") or {})
        annotations: dict[str, str] = dict(js_meta.get("annotations") or {})

        for patch in spec.get("runtimePatches") or []:
            if isinstance(patch, dict):
                self._apply_runtime_patch(patch, rjob_specs, labels, annotations, kind, rt_name)

        trainer: JSON = spec.get("trainer") or {}
        has_trainer = isinstance(spec.get("trainer"), dict)
        torch = ml.get("torch") if "torch" in ml else None
        mpi = ml.get("mpi") if "mpi" in ml else None
        launcher_as_node = bool(isinstance(mpi, dict) and mpi.get("runLauncherAsNode"))
        ml_nodes = int(ml.get("numNodes") or 1)
        tj_nodes = trainer.get("numNodes")
        initializer: JSON = spec.get("initializer") or {}

        nproc = "auto"
        if torch is not None:
            nproc = str(
                trainer.get("numProcPerNode") or (torch or {}).get("numProcPerNode") or "auto"
            )
            nproc = _torch_nproc(nproc, trainer.get("resourcesPerNode"))
        elif isinstance(mpi, dict):
            nproc = str(trainer.get("numProcPerNode") or mpi.get("numProcPerNode") or 1)

        rjobs: list[_RJob] = []
        names = [str(r.get("name")) for r in rjob_specs]
        ready_deps = {
            str(d.get("name"))
            for r in rjob_specs
            for d in r.get("dependsOn") or []
            if isinstance(d, dict) and d.get("status") == "Ready"
        }
        trainer_count = 1
        for rj in rjob_specs:
            name = str(rj.get("name"))
            jt: JSON = rj.setdefault("template", {})
            jmeta: JSON = jt.setdefault("metadata", {})
            jspec: JSON = jt.setdefault("spec", {})
            ptmpl: JSON = jspec.setdefault("template", {})
            pspec: JSON = ptmpl.setdefault("spec", {})
            containers: list[JSON] = pspec.setdefault("containers", [])
            ancestor = (jmeta.get("labels") or {}).get(_ANCESTOR)
            count = int(jspec.get("parallelism") or 1)
            rj.setdefault("replicas", 1)
            if ancestor == "trainer":
                rj["replicas"] = 1
                count = ml_nodes if ml else count
                if tj_nodes is not None and mpi is None:
                    count = int(tj_nodes)
                if mpi is not None and name == "launcher":
                    count = 1
            elif ancestor in _INITIALIZERS:
                rj["replicas"] = 1
            if mpi is not None and name == "node" and tj_nodes is not None:
                count = max(int(tj_nodes) - 1, 1) if launcher_as_node else int(tj_nodes)
            jspec["parallelism"] = count
            jspec["completions"] = count
            jspec.setdefault("completionMode", "Indexed")

            if ancestor == "trainer":
                trainer_count = count
                for c in containers:
                    cname = c.get("name")
                    if cname == "node" or (cname == "launcher" and launcher_as_node):
                        _apply_trainer(c, trainer)
                if torch is not None and has_trainer:
                    node = _container(containers, "node")
                    if node is not None and trainer.get("command") != ["tune", "run"]:
                        _upsert_env(
                            node,
                            [
                                {"name": "PET_NNODES", "value": str(count)},
                                {"name": "PET_NPROC_PER_NODE", "value": nproc},
                                {
                                    "name": "PET_NODE_RANK",
                                    "valueFrom": {
                                        "fieldRef": {"fieldPath": _COMPLETION_INDEX_PATH}
                                    },
                                },
                                {
                                    "name": "PET_MASTER_ADDR",
                                    "value": f"{sim.name}-node-0-0.{sim.name}",
                                },
                                {"name": "PET_MASTER_PORT", "value": str(TORCH_MASTER_PORT)},
                            ],
                        )
                    if node is not None:
                        _upsert_named(
                            node.setdefault("ports", []),
                            "containerPort",
                            [{"containerPort": TORCH_MASTER_PORT}],
                        )
            if ancestor == "trainer" and self.status_server is not None:
                self.status_server.enforce_pod_spec(pspec, containers, sim.namespace, sim.name)
            if ancestor in _INITIALIZERS:
                cfg = initializer.get("dataset" if ancestor == "dataset-initializer" else "model")
                init_c = _container(containers, str(ancestor))
                if isinstance(cfg, dict) and init_c is not None:
                    if cfg.get("storageUri"):
                        uri = str(cfg["storageUri"])
                        _upsert_env(init_c, [{"name": "STORAGE_URI", "value": uri}])
                    _upsert_env(init_c, list(cfg.get("env") or []))
                    secret = (cfg.get("secretRef") or {}).get("name")
                    if secret:
                        init_c.setdefault("envFrom", []).append({"secretRef": {"name": secret}})
            if isinstance(mpi, dict) and name in ("node", "launcher"):
                _apply_mpi(sim.name, name, pspec, containers, mpi, nproc)

        if isinstance(mpi, dict):
            trainer_count = sum(
                int(r["template"]["spec"]["parallelism"])
                for r in rjob_specs
                if r.get("name") == "node" or (r.get("name") == "launcher" and launcher_as_node)
            )

        for rj in rjob_specs:
            name = str(rj.get("name"))
            jt = rj["template"]
            jspec = jt["spec"]
            ancestor = (jt["metadata"].get("labels") or {}).get(_ANCESTOR)
            if ancestor == "trainer":
                kind_ = "trainer"
            elif ancestor in _INITIALIZERS:
                kind_ = "initializer"
            elif name in ready_deps:
                kind_ = "server"
            else:
                kind_ = "other"
            containers = jspec["template"]["spec"]["containers"]
            if not containers:
                raise _BuildError(
                    f'replicated job "{name}" of {kind} "{rt_name}" has no containers'
                )
            main = _main_container(containers, name, ancestor)
            limit = sim.scenario.backoff_limit
            if limit is None:
                limit = int(jspec.get("backoffLimit") or 0)
            rjobs.append(
                _RJob(
                    name=name,
                    replicas=int(rj.get("replicas") or 1),
                    parallelism=int(jspec["parallelism"]),
                    completions=int(jspec["completions"]),
                    ancestor=str(ancestor) if ancestor else None,
                    kind=kind_,
                    depends_on=[
                        (str(d.get("name")), str(d.get("status") or "Complete"))
                        for d in rj.get("dependsOn") or []
                        if isinstance(d, dict)
                    ],
                    template=jt,
                    step=sim.scenario.step_for(name, str(ancestor) if ancestor else None, kind_),
                    main=main,
                    backoff_limit=limit,
                )
            )
        for rjob in rjobs:
            for dep, _status in rjob.depends_on:
                if dep not in names:
                    raise _BuildError(
                        f'replicated job "{rjob.name}" depends on unknown replicated job "{dep}"'
                    )

        # Defaults the JobSet webhook fills in.
        network: JSON = js_spec.setdefault("network", {})
        network.setdefault("enableDNSHostnames", True)
        network.setdefault("publishNotReadyAddresses", True)
        js_spec.setdefault("successPolicy", {"operator": "All"})
        js_spec.setdefault("startupPolicy", {"startupPolicyOrder": "AnyOrder"})
        js_spec["suspend"] = bool(spec.get("suspend"))
        metadata: JSON = {
            "name": sim.name,
            "namespace": sim.namespace,
            "ownerReferences": [self._owner_ref(_TRAINER_API, "TrainJob", sim.name, sim.uid)],
        }
        if labels:
            metadata["labels"] = labels
        if annotations:
            metadata["annotations"] = annotations
        jobset = {
            "apiVersion": _JOBSET_API,
            "kind": "JobSet",
            "metadata": metadata,
            "spec": js_spec,
        }

        extra: list[tuple[Resource, JSON]] = []
        if isinstance(mpi, dict):
            extra = self._mpi_objects(sim, rjob_specs, launcher_as_node, nproc)
        return _Built(jobset, rjobs, extra, isinstance(mpi, dict), trainer_count, nproc)

    def _apply_runtime_patch(
        self,
        patch: JSON,
        rjob_specs: list[JSON],
        labels: dict[str, str],
        annotations: dict[str, str],
        kind: str,
        rt_name: str,
    ) -> None:
        manager = str(patch.get("manager") or "")
        tmpl = ((patch.get("trainingRuntimeSpec") or {}).get("template")) or {}
        md = tmpl.get("metadata") or {}
        labels.update({str(k): str(v) for k, v in (md.get("labels") or {}).items()})
        annotations.update({str(k): str(v) for k, v in (md.get("annotations") or {}).items()})
        for rp in (tmpl.get("spec") or {}).get("replicatedJobs") or []:
            rname = str(rp.get("name"))
            target = next((r for r in rjob_specs if r.get("name") == rname), None)
            if target is None:
                have = ", ".join(str(r.get("name")) for r in rjob_specs)
                raise _BuildError(
                    f'runtime patch of manager "{manager}" targets replicated job "{rname}", '
                    f'which {kind} "{rt_name}" does not have (it has: {have})'
                )
            jt = rp.get("template")
            if not isinstance(jt, dict):
                continue
            pod_patch = (((jt.get("spec") or {}).get("template") or {}).get("spec")) or {}
            pod_spec = (
                ((target.get("template") or {}).get("spec") or {}).get("template") or {}
            ).get("spec") or {}
            for key, word in (("containers", "container"), ("initContainers", "init container")):
                have_names = [str(c.get("name")) for c in pod_spec.get(key) or []]
                for c in pod_patch.get(key) or []:
                    if str(c.get("name")) not in have_names:
                        raise _BuildError(
                            f'runtime patch of manager "{manager}" targets {word} '
                            f'"{c.get("name")}" in replicated job "{rname}", which has no such '
                            f"{word} (it has: {', '.join(have_names) or 'none'})"
                        )
            merged = apply_strategic_merge_patch(target.get("template") or {}, jt)
            target["template"] = merged if isinstance(merged, dict) else {}

    def _mpi_objects(
        self, sim: _Sim, rjob_specs: list[JSON], launcher_as_node: bool, nproc: str
    ) -> list[tuple[Resource, JSON]]:
        owner = [self._owner_ref(_TRAINER_API, "TrainJob", sim.name, sim.uid)]
        lines: list[str] = []
        for rj in rjob_specs:
            rname = rj.get("name")
            if rname == "node" or (rname == "launcher" and launcher_as_node):
                count = int(rj["template"]["spec"]["parallelism"])
                lines += [
                    f"{sim.name}-{rname}-0-{i}.{sim.name} slots={nproc}" for i in range(count)
                ]
        key = base64.b64encode(os.urandom(48)).decode()
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "kubernetes.io/ssh-auth",
            "immutable": True,
            "metadata": {
                "name": f"{sim.name}-mpi-ssh-auth",
                "namespace": sim.namespace,
                "ownerReferences": owner,
            },
            # Not a usable key: nothing connects over SSH in the simulator.
            "data": {
                "ssh-privatekey": base64.b64encode(
                    f"-----BEGIN EC PRIVATE KEY-----\n{key}\n"
                    "-----END EC PRIVATE KEY-----\n".encode()
                ).decode(),
                "ssh-publickey": base64.b64encode(f"ecdsa-sha2-nistp521 {key}\n".encode()).decode(),
            },
        }
        config_map = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": f"{sim.name}-mpi-hostfile",
                "namespace": sim.namespace,
                "ownerReferences": owner,
            },
            "data": {"hostfile": "".join(line + "\n" for line in lines)},
        }
        return [(SECRETS, secret), (CONFIGMAPS, config_map)]

    # ------------------------------------------------------------------ startup order

    def _dep_satisfied(self, sim: _Sim, name: str, status: str) -> bool:
        dep = sim.rjob(name)
        if dep is None or not dep.started:
            return False
        jobs = dep.live_jobs()
        if len(jobs) < dep.replicas:
            return False
        if status == "Complete":
            return all(j.finished == "Complete" for j in jobs)
        return all(
            j.finished == "Complete"
            or (not j.finished and len(j.succeeded) + j.ready_count >= j.pod_count)
            for j in jobs
        )

    def _check_startup(self, sim: _Sim) -> None:
        if sim.suspended or sim.terminal or sim.state != "active":
            return
        for rjob in sim.rjobs:
            if rjob.started:
                continue
            if all(self._dep_satisfied(sim, n, s) for n, s in rjob.depends_on):
                self._start_rjob(sim, rjob, suspended=False)

    def _start_rjob(self, sim: _Sim, rjob: _RJob, *, suspended: bool) -> None:
        rjob.started = True
        for i in range(rjob.replicas):
            self._create_job(sim, rjob, i, suspended=suspended)

    # ------------------------------------------------------------------ Jobs

    def _create_job(self, sim: _Sim, rjob: _RJob, index: int, *, suspended: bool) -> None:
        global_index = sum(r.replicas for r in sim.rjobs[: sim.rjobs.index(rjob)]) + index
        job = _JobSim(
            sim=sim,
            rjob=rjob,
            index=index,
            global_index=global_index,
            name=f"{sim.name}-{rjob.name}-{index}",
            suspended=suspended,
        )
        jt = rjob.template
        jobset_labels = self._jobset_labels(job)
        jmeta = jt.get("metadata") or {}
        labels = {**(jmeta.get("labels") or {}), **jobset_labels}
        annotations = {**(jmeta.get("annotations") or {}), **jobset_labels}
        pod_template = json_copy(jt["spec"]["template"])
        ptm = pod_template.setdefault("metadata", {})
        ptm["labels"] = {**(ptm.get("labels") or {}), **jobset_labels}
        ptm["annotations"] = {**(ptm.get("annotations") or {}), **jobset_labels}
        jspec = {k: json_copy(v) for k, v in jt["spec"].items() if k != "template"}
        jspec.update(
            {
                "parallelism": rjob.parallelism,
                "completions": rjob.completions,
                "completionMode": "Indexed",
                "backoffLimit": rjob.backoff_limit,
                "suspend": suspended,
                "template": pod_template,
            }
        )
        obj = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": job.name,
                "namespace": sim.namespace,
                "labels": labels,
                "annotations": annotations,
                "ownerReferences": [
                    self._owner_ref(_JOBSET_API, "JobSet", sim.name, sim.jobset_uid)
                ],
            },
            "spec": jspec,
        }
        created = self._safe(self.store.create, JOBS, obj)
        if created is None:
            old = self.store.try_get(JOBS, sim.namespace, job.name)
            if old is not None:
                self._safe(self.store.delete, JOBS, sim.namespace, job.name)
            created = self._safe(self.store.create, JOBS, obj)
            if created is None:
                return
        job.uid = str(created["metadata"]["uid"])
        rjob.jobs.append(job)
        self._jobs[(sim.namespace, job.name)] = job
        if suspended:
            self._set_condition(
                job.conditions, "Suspended", "True", "JobSuspended", "Job suspended", probe=True
            )
        else:
            job.start_time = format_timestamp()
            self._fill_job(job)
        self._mark(sim, job)

    def _jobset_labels(self, job: _JobSim) -> dict[str, str]:
        sim = job.sim
        key = hashlib.sha1(f"{sim.namespace}/{job.name}".encode()).hexdigest()
        return {
            _L_JOBSET: sim.name,
            _L_RJOB: job.rjob.name,
            _L_RJOB_REPLICAS: str(job.rjob.replicas),
            _L_JOB_INDEX: str(job.index),
            _L_JOB_GLOBAL_INDEX: str(job.global_index),
            _L_RESTART: "0",
            _L_JOB_KEY: key,
            _L_JOBSET_UID: sim.jobset_uid,
        }

    def _fill_job(self, job: _JobSim) -> None:
        """Create pods for the indexes that have none, up to the Job's parallelism."""
        if not job.alive or job.finished or job.suspended or job.sim.terminal:
            return
        for idx in range(job.rjob.completions):
            if job.active_count >= job.rjob.parallelism:
                break
            if idx in job.succeeded or idx in job.pods:
                continue
            self._create_pod(job, idx)

    def _job_pod_done(self, pod: _PodSim, success: bool) -> None:
        job = pod.job
        sim = job.sim
        if job.pods.get(pod.index) is pod:
            del job.pods[pod.index]
        if not job.alive or job.finished:
            return
        if success:
            job.succeeded.add(pod.index)
            if len(job.succeeded) >= job.rjob.completions:
                self._job_finish(job, "Complete")
                return
            self._fill_job(job)
        else:
            job.failed += 1
            if job.failed > job.rjob.backoff_limit:
                self._job_finish(job, "Failed")
                return
            # The Job controller recreates the pod after an exponential back-off.
            delay = 0.02 * (2 ** min(job.failed - 1, 6))
            self._after(delay, sim.token, partial(self._retry_pod, job))
        self._mark(sim, job)
        self._check_startup(sim)

    def _retry_pod(self, job: _JobSim) -> None:
        self._fill_job(job)
        self._mark(job.sim, job)

    def _job_finish(self, job: _JobSim, outcome: str) -> None:
        sim = job.sim
        job.finished = outcome
        now = format_timestamp()
        if outcome == "Complete":
            job.completion_time = now
            self._set_condition(
                job.conditions, "SuccessCriteriaMet", "True", *_JOB_COMPLETE, probe=True
            )
            self._set_condition(job.conditions, "Complete", "True", *_JOB_COMPLETE, probe=True)
            self._job_event(job, "Normal", "Completed", "Job completed")
        else:
            job.failed_at = time.monotonic()
            self._set_condition(job.conditions, "FailureTarget", "True", *_JOB_BACKOFF, probe=True)
            self._set_condition(job.conditions, "Failed", "True", *_JOB_BACKOFF, probe=True)
            self._job_event(job, "Warning", *_JOB_BACKOFF)
            # The Job controller terminates the Job's other pods.
            for other in list(job.pods.values()):
                self._kill_pod(other, delete=True)
        self._mark(sim, job)
        self._evaluate_jobset(sim)

    def _drop_job(self, job: _JobSim, *, delete: bool) -> None:
        """Stop tracking a Job (deleted, or being deleted by a cascade)."""
        job.alive = False
        for pod in list(job.pods.values()):
            self._kill_pod(pod, delete=False)
        for key, tracked in list(self._pods.items()):
            if tracked.job is job:
                tracked.alive = False
                del self._pods[key]
        if self._jobs.get((job.sim.namespace, job.name)) is job:
            del self._jobs[(job.sim.namespace, job.name)]
        job.sim.dirty_jobs.discard(job)
        if delete:
            self._safe(
                self.store.delete, JOBS, job.sim.namespace, job.name, propagation="Background"
            )

    # ------------------------------------------------------------------ JobSet outcome

    def _evaluate_jobset(self, sim: _Sim) -> None:
        if sim.terminal or sim.state != "active":
            return
        failed = [j for r in sim.rjobs for j in r.live_jobs() if j.finished == "Failed"]
        if failed:
            first = min(failed, key=lambda j: j.failed_at)
            reason, message = _JS_FAILED
            self._finish_jobset(
                sim, "Failed", reason, f"{message} (first failed job: {first.name})"
            )
            return
        targets = [r for r in sim.rjobs if not sim.success_targets or r.name in sim.success_targets]
        if sim.success_operator == "Any":
            done = any(j.finished == "Complete" for r in targets for j in r.live_jobs())
        else:
            done = bool(targets) and all(
                r.started
                and len(r.live_jobs()) >= r.replicas
                and all(j.finished == "Complete" for j in r.live_jobs())
                for r in targets
            )
        if done:
            self._finish_jobset(sim, "Completed", *_JS_COMPLETED)
            return
        self._check_startup(sim)

    def _finish_jobset(self, sim: _Sim, outcome: str, reason: str, message: str) -> None:
        sim.terminal = _TJ_COMPLETE if outcome == "Completed" else _TJ_FAILED
        sim.state = "finished"
        sim.token.cancelled = True
        sim.life.cancelled = True
        self._set_condition(sim.js_conditions, outcome, "True", reason, message)
        self._jobset_event(sim, "Normal" if outcome == "Completed" else "Warning", reason, message)
        # The TrainJob copies the JobSet's condition, renaming its type.
        cond = next(c for c in sim.js_conditions if c["type"] == outcome)
        copied = {**cond, "type": sim.terminal}
        sim.tj_conditions = [c for c in sim.tj_conditions if c["type"] != sim.terminal] + [copied]
        # A finished JobSet deletes its still-active Jobs (e.g. MPI worker nodes).
        for rjob in sim.rjobs:
            for job in rjob.live_jobs():
                if not job.finished:
                    for pod in list(job.pods.values()):
                        self._kill_pod(pod, delete=False)
                    self._drop_job(job, delete=True)
        self._mark(sim)

    # ------------------------------------------------------------------ Pods

    def _create_pod(self, job: _JobSim, index: int) -> None:
        sim, rjob = job.sim, job.rjob
        tmpl = json_copy(rjob.template["spec"]["template"])
        pmeta: JSON = tmpl.get("metadata") or {}
        pspec: JSON = tmpl.get("spec") or {}
        jobset_labels = self._jobset_labels(job)
        labels: dict[str, str] = {
            **(pmeta.get("labels") or {}),
            **jobset_labels,
            _L_CONTROLLER_UID: job.uid,
            "controller-uid": job.uid,
            _L_JOB_NAME: job.name,
            "job-name": job.name,
            _L_COMPLETION_INDEX: str(index),
        }
        if rjob.ancestor:
            labels[_ANCESTOR] = rjob.ancestor
        annotations: dict[str, str] = {
            **(pmeta.get("annotations") or {}),
            **jobset_labels,
            _L_COMPLETION_INDEX: str(index),
        }
        for c in pspec.get("containers") or []:
            _upsert_env(
                c,
                [
                    {
                        "name": "JOB_COMPLETION_INDEX",
                        "valueFrom": {"fieldRef": {"fieldPath": _COMPLETION_INDEX_PATH}},
                    }
                ],
            )
            c.setdefault("terminationMessagePath", "/dev/termination-log")
            c.setdefault("terminationMessagePolicy", "File")
            c.setdefault("imagePullPolicy", _pull_policy(str(c.get("image") or "")))
            c.setdefault("resources", {})
        pspec.setdefault("restartPolicy", "Never")
        pspec.setdefault("serviceAccountName", "default")
        pspec.setdefault("schedulerName", "default-scheduler")
        pspec.setdefault("terminationGracePeriodSeconds", 30)
        pspec.setdefault("dnsPolicy", "ClusterFirst")
        pspec["hostname"] = f"{job.name}-{index}"
        subdomain = ((sim.jobset.get("spec") or {}).get("network") or {}).get("subdomain")
        pspec["subdomain"] = str(subdomain or sim.name)
        obj: JSON = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "namespace": sim.namespace,
                "labels": labels,
                "annotations": annotations,
                "ownerReferences": [self._owner_ref("batch/v1", "Job", job.name, job.uid)],
            },
            "spec": pspec,
            "status": {"phase": "Pending", "qosClass": _qos_class(pspec)},
        }
        created: JSON | None = None
        for _ in range(5):
            obj["metadata"]["name"] = f"{job.name}-{index}-" + "".join(
                random.choices(_NAME_CHARS, k=5)
            )
            try:
                created = self.store.create(PODS, obj)
                break
            except StoreError as exc:
                if exc.reason != "AlreadyExists":
                    _log.debug("pod create failed: %s", exc)
                    return
        if created is None:
            return
        pod = _PodSim(
            job=job,
            index=index,
            name=str(created["metadata"]["name"]),
            uid=str(created["metadata"]["uid"]),
            spec=pspec,
            labels=labels,
            annotations=annotations,
            main=rjob.main,
        )
        job.pods[index] = pod
        self._pods[(sim.namespace, pod.name)] = pod
        self._job_event(job, "Normal", "SuccessfulCreate", f"Created pod: {pod.name}")
        unschedulable = sim.scenario.unschedulable_for
        if unschedulable > 0:
            self._pod_unschedulable(pod)
            self._after(unschedulable, sim.token, partial(self._pod_schedule, pod))
        else:
            self._pod_schedule(pod)

    def _pod_unschedulable(self, pod: _PodSim) -> None:
        msg = (
            "0/4 nodes are available: 4 Insufficient nvidia.com/gpu. preemption: 0/4 nodes are "
            "available: 4 No preemption victims found for incoming pod."
        )
        now = format_timestamp()

        def fn(obj: JSON) -> None:
            obj["status"] = {
                "phase": "Pending",
                "qosClass": (obj.get("status") or {}).get("qosClass", "BestEffort"),
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": msg,
                        "lastProbeTime": None,
                        "lastTransitionTime": now,
                    }
                ],
            }

        self._pod_write(pod, fn)
        self._pod_event(pod, "Warning", "FailedScheduling", msg, component="default-scheduler")

    def _pod_schedule(self, pod: _PodSim) -> None:
        if not pod.active:
            return
        n = next(self._node_seq) % _SIM_NODES
        pod.node = f"kf-sim-node-{n}"
        pod.host_ip = f"172.18.0.{n + 2}"
        now = format_timestamp()
        pod.scheduled_at = now
        pod.waiting = {"reason": "ContainerCreating"}

        def fn(obj: JSON) -> None:
            obj["spec"]["nodeName"] = pod.node
            status = obj.setdefault("status", {})
            status.update(
                {
                    "phase": "Pending",
                    "hostIP": pod.host_ip,
                    "hostIPs": [{"ip": pod.host_ip}],
                    "startTime": now,
                    "conditions": _pod_conditions(
                        now,
                        scheduled=True,
                        initialized=True,
                        ready=False,
                        ready_reason="ContainersNotReady",
                        not_ready=_names(pod.containers),
                    ),
                    "containerStatuses": [
                        _container_status(c, waiting={"reason": "ContainerCreating"})
                        for c in pod.containers
                    ],
                }
            )

        self._pod_write(pod, fn, spec_too=True)
        sim = pod.job.sim
        self._pod_event(
            pod,
            "Normal",
            "Scheduled",
            f"Successfully assigned {sim.namespace}/{pod.name} to {pod.node}",
            component="default-scheduler",
        )
        for c in pod.containers:
            self._pod_event(
                pod, "Normal", "Pulling", f'Pulling image "{c.get("image")}"', container=c
            )
        step = pod.job.rjob.step
        delay = step.pending_delay if step.pending_delay is not None else sim.scenario.pending_delay
        if step.outcome == "image-pull":
            self._after(delay, sim.token, partial(self._pod_pull_failed, pod))
        else:
            self._after(delay, sim.token, partial(self._pod_start, pod))

    def _pod_pull_failed(self, pod: _PodSim) -> None:
        if not pod.active:
            return
        sim = pod.job.sim
        main = _container(pod.containers, pod.main) or pod.containers[0]
        image = str(main.get("image") or "")
        err = (
            f'failed to pull and unpack image "{_full_image(image)}": failed to resolve reference '
            f'"{_full_image(image)}": {_full_image(image)}: not found'
        )
        full = f"rpc error: code = NotFound desc = {err}"
        self._pod_event(
            pod, "Warning", "Failed", f'Failed to pull image "{image}": {full}', container=main
        )
        self._pod_event(pod, "Warning", "Failed", "Error: ErrImagePull", container=main)
        self._set_waiting(pod, main, {"reason": "ErrImagePull", "message": full})
        self._after(
            sim.scenario.pending_delay or 0.01,
            sim.token,
            partial(self._pod_pull_backoff, pod, main, image, full),
        )
        fail_after = pod.job.rjob.step.image_pull_fail_after
        if fail_after is not None:
            self._after(fail_after, sim.token, partial(self._pod_pull_give_up, pod))

    def _pod_pull_backoff(self, pod: _PodSim, main: JSON, image: str, err: str) -> None:
        if not pod.active:
            return
        self._pod_event(
            pod, "Normal", "BackOff", f'Back-off pulling image "{image}"', container=main
        )
        self._pod_event(pod, "Warning", "Failed", "Error: ImagePullBackOff", container=main)
        self._set_waiting(
            pod,
            main,
            {
                "reason": "ImagePullBackOff",
                "message": f'Back-off pulling image "{image}": ErrImagePull: {err}',
            },
        )

    def _set_waiting(self, pod: _PodSim, main: JSON, waiting: JSON) -> None:
        pod.waiting = waiting

        def fn(obj: JSON) -> None:
            status = obj.setdefault("status", {})
            status["containerStatuses"] = [
                _container_status(
                    c,
                    waiting=waiting
                    if c is main or c.get("name") == main.get("name")
                    else {"reason": "ContainerCreating"},
                )
                for c in pod.containers
            ]

        self._pod_write(pod, fn)

    def _pod_pull_give_up(self, pod: _PodSim) -> None:
        # A pod stuck pulling is failed by its deadline (activeDeadlineSeconds on the pod,
        # or a queueing system's wait-for-pods-ready timeout).
        if not pod.active:
            return
        now = format_timestamp()

        def fn(obj: JSON) -> None:
            status = obj.setdefault("status", {})
            status.update(
                {
                    "phase": "Failed",
                    "reason": "DeadlineExceeded",
                    "message": "Pod was active on the node longer than the specified deadline",
                    "conditions": _pod_conditions(
                        now,
                        scheduled=True,
                        initialized=True,
                        ready=False,
                        ready_reason="PodFailed",
                        not_ready=[],
                    ),
                }
            )

        pod.phase = "Failed"
        self._pod_write(pod, fn)
        self._pod_event(
            pod,
            "Normal",
            "DeadlineExceeded",
            "Pod was active on the node longer than the specified deadline",
        )
        self._close_logs(pod)
        self._mark(pod.job.sim, pod.job)
        self._job_pod_done(pod, success=False)

    def _pod_start(self, pod: _PodSim) -> None:
        if not pod.active:
            return
        sim, job = pod.job.sim, pod.job
        for c in pod.containers:
            image = str(c.get("image") or "")
            took = random.randint(300, 2500)
            self._pod_event(
                pod,
                "Normal",
                "Pulled",
                f'Successfully pulled image "{image}" in {took}ms ({took}ms including '
                f"waiting). Image size: {random.randint(50, 9000) * 1_000_000} bytes.",
                container=c,
            )
            self._pod_event(
                pod, "Normal", "Created", f"Created container: {c.get('name')}", container=c
            )
            self._pod_event(
                pod, "Normal", "Started", f"Started container {c.get('name')}", container=c
            )
        now = format_timestamp()
        pod.phase, pod.started, pod.ready, pod.started_at, pod.waiting = (
            "Running",
            True,
            True,
            now,
            None,
        )
        n = next(self._ip_seq)
        pod.ip = f"10.244.{n // 250 % 250}.{n % 250 + 2}"

        def fn(obj: JSON) -> None:
            status = obj.setdefault("status", {})
            status.update(
                {
                    "phase": "Running",
                    "podIP": pod.ip,
                    "podIPs": [{"ip": pod.ip}],
                    "conditions": _pod_conditions(
                        now, scheduled=True, initialized=True, ready=True
                    ),
                    "containerStatuses": [
                        _container_status(c, running_since=now) for c in pod.containers
                    ],
                }
            )
            if pod.spec.get("initContainers"):
                status["initContainerStatuses"] = [
                    _container_status(
                        c,
                        terminated={
                            "exitCode": 0,
                            "reason": "Completed",
                            "startedAt": now,
                            "finishedAt": now,
                        },
                    )
                    for c in pod.spec["initContainers"]
                ]

        self._pod_write(pod, fn)
        self._mark(sim, job)
        self._check_startup(sim)  # e.g. an MPI launcher waits for its nodes to be Ready
        self._run_pod(pod)

    def _run_pod(self, pod: _PodSim) -> None:
        sim, rjob = pod.job.sim, pod.job.rjob
        sc, step = sim.scenario, rjob.step
        if callable(sc.executor):
            self._start_run(pod, sc.executor)
            return
        if rjob.kind == "server":
            self._schedule_logs(pod, self._default_logs(pod, "serve"), 0.0)
            return  # serves (sshd) until the JobSet is done
        if sc.executor == "exec" and rjob.kind == "trainer":
            self._start_run(pod, None)
            return
        outcome = step.outcome or "succeed"
        duration = float(step.duration or 0.0)
        if outcome in ("fail", "oom", "evicted"):
            ranks = [r for r in step.ranks or [0] if r < _job_pods(pod)] or [0]
            if pod.index not in ranks or pod.job.index != 0:
                outcome = "hang"  # a healthy rank waits on its failed peer
        lines = step.logs if step.logs is not None else self._default_logs(pod, outcome)
        if step.logs is not None:
            lines = [_fmt(line, self._placeholders(pod)) for line in lines]
        self._schedule_logs(pod, lines, duration)
        if self._is_rank0(pod) and rjob.kind == "trainer" and sc.progress:
            n = len(sc.progress)
            for i, update in enumerate(sc.progress):
                self._after(
                    duration * (i + 1) / (n + 1), sim.token, partial(self._progress, sim, update)
                )
        if outcome == "succeed":
            message = step.message
            if message is None and self._is_rank0(pod) and rjob.kind == "trainer":
                message = sc.termination_message
            self._after(
                duration, sim.token, partial(self._pod_finish, pod, 0, "Completed", message)
            )
        elif outcome in ("fail", "oom"):
            code = int(step.exit_code if step.exit_code is not None else 1)
            reason = "OOMKilled" if outcome == "oom" else "Error"
            self._after(
                duration, sim.token, partial(self._pod_finish, pod, code, reason, step.message)
            )
        elif outcome == "evicted":
            evict = partial(self._pod_finish, pod, 137, "Error", None, evicted=True)
            self._after(duration, sim.token, evict)
        # never-finish / hang: runs until killed

    def _is_rank0(self, pod: _PodSim) -> bool:
        return pod.index == 0 and pod.job.index == 0

    def _schedule_logs(self, pod: _PodSim, lines: list[str], duration: float) -> None:
        if not lines:
            return
        n = len(lines)
        token = pod.job.sim.token
        batches: dict[float, list[str]] = {}
        for i, line in enumerate(lines):
            batches.setdefault(duration * i / n, []).append(line)
        for offset, batch in batches.items():
            text = "\n".join(batch)
            if offset <= 0:
                self._log_lines(pod, text)
            else:
                self._after(offset, token, partial(self._log_lines, pod, text))

    def _log_lines(self, pod: _PodSim, text: str) -> None:
        if not pod.active or pod.logs_closed:
            return
        self.logs.append(pod.job.sim.namespace, pod.name, pod.main, text)
        pod.tail.extend(text.split("\n"))

    def _progress(self, sim: _Sim, update: tuple[int | None, int | None, dict[str, str]]) -> None:
        if sim.state != "active" or sim.terminal or sim.suspended:
            return
        pct, remaining, metrics = update
        status: JSON = {"lastUpdatedTime": format_timestamp()}
        if pct is not None:
            status["progressPercentage"] = pct
        if remaining is not None:
            status["estimatedRemainingSeconds"] = remaining
        if metrics:
            status["metrics"] = [{"name": k, "value": v} for k, v in metrics.items()]

        def fn(obj: JSON) -> None:
            obj.setdefault("status", {})["trainerStatus"] = status

        self._safe(self.store.mutate, TRAINJOBS, sim.namespace, sim.name, fn, subresource="status")

    def _pod_finish(
        self,
        pod: _PodSim,
        exit_code: int,
        reason: str,
        message: str | None,
        *,
        evicted: bool = False,
    ) -> None:
        if not pod.active or pod.phase != "Running":
            return
        run = pod.run
        if run is not None:
            self._stop_run(run)
            pod.run = None
        main = _container(pod.containers, pod.main) or pod.containers[0]
        if (
            message is None
            and exit_code != 0
            and main.get("terminationMessagePolicy") == "FallbackToLogsOnError"
        ):
            # The kubelet falls back to the log tail: at most 80 lines / 2048 bytes.
            message = _truncate_bytes("\n".join(list(pod.tail)[-80:]), 2048)
        if message is not None:
            message = _truncate_bytes(message, TERMINATION_MESSAGE_LIMIT)
        self._close_logs(pod)
        now = format_timestamp()
        success = exit_code == 0
        pod.phase = "Succeeded" if success else "Failed"
        pod.ready = False
        terminal_reason = "PodCompleted" if success else "PodFailed"

        def fn(obj: JSON) -> None:
            status = obj.setdefault("status", {})
            statuses = []
            for c in pod.containers:
                term: JSON = {
                    "exitCode": exit_code if c is main else 0,
                    "reason": reason if c is main else "Completed",
                    "startedAt": pod.started_at or now,
                    "finishedAt": now,
                }
                if c is main and message:
                    term["message"] = message
                statuses.append(_container_status(c, terminated=term))
            status.update(
                {
                    "phase": pod.phase,
                    "conditions": _pod_conditions(
                        now,
                        scheduled=True,
                        initialized=True,
                        ready=False,
                        ready_reason=terminal_reason,
                        not_ready=[],
                    ),
                    "containerStatuses": statuses,
                }
            )
            if evicted:
                evict_pod_status(status, now)

        self._pod_write(pod, fn)
        self._mark(pod.job.sim, pod.job)
        self._job_pod_done(pod, success)

    def _kill_pod(self, pod: _PodSim, *, delete: bool) -> None:
        """Stop a pod: its containers are killed (Killing events), logs end, and
        (``delete``) the pod object goes."""
        if not pod.alive:
            return
        was_running = pod.active and pod.started
        pod.alive = False
        if pod.run is not None:
            self._stop_run(pod.run)
            pod.run = None
        if was_running:
            for c in pod.containers:
                self._pod_event(
                    pod, "Normal", "Killing", f"Stopping container {c.get('name')}", container=c
                )
        self._close_logs(pod)
        job = pod.job
        if job.pods.get(pod.index) is pod:
            del job.pods[pod.index]
        key = (job.sim.namespace, pod.name)
        if self._pods.get(key) is pod:
            del self._pods[key]
        if delete:
            self._safe(self.store.delete, PODS, job.sim.namespace, pod.name)
        self._mark(job.sim, job)

    def _close_logs(self, pod: _PodSim) -> None:
        if pod.logs_closed:
            return
        pod.logs_closed = True
        ns = pod.job.sim.namespace
        for c in pod.containers:
            self.logs.close(ns, pod.name, str(c.get("name")))

    def _pod_write(
        self, pod: _PodSim, fn: Callable[[JSON], None], *, spec_too: bool = False
    ) -> None:
        self._safe(
            self.store.mutate,
            PODS,
            pod.job.sim.namespace,
            pod.name,
            fn,
            subresource="*" if spec_too else "status",
        )

    # ------------------------------------------------------------------ default logs

    def _placeholders(self, pod: _PodSim) -> dict[str, str]:
        sim = pod.job.sim
        return {
            "rank": str(pod.index),
            "pod": pod.name,
            "job": sim.name,
            "namespace": sim.namespace,
            "step": pod.job.rjob.ancestor or pod.job.rjob.name,
            "nnodes": str(sim.nnodes),
        }

    def _default_logs(self, pod: _PodSim, outcome: str) -> list[str]:
        sim, rjob = pod.job.sim, pod.job.rjob
        env = {
            e.get("name"): e.get("value")
            for c in pod.containers
            if c.get("name") == pod.main
            for e in c.get("env") or []
            if isinstance(e, dict)
        }
        if outcome == "serve":
            return ["Server listening on 0.0.0.0 port 2222.", "Server listening on :: port 2222."]
        if rjob.kind == "initializer":
            what = "dataset" if rjob.ancestor == "dataset-initializer" else "model"
            uri = env.get("STORAGE_URI") or "hf://unknown"
            lines = [f"Starting {what} initialization", f"Downloading {what} from {uri}"]
            if outcome in ("fail", "oom"):
                return [*lines, f"ERROR: failed to download {what} from {uri}"]
            return [*lines, f"{what.capitalize()} has been downloaded to /workspace/{what}"]
        if rjob.kind != "trainer":
            return [f"{rjob.name}: started", f"{rjob.name}: done"]
        rank = pod.index
        if sim.is_mpi:
            head = f"[launcher] mpirun: {sim.nnodes} host(s), {sim.nproc} slot(s) per host"
        else:
            head = (
                f"[node-{rank}] torchrun: nnodes={sim.nnodes} nproc_per_node={sim.nproc} "
                f"node_rank={rank} master={sim.name}-node-0-0.{sim.name}:{TORCH_MASTER_PORT}"
            )
        epochs = [
            "Epoch 1/3: loss=0.6931 accuracy=0.5120",
            "Epoch 2/3: loss=0.3412 accuracy=0.8410",
            "Epoch 3/3: loss=0.1289 accuracy=0.9530",
        ]
        if outcome == "fail":
            return [
                head,
                epochs[0],
                "Traceback (most recent call last):",
                '  File "/workspace/train.py", line 42, in <module>',
                "    train()",
                "RuntimeError: simulated training failure",
            ]
        if outcome == "oom":
            return [head, epochs[0], "Loading the next batch (batch_size=4096) ..."]
        if outcome == "hang":
            return [head, epochs[0]]
        if outcome == "never-finish":
            return [head, *(f"Epoch {i}: loss={0.7 / i:.4f}" for i in range(1, 4))]
        if not self._is_rank0(pod):
            return [
                head,
                f"[node-{rank}] joined the rendezvous",
                f"[node-{rank}] training finished",
            ]
        lines = [head, *epochs, "Training finished."]
        if outcome == "succeed" and sim.scenario.termination_message is not None:
            lines.append(RESULT_MARKER + sim.scenario.termination_message)
        return lines

    # ------------------------------------------------------------------ real execution

    def _start_run(self, pod: _PodSim, executor: Callable[[PodContext], PodResult] | None) -> None:
        sim, rjob = pod.job.sim, pod.job.rjob
        if executor is None and rjob.kind != "trainer":
            return
        workdir = Path(tempfile.mkdtemp(prefix=f"kf-sim-{pod.name}-"))
        run = _Run(pod=pod, workdir=workdir, termination_log=workdir / "termination-log")
        pod.run = run
        self._runs.add(run)
        ctx = self._pod_context(pod, run)
        with self._cv:
            self._active_runs += 1
        if executor is not None:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(
                    max_workers=32, thread_name_prefix="kf-sim-executor"
                )
            self._pool.submit(self._executor_thread, run, ctx, executor)
            return
        argv = [*ctx.command, *ctx.args]
        if not ctx.command:
            self._run_log(
                run,
                "kf-trainer-suite simulator: exec mode needs the container's "
                "command; the image's entrypoint cannot run here",
            )
            self._finish_run_thread(
                run, 128, "StartError", "exec mode: the container has no command"
            )
            return
        env = {**os.environ, **ctx.env}
        try:
            proc = subprocess.Popen(
                argv,
                cwd=workdir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                bufsize=1,
                errors="replace",
                start_new_session=True,  # own process group: killpg takes the whole tree
            )
        except OSError as exc:
            message = f'exec: "{argv[0]}": {exc.strerror or exc}'
            self._run_log(run, message)
            self._finish_run_thread(run, 128, "StartError", message)
            return
        run.proc = proc
        threading.Thread(
            target=self._exec_reader, args=(run,), daemon=True, name=f"kf-sim-exec-{pod.name}"
        ).start()
        _log.debug("exec %s/%s: %s", sim.namespace, pod.name, argv)

    def _finish_run_thread(
        self, run: _Run, code: int, reason: str | None, message: str | None
    ) -> None:
        # Report a run's end to the worker, then release the wait_idle counter (the
        # queued item keeps the controller busy in between).
        self._post(partial(self._run_done, run, code, reason, message))
        with self._cv:
            self._active_runs -= 1
            self._cv.notify_all()

    def _exec_reader(self, run: _Run) -> None:
        proc = run.proc
        code, message = 1, None
        try:
            assert proc is not None
            assert proc.stdout is not None
            for line in proc.stdout:
                self._run_log(run, line.rstrip("\n"))
            code = proc.wait()
            if code < 0:
                code = 128 - code  # killed by signal N: the runtime reports 128+N
            message = _read_termination_log(run.termination_log)
        except Exception:
            _log.exception("exec run of %s failed", run.pod.name)
        finally:
            self._finish_run_thread(run, code, None, message)

    def _executor_thread(
        self, run: _Run, ctx: PodContext, executor: Callable[[PodContext], PodResult]
    ) -> None:
        code: int = 1
        reason: str | None = "Error"
        message: str | None = None
        try:
            result: Any = executor(ctx)
            if not isinstance(result, PodResult):
                result = PodResult(exit_code=int(result) if isinstance(result, int) else 0)
            code, reason, message = result.exit_code, result.reason, result.termination_message
            if message is None:
                message = _read_termination_log(run.termination_log)
        except Exception as exc:
            for line in traceback.format_exc().rstrip().split("\n"):
                self._run_log(run, line)
            code, reason, message = 1, "Error", f"{type(exc).__name__}: {exc}"
        finally:
            self._finish_run_thread(run, code, reason, message)

    def _run_log(self, run: _Run, text: str) -> None:
        # Called from reader/executor threads: the lock orders it against the kill.
        with run.lock:
            if run.cancelled.is_set():
                return
            pod = run.pod
            self.logs.append(pod.job.sim.namespace, pod.name, pod.main, text)
            pod.tail.extend(text.split("\n"))

    def _run_done(self, run: _Run, code: int, reason: str | None, message: str | None) -> None:
        already_cancelled = run.cancelled.is_set()
        with run.lock:
            run.cancelled.set()  # late ctx.log() calls from stray threads are dropped
        self._runs.discard(run)
        shutil.rmtree(run.workdir, ignore_errors=True)
        pod = run.pod
        if already_cancelled or pod.run is not run or not pod.active:
            return
        pod.run = None
        reason = reason or ("Completed" if code == 0 else "Error")
        self._pod_finish(pod, code, reason, message)

    def _stop_run(self, run: _Run) -> None:
        with run.lock:
            run.cancelled.set()
        proc = run.proc
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        self._runs.discard(run)

    def _pod_context(self, pod: _PodSim, run: _Run) -> PodContext:
        sim, job, rjob = pod.job.sim, pod.job, pod.job.rjob
        main = _container(pod.containers, pod.main) or pod.containers[0]
        env: dict[str, str] = {}
        for src in main.get("envFrom") or []:
            env.update(self._env_from(sim.namespace, src))
        for e in main.get("env") or []:
            if not isinstance(e, dict) or not e.get("name"):
                continue
            if "value" in e:
                env[str(e["name"])] = _expand(str(e.get("value") or ""), env)
            elif isinstance(e.get("valueFrom"), dict):
                value = self._value_from(pod, e["valueFrom"])
                if value is not None:
                    env[str(e["name"])] = value
        if self.status_server is not None and rjob.kind == "trainer" and URL_ENV in env:
            # The projected token and CA certificate, where a local process finds them.
            env.update(self.status_server.exec_env(run.workdir, sim.namespace, sim.name))
        env["JOB_COMPLETION_INDEX"] = str(pod.index)
        env[LAUNCHER_ENV] = "python"
        env[TERMINATION_LOG_ENV] = str(run.termination_log)
        env.setdefault("PYTHONUNBUFFERED", "1")
        command = [_expand(str(a), env) for a in main.get("command") or []]
        args = [_expand(str(a), env) for a in main.get("args") or []]
        return PodContext(
            namespace=sim.namespace,
            pod=pod.name,
            container=pod.main,
            trainjob=sim.name,
            replicated_job=rjob.name,
            step=rjob.ancestor or rjob.name,
            kind=rjob.kind,
            job_index=job.index,
            completion_index=pod.index,
            image=str(main.get("image") or ""),
            command=command,
            args=args,
            env=env,
            workdir=run.workdir,
            termination_log=run.termination_log,
            cancelled=run.cancelled,
            _emit=partial(self._run_log, run),
        )

    def _value_from(self, pod: _PodSim, source: JSON) -> str | None:
        ns = pod.job.sim.namespace
        if isinstance(source.get("fieldRef"), dict):
            return self._field_ref(pod, str(source["fieldRef"].get("fieldPath") or ""))
        ref = source.get("secretKeyRef") or source.get("configMapKeyRef")
        if isinstance(ref, dict):
            res = SECRETS if "secretKeyRef" in source else CONFIGMAPS
            obj = self.store.try_get(res, ns, str(ref.get("name")))
            if obj is None:
                return None
            values = _object_data(res, obj)
            value = values.get(str(ref.get("key")))
            return value
        return None  # resourceFieldRef, fileKeyRef: not simulated

    def _env_from(self, ns: str, src: JSON) -> dict[str, str]:
        prefix = str(src.get("prefix") or "")
        for key, res in (("secretRef", SECRETS), ("configMapRef", CONFIGMAPS)):
            ref = src.get(key)
            if isinstance(ref, dict):
                obj = self.store.try_get(res, ns, str(ref.get("name")))
                if obj is not None:
                    return {prefix + k: v for k, v in _object_data(res, obj).items()}
        return {}

    def _field_ref(self, pod: _PodSim, path: str) -> str | None:
        sim = pod.job.sim
        m = re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", path)
        if m:
            source = pod.labels if m.group(1) == "labels" else pod.annotations
            return source.get(m.group(2), "")
        simple = {
            "metadata.name": pod.name,
            "metadata.namespace": sim.namespace,
            "metadata.uid": pod.uid,
            "spec.nodeName": pod.node,
            "spec.serviceAccountName": str(pod.spec.get("serviceAccountName")),
            "status.podIP": pod.ip,
            "status.hostIP": pod.host_ip,
        }
        return simple.get(path)

    # ------------------------------------------------------------------ status flush

    def _mark(self, sim: _Sim, job: _JobSim | None = None) -> None:
        if sim.state == "gone":
            return
        self._dirty.add(sim)
        if job is not None and job.alive:
            sim.dirty_jobs.add(job)

    def _flush_dirty(self) -> None:
        dirty, self._dirty = self._dirty, set()
        for sim in dirty:
            if sim.state != "gone":
                self._guarded(partial(self._flush, sim))

    def _flush(self, sim: _Sim) -> None:
        for job in list(sim.dirty_jobs):
            if job.alive:
                self._write_job_status(job)
        sim.dirty_jobs.clear()
        if sim.jobset_uid and not sim.jobset_gone:
            rj_status = [self._rjob_status(r) for r in sim.rjobs]
            js_status: JSON = {"replicatedJobsStatus": rj_status}
            if sim.js_conditions:
                js_status["conditions"] = json_copy(sim.js_conditions)
            if sim.terminal:
                js_status["terminalState"] = (
                    "Completed" if sim.terminal == _TJ_COMPLETE else "Failed"
                )
            if js_status != sim.last_js_status:

                def set_js(obj: JSON, status: JSON = js_status) -> None:
                    obj["status"] = json_copy(status)

                if (
                    self._safe(
                        self.store.mutate,
                        JOBSETS,
                        sim.namespace,
                        sim.name,
                        set_js,
                        subresource="status",
                    )
                    is not None
                ):
                    sim.last_js_status = js_status
            sim.jobs_status = [
                {
                    "name": s["name"],
                    "active": s["active"],
                    "ready": s["ready"],
                    "succeeded": s["succeeded"],
                    "failed": s["failed"],
                    "suspended": s["suspended"],
                }
                for s in rj_status
            ]
        tj_status: JSON = {"conditions": json_copy(sim.tj_conditions)}
        if sim.jobs_status is not None:
            tj_status["jobsStatus"] = json_copy(sim.jobs_status)
        if tj_status != sim.last_tj_status:

            def set_tj(obj: JSON, status: JSON = tj_status) -> None:
                st = obj.setdefault("status", {})
                if status["conditions"]:
                    st["conditions"] = json_copy(status["conditions"])
                else:
                    st.pop("conditions", None)
                if "jobsStatus" in status:
                    st["jobsStatus"] = json_copy(status["jobsStatus"])
                if not st:
                    obj.pop("status", None)

            if (
                self._safe(
                    self.store.mutate,
                    TRAINJOBS,
                    sim.namespace,
                    sim.name,
                    set_tj,
                    subresource="status",
                )
                is not None
            ):
                sim.last_tj_status = tj_status

    def _rjob_status(self, rjob: _RJob) -> JSON:
        counts: dict[str, Any] = {
            "name": rjob.name,
            "ready": 0,
            "succeeded": 0,
            "failed": 0,
            "active": 0,
            "suspended": 0,
        }
        for job in rjob.live_jobs():
            if job.finished == "Complete":
                counts["succeeded"] += 1
            elif job.finished == "Failed":
                counts["failed"] += 1
            else:
                if len(job.succeeded) + job.ready_count >= job.pod_count:
                    counts["ready"] += 1
                if job.active_count > 0:
                    counts["active"] += 1
                if job.suspended:
                    counts["suspended"] += 1
        return counts

    def _write_job_status(self, job: _JobSim) -> None:
        status: JSON = {
            "ready": job.ready_count,
            "terminating": 0,
            "uncountedTerminatedPods": {},
        }
        if job.active_count:
            status["active"] = job.active_count
        if job.succeeded:
            status["succeeded"] = len(job.succeeded)
            status["completedIndexes"] = _index_ranges(job.succeeded)
        if job.failed:
            status["failed"] = job.failed
        if job.start_time:
            status["startTime"] = job.start_time
        if job.completion_time:
            status["completionTime"] = job.completion_time
        if job.conditions:
            status["conditions"] = json_copy(job.conditions)

        def fn(obj: JSON) -> None:
            obj["status"] = status
            obj.setdefault("spec", {})["suspend"] = job.suspended

        self._safe(self.store.mutate, JOBS, job.sim.namespace, job.name, fn, subresource="*")

    # ------------------------------------------------------------------ helpers

    @staticmethod
    def _set_condition(
        conditions: list[JSON],
        type_: str,
        status: str,
        reason: str,
        message: str,
        *,
        probe: bool = False,
    ) -> None:
        """``meta.SetStatusCondition``: the transition time moves only with the status.
        ``probe`` adds the ``lastProbeTime`` that batch/v1 Job conditions carry."""
        now = format_timestamp()
        for cond in conditions:
            if cond["type"] == type_:
                if cond["status"] != status:
                    cond["status"] = status
                    cond["lastTransitionTime"] = now
                cond["reason"], cond["message"] = reason, message
                if probe:
                    cond["lastProbeTime"] = now
                return
        cond = {
            "type": type_,
            "status": status,
            "reason": reason,
            "message": message,
            "lastTransitionTime": now,
        }
        if probe:
            cond["lastProbeTime"] = now
        conditions.append(cond)

    def _safe(self, fn: Callable[..., JSON], *args: Any, **kwargs: Any) -> JSON | None:
        """A store call where the object may be gone or changed meanwhile: a race with
        a deletion is normal, not an error."""
        try:
            return fn(*args, **kwargs)
        except StoreError as exc:
            if exc.code in (404, 409, 410):
                _log.debug("store race ignored: %s", exc)
            else:
                _log.warning("store refused a simulated write: %s", exc)
            return None

    def _create_or_replace(self, res: Resource, obj: JSON) -> None:
        try:
            self.store.create(res, obj)
        except StoreError as exc:
            if exc.reason != "AlreadyExists":
                _log.warning("cannot create %s: %s", res.kind, exc)
                return
            self._safe(self.store.update, res, obj, check_rv=False)

    @staticmethod
    def _owner_ref(api_version: str, kind: str, name: str, uid: str) -> JSON:
        return {
            "apiVersion": api_version,
            "kind": kind,
            "name": name,
            "uid": uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }

    def _emit(
        self,
        namespace: str,
        involved: JSON,
        type_: str,
        reason: str,
        message: str,
        component: str,
        *,
        host: str | None = None,
        action: str | None = None,
        aggregate: dict[tuple[str, str, str], str] | None = None,
    ) -> None:
        """Create a core/v1 Event (or bump ``count`` of an identical one in ``aggregate``,
        as the event recorder's correlator does)."""
        now, micro = format_timestamp(), _micro_now()
        key = (str(involved.get("uid")), reason, message)
        if aggregate is not None and key in aggregate:

            def bump(obj: JSON) -> None:
                obj["count"] = int(obj.get("count") or 1) + 1
                obj["lastTimestamp"] = now

            if self._safe(self.store.mutate, EVENTS, namespace, aggregate[key], bump) is not None:
                return
        name = f"{involved.get('name')}.{time.time_ns() + next(self._event_seq):x}"
        source: JSON = {"component": component}
        if host:
            source["host"] = host
        event: JSON = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": involved,
            "reason": reason,
            "message": message,
            "type": type_,
            "count": 1,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "eventTime": micro,
            "source": source,
            "reportingComponent": component,
            "reportingInstance": host or component,
        }
        if action:
            event["action"] = action
        if self._safe(self.store.create, EVENTS, event) is not None and aggregate is not None:
            aggregate[key] = name

    def _trainjob_event(
        self,
        sim: _Sim,
        type_: str,
        reason: str,
        message: str,
        *,
        action: str | None = None,
        component: str = _TRAINER_COMPONENT,
    ) -> None:
        involved = {
            "apiVersion": _TRAINER_API,
            "kind": "TrainJob",
            "name": sim.name,
            "namespace": sim.namespace,
            "uid": sim.uid,
        }
        self._emit(
            sim.namespace,
            involved,
            type_,
            reason,
            message,
            component,
            action=action,
            aggregate=sim.event_keys,
        )

    def _jobset_event(self, sim: _Sim, type_: str, reason: str, message: str) -> None:
        involved = {
            "apiVersion": _JOBSET_API,
            "kind": "JobSet",
            "name": sim.name,
            "namespace": sim.namespace,
            "uid": sim.jobset_uid,
        }
        self._emit(sim.namespace, involved, type_, reason, message, _JOBSET_COMPONENT)

    def _job_event(self, job: _JobSim, type_: str, reason: str, message: str) -> None:
        involved = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": job.name,
            "namespace": job.sim.namespace,
            "uid": job.uid,
        }
        self._emit(job.sim.namespace, involved, type_, reason, message, _JOB_COMPONENT)

    def _pod_event(
        self,
        pod: _PodSim,
        type_: str,
        reason: str,
        message: str,
        *,
        container: JSON | None = None,
        component: str = "kubelet",
    ) -> None:
        involved: JSON = {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": pod.name,
            "namespace": pod.job.sim.namespace,
            "uid": pod.uid,
        }
        if container is not None:
            involved["fieldPath"] = f"spec.containers{{{container.get('name')}}}"
        host = pod.node if component == "kubelet" else None
        self._emit(pod.job.sim.namespace, involved, type_, reason, message, component, host=host)


# ======================================================================================
# Pure helpers
# ======================================================================================


def _job_pods(pod: _PodSim) -> int:
    """How many pods (completion indexes) the pod's Job runs."""
    return pod.job.rjob.completions


def _container(containers: Iterable[JSON], name: str) -> JSON | None:
    return next((c for c in containers if c.get("name") == name), None)


def _names(containers: Iterable[JSON]) -> list[str]:
    return [str(c.get("name")) for c in containers]


def _main_container(containers: list[JSON], rjob: str, ancestor: str | None) -> str:
    names = _names(containers)
    for candidate in ("node", ancestor, "launcher", rjob):
        if candidate and candidate in names:
            return candidate
    return names[0]


def _upsert_named(items: list[JSON], key: str, new: Iterable[JSON]) -> None:
    for item in new:
        for i, old in enumerate(items):
            if old.get(key) == item.get(key):
                items[i] = json_copy(item)
                break
        else:
            items.append(json_copy(item))


def _upsert_env(container: JSON, env: Iterable[JSON]) -> None:
    _upsert_named(container.setdefault("env", []), "name", [e for e in env if isinstance(e, dict)])


def _apply_trainer(container: JSON, trainer: JSON) -> None:
    if trainer.get("image"):
        container["image"] = trainer["image"]
    if trainer.get("command") is not None:
        container["command"] = list(trainer["command"])
    if trainer.get("args") is not None:
        container["args"] = list(trainer["args"])
    resources = trainer.get("resourcesPerNode")
    if isinstance(resources, dict) and (resources.get("limits") or resources.get("requests")):
        container["resources"] = {
            k: json_copy(v)
            for k, v in resources.items()
            if k in ("limits", "requests", "claims") and v
        }
    if trainer.get("env"):
        _upsert_env(container, trainer["env"])


def _apply_mpi(
    job_name: str, rjob: str, pspec: JSON, containers: list[JSON], mpi: JSON, nproc: str
) -> None:
    volumes: list[JSON] = pspec.setdefault("volumes", [])
    _upsert_named(
        volumes,
        "name",
        [
            {
                "name": "mpi-ssh-auth",
                "secret": {
                    "secretName": f"{job_name}-mpi-ssh-auth",
                    "defaultMode": 0o640,
                    "items": [
                        {"key": "ssh-privatekey", "path": "id_rsa"},
                        {"key": "ssh-publickey", "path": "id_rsa.pub"},
                        {"key": "ssh-publickey", "path": "authorized_keys"},
                    ],
                },
            }
        ],
    )
    if rjob == "launcher":
        _upsert_named(
            volumes,
            "name",
            [
                {
                    "name": "mpi-hostfile",
                    "configMap": {
                        "name": f"{job_name}-mpi-hostfile",
                        "items": [{"key": "hostfile", "path": "hostfile", "mode": 0o444}],
                    },
                }
            ],
        )
    for c in containers:
        if c.get("name") != "node":
            continue
        mounts: list[JSON] = c.setdefault("volumeMounts", [])
        _upsert_named(
            mounts,
            "name",
            [
                {
                    "name": "mpi-ssh-auth",
                    "mountPath": str(mpi.get("sshAuthMountPath") or "/root/.ssh"),
                }
            ],
        )
        if rjob == "launcher":
            _upsert_named(mounts, "name", [{"name": "mpi-hostfile", "mountPath": "/etc/mpi"}])
            _upsert_env(
                c,
                [
                    {"name": "OMPI_MCA_orte_default_hostfile", "value": "/etc/mpi/hostfile"},
                    {"name": "OMPI_MCA_orte_keep_fqdn_hostnames", "value": "true"},
                    {"name": "OMPI_MCA_orte_set_default_slots", "value": nproc},
                    {"name": "OMPI_MCA_plm_rsh_args", "value": "-o ConnectionAttempts=10"},
                ],
            )


def _torch_nproc(value: str, resources: Any) -> str:
    """PET_NPROC_PER_NODE as the torch plugin derives it from ``resourcesPerNode``:
    ``auto`` without a GPU resource means the CPU count, ``cpu`` means the CPU count,
    anything else stays (limits first, then requests, as upstream does)."""
    if not isinstance(resources, dict):
        return value
    if value == "auto":
        fallback = "auto"

        def use_cpu(res: JSON) -> bool:
            return not any("gpu" in str(k).lower() for k in res)
    elif value == "cpu":
        fallback = "1"

        def use_cpu(res: JSON) -> bool:
            return "cpu" in res
    else:
        fallback = value

        def use_cpu(res: JSON) -> bool:
            return False

    def calc(res: Any) -> tuple[str, bool]:
        if isinstance(res, dict):
            if use_cpu(res):
                return str(max(1, _cpu_value(res.get("cpu", 0)))), True
            return fallback, False
        return "1", False

    npp, used = calc(resources.get("limits"))
    if not used:
        npp, _ = calc(resources.get("requests"))
    return npp


def _cpu_value(quantity: Any) -> int:
    text = str(quantity)
    try:
        if text.endswith("m"):
            return -(-int(text[:-1]) // 1000)  # Quantity.Value() rounds up
        return int(float(text) + 0.999999)
    except ValueError:
        return 1


def _pull_policy(image: str) -> str:
    last = image.rsplit("/", 1)[-1]
    if "@" in last:
        return "IfNotPresent"
    if ":" not in last or last.endswith(":latest"):
        return "Always"
    return "IfNotPresent"


def _full_image(image: str) -> str:
    name = image
    first = name.split("/", 1)[0]
    if "/" not in name or ("." not in first and ":" not in first and first != "localhost"):
        name = f"docker.io/{name if '/' in name else 'library/' + name}"
    if ":" not in name.rsplit("/", 1)[-1] and "@" not in name:
        name += ":latest"
    return name


def _qos_class(pspec: JSON) -> str:
    containers = pspec.get("containers") or []
    any_set, guaranteed = False, bool(containers)
    for c in containers:
        res = c.get("resources") or {}
        limits, requests = res.get("limits") or {}, res.get("requests") or {}
        if limits or requests:
            any_set = True
        if (
            not limits
            or any(requests.get(k, limits.get(k)) != limits.get(k) for k in ("cpu", "memory"))
            or "cpu" not in limits
            or "memory" not in limits
        ):
            guaranteed = False
    if guaranteed:
        return "Guaranteed"
    return "Burstable" if any_set else "BestEffort"


def _pod_conditions(
    now: str,
    *,
    scheduled: bool,
    initialized: bool,
    ready: bool,
    ready_reason: str | None = None,
    not_ready: list[str] | None = None,
) -> list[JSON]:
    def cond(type_: str, ok: bool, reason: str | None = None, message: str | None = None) -> JSON:
        c: JSON = {
            "type": type_,
            "status": "True" if ok else "False",
            "lastProbeTime": None,
            "lastTransitionTime": now,
        }
        if not ok and reason:
            c["reason"] = reason
            if message:
                c["message"] = message
        return c

    msg = f"containers with unready status: [{' '.join(not_ready)}]" if not_ready else None
    return [
        cond("PodReadyToStartContainers", ready or ready_reason in ("PodCompleted", "PodFailed")),
        cond("Initialized", initialized),
        cond("Ready", ready, ready_reason, msg),
        cond("ContainersReady", ready, ready_reason, msg),
        cond("PodScheduled", scheduled),
    ]


def _container_status(
    c: JSON,
    *,
    waiting: JSON | None = None,
    running_since: str | None = None,
    terminated: JSON | None = None,
) -> JSON:
    image = str(c.get("image") or "")
    name = str(c.get("name"))
    status: JSON = {
        "name": name,
        "image": image,
        "imageID": "",
        "ready": running_since is not None,
        "restartCount": 0,
        "started": running_since is not None,
    }
    if running_since is not None or terminated is not None:
        digest = hashlib.sha256(image.encode()).hexdigest()
        status["imageID"] = f"{_full_image(image).rsplit(':', 1)[0]}@sha256:{digest}"
        status["containerID"] = (
            "containerd://"
            + hashlib.sha256(f"{name}{running_since}{random.random()}".encode()).hexdigest()
        )
    if waiting is not None:
        status["state"] = {"waiting": waiting}
    elif terminated is not None:
        status["state"] = {"terminated": terminated}
    else:
        status["state"] = {"running": {"startedAt": running_since}}
    return status


def _index_ranges(indexes: set[int]) -> str:
    """``completedIndexes`` notation: ``0-2,5``."""
    out: list[str] = []
    items = sorted(indexes)
    start = prev = items[0] if items else 0
    for i in items[1:]:
        if i == prev + 1:
            prev = i
            continue
        out.append(f"{start}-{prev}" if prev > start else str(start))
        start = prev = i
    if items:
        out.append(f"{start}-{prev}" if prev > start else str(start))
    return ",".join(out)


_VAR_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def _expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes ``$(VAR)`` expansion: defined variables are replaced, ``$$`` escapes,
    unknown references stay as written."""

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1)
        return env[name] if name in env else m.group(0)

    return _VAR_REF.sub(sub, text)


def _fmt(line: str, values: dict[str, str]) -> str:
    class _Keep(dict[str, str]):
        def __missing__(self, key: str) -> str:
            return "{" + key + "}"

    try:
        return line.format_map(_Keep(values))
    except (ValueError, IndexError, AttributeError):
        return line


def _object_data(res: Resource, obj: JSON) -> dict[str, str]:
    out: dict[str, str] = {}
    if res == SECRETS:
        for k, v in (obj.get("data") or {}).items():
            try:
                out[str(k)] = base64.b64decode(str(v)).decode(errors="replace")
            except ValueError:
                continue
        out.update({str(k): str(v) for k, v in (obj.get("stringData") or {}).items()})
    else:
        out.update({str(k): str(v) for k, v in (obj.get("data") or {}).items()})
    return out


def _read_termination_log(path: Path) -> str | None:
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if not data:
        return None
    return data[:TERMINATION_MESSAGE_LIMIT].decode(errors="ignore")
