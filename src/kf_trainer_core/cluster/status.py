"""What a TrainJob is doing, told honestly.

The TrainJob CRD has only three condition types — ``Suspended``, ``Complete`` and
``Failed`` — so "pending" and "running" are derived here from ``status.jobsStatus`` and
the pods, and a ``Suspended=False`` condition (reason ``Resumed``) left in the list after
a resume is read as not suspended. Steps follow the SDK's names (``dataset-initializer``,
``model-initializer``, ``node-N``; with MPI the launcher is ``node-0``).

Every function here is pure: the sync client, the async client and the local backend
all derive states, steps, progress and failures the same way.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from kf_trainer_core.base import untrusted
from kf_trainer_core.base.errors import FailureClass
from kf_trainer_core.base.marks import (
    GPUS_ANNOTATION,
    IDENTITY_ANNOTATION,
    PROGRESS_ANNOTATION,
    PROGRESS_FROM_LOG,
    SPEC_HASH_ANNOTATION,
)
from kf_trainer_core.base.timeutil import duration_text
from kf_trainer_core.cluster import distributed
from kf_trainer_core.cluster.failures import classify, unschedulable
from kf_trainer_core.cluster.kueue import QueueStatus
from kf_trainer_core.cluster.multikueue import WorkerCluster, dispatched
from kf_trainer_core.cluster.waiting import Waiting
from kf_trainer_core.fields import names
from kf_trainer_core.k8s.resources import (
    COMPLETION_INDEX_LABEL,
    JOB_INDEX_LABEL,
    REPLICATED_JOB_LABEL,
    RESTART_ATTEMPT_LABEL,
)

# Re-exported: the client and the failure classes read it from here.
from kf_trainer_core.k8s.trainjob import CREATION_FAILED_REASON as CREATION_FAILED_REASON
from kf_trainer_core.k8s.trainjob import condition, condition_true
from kf_trainer_core.manifest.runtimes import device_of
from kf_trainer_core.spec.function import parse_result

#: Waiting reasons that will not resolve by themselves while a pod is pending.
STUCK_WAITING_REASONS = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "CreateContainerConfigError",
        "CreateContainerError",
        "CrashLoopBackOff",
        "RunContainerError",
    }
)


class JobState(str, Enum):
    """The state of a TrainJob, as the SDK names them plus ``Suspended``."""

    CREATED = "Created"
    SUSPENDED = "Suspended"
    RUNNING = "Running"
    COMPLETE = "Complete"
    FAILED = "Failed"

    @property
    def terminal(self) -> bool:
        return self in (JobState.COMPLETE, JobState.FAILED)


class _Out(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


#: A metric as reported: a number where its text is one, else the text.
MetricValue = int | float | str


def _safe_lines(value: Any) -> Any:
    return untrusted.shown_lines(str(v) for v in value) if isinstance(value, list) else value


def _safe_time(value: Any) -> Any:
    # From the cluster: read by the suite's rule, never pydantic's (see untrusted.timestamp).
    return untrusted.timestamp(value)


def _safe_gpus(value: Any) -> Any:
    # From a pod's annotation: a few short ids, whatever the annotation held.
    if not isinstance(value, list):
        return value
    return [untrusted.line(v, 64) for v in value[:64]]


def _safe_metrics(value: Any) -> Any:
    if not isinstance(value, Mapping):
        return value
    limit = untrusted.METRIC_TEXT_LIMIT
    return {
        untrusted.line(k, limit): untrusted.line(v, limit) if isinstance(v, str) else v
        for k, v in value.items()
    }


class Step(_Out):
    """One step of a job: an initializer, a training node or the MPI launcher."""

    name: str
    status: str | None = None
    pod_name: str
    device: str = "Unknown"
    device_count: str = "Unknown"
    replicated_job: str = ""
    container_reason: str | None = None
    exit_code: int | None = None
    #: When the step's main container started and ended (for wall time and GPU-hours).
    started_at: datetime | None = None
    finished_at: datetime | None = None
    #: The GPUs the local and container backends gave the node (``["0", "1"]``, as
    #: ``CUDA_VISIBLE_DEVICES`` names them); empty elsewhere.
    gpus: list[str] = Field(default_factory=list)

    _lines = field_validator("container_reason", "status", mode="before")(untrusted.line_field)
    _gpus = field_validator("gpus", mode="before")(_safe_gpus)
    _times = field_validator("started_at", "finished_at", mode="before")(_safe_time)


class Progress(_Out):
    """``status.trainerStatus`` (alpha): what the training code reports about itself."""

    percentage: int | None = None
    estimated_remaining_seconds: int | None = None
    #: By name: a number where the job reported one (``{"loss": 0.25}``), else text.
    metrics: dict[str, MetricValue] = Field(default_factory=dict)
    last_updated: str | None = None

    # Built from what a job reported: kept safe to show whoever built it.
    _metrics = field_validator("metrics", mode="before")(_safe_metrics)
    _lines = field_validator("last_updated", mode="before")(untrusted.line_field)

    def summary(self) -> list[str]:
        """What a person reads of it: ``["40% done", "about 1m 30s left", "loss=0.5"]``
        (parts that are not reported are left out). Task logs and artifacts join them."""
        parts = []
        if self.percentage is not None:
            parts.append(f"{self.percentage}% done")
        if self.estimated_remaining_seconds is not None and self.percentage != 100:
            # "100% done; about 0s left" says nothing the percentage does not.
            parts.append(f"about {duration_text(self.estimated_remaining_seconds)} left")
        if self.metrics:
            parts.append(", ".join(f"{k}={v}" for k, v in sorted(self.metrics.items())))
        return parts


class Failure(_Out):
    """Why a job failed (or cannot start), gathered from every place Kubernetes says."""

    reason: str = ""
    message: str = ""
    step: str | None = None
    pod: str | None = None
    container_reason: str | None = None
    exit_code: int | None = None
    log_tail: list[str] = Field(default_factory=list)
    events: list[str] = Field(default_factory=list)
    #: ``infrastructure``, ``capacity``, ``configuration``, ``user-code`` or ``unknown``
    #: (see :mod:`kf_trainer_core.cluster.failures`).
    failure_class: FailureClass = FailureClass.UNKNOWN
    #: The evidence for the class, in one line.
    classified_by: str = ""

    # Job output (exception text, log lines, termination messages): control characters
    # neutralised, internal marker lines hidden, each line capped, however it is built.
    _tail = field_validator("log_tail", "events", mode="before")(_safe_lines)
    _lines = field_validator("reason", "container_reason", "classified_by", mode="before")(
        untrusted.line_field
    )
    _text = field_validator("message", mode="before")(untrusted.text_field)

    @property
    def retryable(self) -> bool:
        """Whether a plain retry may help (an infrastructure failure)."""
        return self.failure_class.retryable

    def describe(self) -> str:
        """A multi-line explanation for an error message or a task log."""
        head = self.reason or "Failed"
        lines = [f"{head}: {self.message}" if self.message else head]
        if self.failure_class is not FailureClass.UNKNOWN:
            evidence = self.classified_by or ""
            cause, _, raised = evidence.partition(" raised ")
            if raised and raised in lines[0]:
                # The reason already quotes the exception: a failure is said once.
                evidence = f"{cause} raised the error above"
            why = f" — {evidence}" if evidence else ""
            retry = "a retry may succeed" if self.retryable else "a retry will not help"
            lines.append(f"failure class: {self.failure_class.value}{why} ({retry})")
        if self.step:
            where = f"step {self.step}" + (f" (pod {self.pod})" if self.pod else "")
            what = []
            if self.container_reason:
                what.append(self.container_reason)
            if self.exit_code is not None:
                what.append(f"exit code {self.exit_code}")
            lines.append(f"failing {where}" + (f": {', '.join(what)}" if what else ""))
        if self.events:
            lines.append("events:")
            lines += [f"  {e}" for e in self.events[-10:]]
        if self.log_tail:
            lines.append(f"last {len(self.log_tail)} log lines:")
            lines += [f"  | {line}" for line in self.log_tail]
        return "\n".join(lines)


class Event(_Out):
    """A Kubernetes Event about the job or one of its parts (SDK ``Event``)."""

    involved_object_kind: str
    involved_object_name: str
    message: str
    reason: str
    event_time: datetime | None = None
    type: str = "Normal"
    count: int = 1

    _lines = field_validator(
        "message", "reason", "involved_object_kind", "involved_object_name", mode="before"
    )(untrusted.line_field)
    _time = field_validator("event_time", mode="before")(_safe_time)

    def line(self) -> str:
        obj = f"{self.involved_object_kind}/{self.involved_object_name}"
        return f"{self.type} {self.reason} {obj}: {self.message}"


class TrainJob(_Out):
    """A TrainJob as the client reports it (SDK ``TrainJob`` plus progress and failure)."""

    name: str
    namespace: str
    runtime: str
    runtime_kind: str = "ClusterTrainingRuntime"
    status: JobState
    steps: list[Step] = Field(default_factory=list)
    num_nodes: int = 1
    creation_timestamp: datetime | None = None
    completion_timestamp: datetime | None = None
    progress: Progress | None = None
    failure: Failure | None = None
    conditions: list[dict[str, Any]] = Field(default_factory=list)
    uid: str | None = None
    resource_version: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    spec_hash: str | None = None
    identity: str | None = None
    deleting: bool = False
    #: Where the job stands in Kueue (``None``: not queued by Kueue, or not read).
    queue: QueueStatus | None = None
    #: Why the unfinished job restarts or cannot start, where its pods were read
    #: (:mod:`kf_trainer_core.cluster.waiting`); ``None``: nothing holds it up.
    waiting: Waiting | None = None
    #: MultiKueue: the worker cluster that runs the job (its steps, logs, events and
    #: result come from there); ``None`` for a job its own cluster runs.
    worker: WorkerCluster | None = None

    _times = field_validator("creation_timestamp", "completion_timestamp", mode="before")(
        _safe_time
    )

    @property
    def display_status(self) -> str:
        """The state a person reads: ``Restarting`` or ``Pending`` where :attr:`waiting`
        says so, else :attr:`status` (the SDK's states, which waits and filters use)."""
        return self.waiting.state if self.waiting is not None else self.status.value

    def step(self, name: str) -> Step | None:
        return next((s for s in self.steps if s.name == name), None)

    @property
    def percent_done(self) -> int | None:
        """The share of the work done, as every display shows it: 100 for a complete
        job whatever its last report said (reports come every few seconds, so the last
        one may predate the end); else what the job reported (a failed job keeps the
        share it reached), or ``None``."""
        if self.status is JobState.COMPLETE:
            return 100
        return self.progress.percentage if self.progress is not None else None

    def progress_summary(self) -> list[str]:
        """What a person reads of the job's own progress report (:meth:`Progress.summary`)
        with the share done read from the job's state (:attr:`percent_done`)."""
        progress = self.progress
        if progress is None:
            return []
        if progress.percentage is not None and progress.percentage != self.percent_done:
            progress = progress.model_copy(
                update={"percentage": self.percent_done, "estimated_remaining_seconds": None}
            )
        return progress.summary()


def job_state(obj: Mapping[str, Any]) -> JobState:
    """The state of a TrainJob object, without looking at its pods."""
    if condition_true(obj, "Failed"):
        return JobState.FAILED
    if condition_true(obj, "Complete"):
        return JobState.COMPLETE
    # Suspended=False (reason Resumed) stays in the list after a resume: only True counts.
    if condition_true(obj, "Suspended"):
        return JobState.SUSPENDED
    if dispatched(obj) and (obj.get("spec") or {}).get("suspend"):
        # MultiKueue's job on the manager: no Trainer writes its conditions there, and
        # the status copied from a worker stays as it was when Kueue evicts the job
        # (the worker's copy removed, this one suspended until dispatched again).
        return JobState.SUSPENDED
    jobs = (obj.get("status") or {}).get("jobsStatus") or []
    # A Job counts pending pods as `active`; only `ready` pods are running. Finished
    # steps (initializers done, nodes starting) also mean the job is under way.
    if any((j.get("ready") or 0) > 0 or (j.get("succeeded") or 0) > 0 for j in jobs):
        return JobState.RUNNING
    return JobState.CREATED


def reports_in_log(obj: Mapping[str, Any]) -> bool:
    """Whether the job's function prints its progress in node-0's log (the builder
    marks such jobs), so a waiter without ``trainerStatus`` may look there."""
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    return annotations.get(PROGRESS_ANNOTATION) == PROGRESS_FROM_LOG


def with_trainer_status(obj: Mapping[str, Any], status: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``obj`` whose ``status.trainerStatus`` is ``status`` (progress read
    from the log, shown as if the status server had written it)."""
    out = dict(obj)
    out["status"] = {**(obj.get("status") or {}), "trainerStatus": dict(status)}
    return out


def _subject(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    namespace, name = (untrusted.line(meta.get(k), 253) for k in ("namespace", "name"))
    return f"TrainJob {namespace}/{name}"


def progress(obj: Mapping[str, Any]) -> Progress | None:
    """``status.trainerStatus`` as :class:`Progress`, if the job reports any. What the
    job wrote is validated field by field (:func:`kf_trainer_core.base.untrusted.trainer_status`):
    a malformed field is left out with one warning, never an error of the reader."""
    ts = untrusted.trainer_status((obj.get("status") or {}).get("trainerStatus"), _subject(obj))
    if not ts:
        return None
    # The time left is the running job's own estimate: a suspended, queued or finished
    # job is not "about 3s" from its end, whatever its last report said.
    running = job_state(obj) is JobState.RUNNING
    return Progress(
        percentage=ts.get("progressPercentage"),
        estimated_remaining_seconds=ts.get("estimatedRemainingSeconds") if running else None,
        metrics={m["name"]: untrusted.metric_value(m["value"]) for m in ts.get("metrics", [])},
        last_updated=ts.get("lastUpdatedTime"),
    )


def _index(labels: Mapping[str, str]) -> int:
    raw = labels.get(COMPLETION_INDEX_LABEL) or labels.get(JOB_INDEX_LABEL)
    return untrusted.whole_number(raw) or 0


def _is_mpi(pods: Iterable[Mapping[str, Any]]) -> bool:
    """Whether the job's pods include an MPI launcher (then the launcher is node-0)."""
    return any(
        ((p.get("metadata") or {}).get("labels") or {}).get(REPLICATED_JOB_LABEL) == names.LAUNCHER
        for p in pods
    )


def step_name(pod: Mapping[str, Any], mpi: bool) -> str | None:
    """The SDK's step name for a pod, or ``None`` for pods of other replicated jobs."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    rjob = labels.get(REPLICATED_JOB_LABEL)
    if rjob in (names.DATASET_INITIALIZER, names.MODEL_INITIALIZER):
        return str(rjob)
    if rjob == names.LAUNCHER:
        return f"{names.NODE}-0"
    if rjob == names.NODE:
        # With MPI the launcher is node-0, so the workers count from 1.
        return f"{names.NODE}-{_index(labels) + (1 if mpi else 0)}"
    return None


def _main_container(pod: Mapping[str, Any], step: str) -> Mapping[str, Any]:
    """The step's container in the pod's spec: the one named for the step, else the
    first (with none, one of the step's name that says nothing else)."""
    wanted = step if step in (names.DATASET_INITIALIZER, names.MODEL_INITIALIZER) else names.NODE
    containers = ((pod.get("spec") or {}).get("containers")) or []
    first = containers[0] if containers else {"name": wanted}
    return next((c for c in containers if c.get("name") == wanted), first)


def container_state(pod: Mapping[str, Any], container: str) -> dict[str, Any]:
    """The ``containerStatuses`` entry of a container (empty if not reported yet)."""
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        if cs.get("name") == container:
            return dict(cs)
    return {}


def terminated(pod: Mapping[str, Any], container: str = names.NODE) -> Mapping[str, Any]:
    """The ``terminated`` state of a container (empty while it has not ended)."""
    return (container_state(pod, container).get("state") or {}).get("terminated") or {}


def _reason_and_code(status: Mapping[str, Any]) -> tuple[str | None, int | None]:
    state = status.get("state") or {}
    last = status.get("lastState") or {}
    for source in (state, last):
        term = source.get("terminated")
        if term:
            return term.get("reason"), term.get("exitCode")
    waiting = state.get("waiting")
    if waiting:
        return waiting.get("reason"), None
    return None, None


#: Phases by how late a pod of a step can be among pods created in the same second:
#: a failed pod is replaced by a later one; a live one replaces nothing after it.
_PHASE_RECENCY = {"Failed": 0, "Succeeded": 1}


def pod_recency(pod: Mapping[str, Any]) -> tuple[int, str, int, str]:
    """A sort key putting the newest pod of a step last: the JobSet restart attempt
    it was made for, then its creation time — which has one-second resolution, so
    ties are real after a fast failure — then live before finished, failed first, and
    its name for a total order. Every "newest pod" choice uses it (steps, logs, the
    function's result), so they never disagree."""
    meta = pod.get("metadata") or {}
    restart = untrusted.whole_number((meta.get("labels") or {}).get(RESTART_ATTEMPT_LABEL)) or 0
    phase = str((pod.get("status") or {}).get("phase") or "")
    return (
        restart,
        str(meta.get("creationTimestamp") or ""),
        _PHASE_RECENCY.get(phase, 2),
        str(meta.get("name") or ""),
    )


def _with_steps(pods: Iterable[Mapping[str, Any]]) -> list[tuple[str, Mapping[str, Any]]]:
    """The pods that are steps of the job, with their step names, in the order given."""
    pods = list(pods)
    mpi = _is_mpi(pods)
    return [(step, pod) for pod in pods if (step := step_name(pod, mpi)) is not None]


def newest_by_step(pods: Iterable[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """Each step's newest pod (:func:`pod_recency`), by step name; pods of other
    replicated jobs are left out."""
    # Oldest first: a step's newer pod replaces its older one.
    return dict(sorted(_with_steps(pods), key=lambda item: pod_recency(item[1])))


def step_order(step: str) -> tuple[int, int]:
    """A sort key putting steps in run order: the initializers, then the nodes by
    number."""
    if step == names.DATASET_INITIALIZER:
        return (0, 0)
    if step == names.MODEL_INITIALIZER:
        return (1, 0)
    number = untrusted.whole_number(step.rsplit("-", 1)[-1])
    return (2, number) if number is not None else (3, 0)


def steps_from_pods(pods: Iterable[Mapping[str, Any]]) -> list[Step]:
    """Steps of a job from its pods, newest pod per step, in run order."""
    steps = []
    for name, pod in newest_by_step(pods).items():
        meta = pod.get("metadata") or {}
        annotations = meta.get("annotations") or {}
        spec_c = _main_container(pod, name)
        device, count = device_of(spec_c.get("resources"))
        for env in spec_c.get("env") or []:
            # torchrun's processes per node beat the resource count, as in the SDK.
            procs = untrusted.whole_number(env.get("value"), 1)
            if env.get("name") == "PET_NPROC_PER_NODE" and procs is not None:
                count = str(procs)
        gpus = [g for g in str(annotations.get(GPUS_ANNOTATION) or "").split(",") if g]
        if gpus and device in (None, "cpu"):
            device = "gpu"  # a local node given GPUs it did not ask for
        cstate = container_state(pod, str(spec_c.get("name")))
        reason, code = _reason_and_code(cstate)
        started, finished = _container_times(cstate)
        steps.append(
            Step(
                name=name,
                status=(pod.get("status") or {}).get("phase"),
                pod_name=str(meta.get("name", "")),
                # No accelerator in the limits: the step runs on CPUs (whoever
                # submitted it: a spec with cpu limits and one with none read alike).
                device=device or "cpu",
                device_count=count or "Unknown",
                replicated_job=str((meta.get("labels") or {}).get(REPLICATED_JOB_LABEL, "")),
                container_reason=reason,
                exit_code=code,
                started_at=started,
                finished_at=finished,
                gpus=gpus,
            )
        )
    return sorted(steps, key=lambda step: step_order(step.name))


def _container_times(status: Mapping[str, Any]) -> tuple[str | None, str | None]:
    state = status.get("state") or {}
    term = state.get("terminated") or {}
    if term:
        return term.get("startedAt"), term.get("finishedAt")
    return (state.get("running") or {}).get("startedAt"), None


def to_trainjob(
    obj: Mapping[str, Any],
    pods: Iterable[Mapping[str, Any]] = (),
    queue: QueueStatus | None = None,
) -> TrainJob:
    """The client's view of a TrainJob object and its pods (and its Kueue status)."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    ref = spec.get("runtimeRef") or {}
    steps = steps_from_pods(pods)
    state = job_state(obj)
    annotations = meta.get("annotations") or {}
    complete = condition(obj, "Complete") or condition(obj, "Failed")
    return TrainJob(
        name=str(meta.get("name", "")),
        namespace=str(meta.get("namespace", "")),
        runtime=str(ref.get("name", "")),
        runtime_kind=str(ref.get("kind") or "ClusterTrainingRuntime"),
        status=state,
        steps=steps,
        num_nodes=int(
            (spec.get("trainer") or {}).get("numNodes")
            or max(1, sum(s.name.startswith("node-") for s in steps))
        ),
        creation_timestamp=meta.get("creationTimestamp"),
        completion_timestamp=complete.get("lastTransitionTime")
        if complete and state.terminal
        else None,
        progress=progress(obj),
        conditions=list((obj.get("status") or {}).get("conditions") or []),
        uid=meta.get("uid"),
        resource_version=meta.get("resourceVersion"),
        labels=dict(meta.get("labels") or {}),
        spec_hash=annotations.get(SPEC_HASH_ANNOTATION),
        identity=annotations.get(IDENTITY_ANNOTATION),
        deleting=bool(meta.get("deletionTimestamp")),
        queue=queue,
    )


def _pod_trouble(pod: Mapping[str, Any]) -> tuple[str | None, int | None, str]:
    """A pod's failure or blockage: (container reason, exit code, message)."""
    status = pod.get("status") or {}
    for cs in [
        *(status.get("initContainerStatuses") or []),
        *(status.get("containerStatuses") or []),
    ]:
        state = cs.get("state") or {}
        term = state.get("terminated")
        if term and term.get("exitCode", 0) != 0:
            return term.get("reason") or "Error", term.get("exitCode"), term.get("message") or ""
        waiting = state.get("waiting")
        if waiting and waiting.get("reason") in STUCK_WAITING_REASONS:
            return waiting.get("reason"), None, waiting.get("message") or ""
    if status.get("phase") == "Failed":
        return status.get("reason") or "Failed", None, status.get("message") or ""
    # The scheduler found no node (more GPUs than any node has, taints...): the pod is
    # stuck Pending with no container status, only this condition says why.
    cond = unschedulable(pod)
    if cond is not None:
        return "Unschedulable", None, str(cond.get("message") or "")
    return None, None, ""


def failing_pod(
    pods: Iterable[Mapping[str, Any]], first: str | None = None
) -> tuple[str, Mapping[str, Any], str | None, int | None, str] | None:
    """The first pod, in step order, that failed or is stuck — step ``first``'s when it
    is given, even one still running (a root cause whose node is being stopped, see
    :mod:`kf_trainer_core.cluster.root_cause`): ``(step, pod, container reason, exit
    code, message)``. Of a step's attempts (a retried Job keeps each failed pod) the
    newest, as the steps, the logs and the result choose it (:func:`pod_recency`)."""
    found = []
    for step, pod in _with_steps(sorted(pods, key=pod_recency, reverse=True)):
        reason, code, message = _pod_trouble(pod)
        if reason is not None or step == first:
            found.append((step, pod, reason, code, message))
    # min keeps the first of equals: of a step's pods, the newest.
    return min(found, key=lambda f: (f[0] != first, step_order(f[0])), default=None)


def failure_of(
    obj: Mapping[str, Any],
    pods: Iterable[Mapping[str, Any]] = (),
    events: Iterable[Event] = (),
    log_tail: Iterable[str] = (),
    queue: QueueStatus | None = None,
    *,
    first: str | None = None,
    shown: int | None = None,
) -> Failure:
    """Explain a failed (or stuck) job from its condition, pods, events and log, and
    classify it (:func:`kf_trainer_core.cluster.failures.classify`). ``first``: the
    step that failed first, when the caller knows (a distributed job's root cause,
    :mod:`kf_trainer_core.cluster.root_cause`), whose log ``log_tail`` is; ``shown``:
    how many of its last lines the failure keeps (every line given is evidence)."""
    pods = list(pods)
    # The job's own words: safe and bounded before anything reads them.
    log_tail = untrusted.shown_lines(log_tail)
    cond = condition(obj, "Failed") or {}
    found = failing_pod(pods, first)
    step = pod_name = container_reason = None
    code: int | None = None
    message = str(cond.get("message") or "")
    pod_message = ""
    if found is not None:
        step, pod, container_reason, code, pod_message = found
        pod_name = (pod.get("metadata") or {}).get("name")
        if pod_message and pod_message not in message:
            message = f"{message} ({pod_message})" if message else pod_message
    message = untrusted.text(message, newlines=True)
    warnings = [e.line() for e in events if e.type == "Warning"]
    reason = str(cond.get("reason") or (container_reason or ""))
    klass, evidence = classify(
        reason=reason,
        message=message,
        container_reason=container_reason,
        exit_code=code,
        log_tail=log_tail,
        pods=pods,
        evictions=[(e.reason, e.message) for e in queue.evictions] if queue else (),
        step=step,
        pod_message=untrusted.text(pod_message, newlines=True),
        still_running=found is not None and step == first and container_reason is None,
    )
    if shown is not None:
        log_tail = distributed.without_launcher_traceback(log_tail)[-shown:] if shown else []
    return Failure(
        reason=reason,
        message=message,
        step=step,
        pod=pod_name,
        container_reason=container_reason,
        exit_code=code,
        log_tail=log_tail,
        events=warnings,
        failure_class=klass,
        classified_by=evidence,
    )


def trainer_pod(pods: Iterable[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The pod whose container reports the function's result: node-0 (the launcher
    with MPI), its newest."""
    return newest_by_step(pods).get(f"{names.NODE}-0")


def result_from_pods(pods: Iterable[Mapping[str, Any]]) -> tuple[bool, Any]:
    """The training function's return value from node-0's termination message:
    ``(found, value)``."""
    pod = trainer_pod(pods)
    if pod is None:
        return False, None
    message = terminated(pod).get("message")
    if not message:
        return False, None
    value = parse_result(message)
    return value is not None or message.strip() == "null", value
