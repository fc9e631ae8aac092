"""Scenarios: scripts that say how a TrainJob behaves on the simulated cluster.

A :class:`Scenario` is chosen per TrainJob by the simulated Trainer controller
(:mod:`kf_trainer_core.testing.controller`), from, in this order:

1. the TrainJob annotation ``testing.kf-trainer-suite/scenario``: a preset name
   (``"fail"``) or a JSON object of :class:`Scenario` fields, optionally based on a
   preset (``{"preset": "fail", "exit_code": 3}``);
2. :meth:`TrainerController.script` registrations (the latest matching one wins);
3. ``TrainerController.default_scenario``: the preset ``default`` unless the server
   was made with another (``KubeTestServer(default_scenario=...)``, the pytest
   plugin's ini option ``kf_trainer_default_scenario``).

The ``default`` preset runs the job's training function for real where it can (a
``CustomTrainer``'s program, which installs nothing): its return value is the job's
result, as on a cluster. A trainer container it cannot run here (an image's own
command, a builtin trainer, a function with ``packages_to_install``) is simulated: it
succeeds with no result, and its log says so. The other presets simulate the run;
``success`` answers the canned result :data:`SIMULATED_RESULT`.

Every duration is in seconds and multiplied by the controller's ``clock_scale``. The
defaults are fast: a whole successful run takes well under 0.3 s.

A *step* is one replicated job of the runtime. Steps are addressed by replicated-job
name (``"node"``, ``"launcher"``, ``"dataset-initializer"``) or by their
``trainer.kubeflow.org/trainjob-ancestor-step`` value (``"trainer"``,
``"dataset-initializer"``, ``"model-initializer"``); the top-level fields of a scenario
describe the trainer step, :attr:`Scenario.steps` overrides any step.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "DEFAULT_PRESET",
    "EVICTION_MESSAGE",
    "KWOK_TERMINATION_MESSAGE_ANNOTATION",
    "LOGS_ANNOTATION",
    "OUTCOMES",
    "PRESETS",
    "SCENARIO_ANNOTATION",
    "SIMULATED_RESULT",
    "PodContext",
    "PodResult",
    "ProgressUpdate",
    "Scenario",
    "Step",
    "evict_pod_status",
]

#: The TrainJob annotation that selects a scenario (preset name or JSON object).
SCENARIO_ANNOTATION = "testing.kf-trainer-suite/scenario"
#: A pod annotation: ``unserved`` makes its node serve no log — every log request for
#: it is answered as the API server answers for a kwok node, a node scaled away or a
#: kubelet that is down (500, ``dial tcp …:10250: connect: connection refused``).
#: Set by ``Scenario.serve_logs=False``, or on a pod template (a ``RuntimePatch``).
LOGS_ANNOTATION = "testing.kf-trainer-suite/logs"
UNSERVED_LOGS = "unserved"
#: kwok's pod annotation (the real control plane's fake nodes honour it too): a pod that
#: succeeds ends with this ``state.terminated.message``.
KWOK_TERMINATION_MESSAGE_ANNOTATION = "kwok.x-k8s.io/termination-message"

#: What a step's pods do.
#:
#: * ``succeed``: run for ``duration``, exit 0 (reason ``Completed``).
#: * ``fail``: the failing ranks exit with ``exit_code`` (default 1, reason ``Error``);
#:   the other ranks hang (as a collective would) until the Job controller kills them.
#: * ``oom``: like ``fail`` with exit code 137 and reason ``OOMKilled``.
#: * ``image-pull``: the image cannot be pulled: ``ErrImagePull`` then
#:   ``ImagePullBackOff``, the pod stays ``Pending`` (or fails after
#:   ``image_pull_fail_after`` seconds).
#: * ``never-finish``: run until deleted, suspended or past the deadline.
#: * ``evicted``: the failing ranks' pods are evicted by the kubelet (node pressure)
#:   after ``duration``: pod ``Failed`` with reason ``Evicted`` and a ``DisruptionTarget``
#:   condition, the container killed (exit code 137) — an infrastructure failure.
OUTCOMES = ("succeed", "fail", "oom", "image-pull", "never-finish", "evicted")

#: What the kubelet writes on a pod it evicts for node pressure.
EVICTION_MESSAGE = (
    "The node was low on resource: memory. Threshold quantity: 100Mi, available: 52Mi."
)


def evict_pod_status(status: dict[str, Any], now: str) -> None:
    """Turn a failed pod's status into an evicted one, as the kubelet leaves it."""
    status["reason"] = "Evicted"
    status["message"] = EVICTION_MESSAGE
    status.setdefault("conditions", []).append(
        {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "TerminationByKubelet",
            "message": EVICTION_MESSAGE,
            "lastProbeTime": None,
            "lastTransitionTime": now,
        }
    )


#: ``(progressPercentage, estimatedRemainingSeconds, {metric: value})``; either number
#: may be None (unknown).
ProgressUpdate = tuple[int | None, int | None, dict[str, str]]

#: The canned return value of the presets that simulate a run (``success``): rank 0's
#: termination message, as the generated program writes a function's return value. Not
#: the job's function's: only the ``default`` preset and ``exec`` run that.
SIMULATED_RESULT = '{"epochs":3,"loss":0.1289}'

#: The preset of a TrainJob that no annotation or script picks (see the module's text).
DEFAULT_PRESET = "default"

#: The log line of a trainer container the ``default`` preset could not run here.
NOT_RUN_LINE = (
    "[kf-trainer test bed] this container was simulated, not run ({why}): it succeeds "
    "with no result. Give the job a CustomTrainer function without packages_to_install "
    "to have it run, or a scenario (testing.kf-trainer-suite/scenario) to script it."
)

_METRIC_LIMIT = 64  # trainerStatus.metrics[].name/value MaxLength in the TrainJob CRD


@dataclass
class PodContext:
    """What a custom executor gets for one pod's main container.

    ``env`` holds the container's resolved environment (values, ``fieldRef`` and
    known secret/config map references, the Job controller's ``JOB_COMPLETION_INDEX``,
    ``KF_TRAINER_LAUNCHER=python`` and ``KF_TRAINER_TERMINATION_LOG``), without
    ``os.environ``. Call :meth:`log` to stream a log line; watch :attr:`cancelled`
    (set when the pod is killed) to stop early.
    """

    namespace: str
    pod: str
    container: str
    trainjob: str
    replicated_job: str
    #: The ancestor step (``trainer``, ``dataset-initializer``, ``model-initializer``)
    #: or the replicated-job name when the runtime gives it none.
    step: str
    #: ``trainer`` / ``initializer`` / ``server`` (MPI worker that serves the launcher)
    #: / ``other``.
    kind: str
    job_index: int
    completion_index: int
    image: str
    command: list[str]
    args: list[str]
    env: dict[str, str]
    workdir: Path
    termination_log: Path
    cancelled: threading.Event
    _emit: Callable[[str], None] = field(repr=False, default=lambda _line: None)

    def log(self, text: str) -> None:
        """Append one or more lines to the container's log."""
        self._emit(text)


@dataclass
class PodResult:
    """How a custom executor's container ended."""

    exit_code: int = 0
    #: ``Completed`` / ``Error`` by default (from the exit code); ``OOMKilled`` etc.
    reason: str | None = None
    #: The container's termination message (kubelet keeps at most 4096 bytes).
    termination_message: str | None = None


#: A custom executor: runs one pod's container (in a worker thread) and reports.
Executor = Callable[[PodContext], PodResult]


@dataclass
class Step:
    """Overrides for one step; ``None`` fields keep the scenario's value."""

    outcome: str | None = None
    #: Running time in seconds (``never-finish``: the span over which logs and progress
    #: updates are spread).
    duration: float | None = None
    exit_code: int | None = None
    #: ``state.terminated.message`` of the pods that fail (or of rank 0 on success).
    message: str | None = None
    #: Log lines for every pod of the step; ``{rank}``, ``{pod}``, ``{job}``,
    #: ``{namespace}``, ``{step}``, ``{nnodes}`` are substituted.
    logs: list[str] | None = None
    #: Completion indexes the failure outcome applies to (default: ``[0]``).
    ranks: list[int] | None = None
    image_pull_fail_after: float | None = None
    #: Time the pods stay ``Pending`` with ``ContainerCreating`` after scheduling.
    pending_delay: float | None = None

    def __post_init__(self) -> None:
        if self.outcome is not None and self.outcome not in OUTCOMES:
            raise ValueError(f"unknown outcome {self.outcome!r}; use one of {', '.join(OUTCOMES)}")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Step:
        """Build from JSON-shaped data; unknown keys raise ``ValueError``."""
        if not isinstance(data, dict):
            raise ValueError(f"a step must be a JSON object, not {type(data).__name__}")
        _check_keys(cls, data, "step")
        return cls(**data)


@dataclass
class Scenario:
    """How a TrainJob behaves. Top-level fields describe the trainer step (the
    replicated job whose template carries ``trainjob-ancestor-step: trainer``);
    initializers succeed after ``initializer_duration``; MPI worker nodes serve until
    the launcher is done. ``steps`` overrides any step."""

    name: str = "custom"
    outcome: str = "succeed"
    #: Trainer step running time.
    duration: float = 0.12
    #: Running time of initializer (and other non-trainer) steps.
    initializer_duration: float = 0.04
    #: Scheduled but ``ContainerCreating`` (image pull, volume mounts) before running.
    pending_delay: float = 0.02
    #: ``Pending`` and ``Unschedulable`` (``FailedScheduling`` events) before scheduling.
    unschedulable_for: float = 0.0
    #: Exit code of failing ranks for ``fail`` (default 1; ``oom`` is always 137).
    exit_code: int | None = None
    #: ``state.terminated.message`` of the failing ranks.
    failure_message: str | None = None
    #: Completion indexes of the trainer step that fail (default ``[0]``).
    fail_ranks: list[int] | None = None
    #: ``image-pull``: fail the stuck pods after this many seconds (None: stuck forever).
    image_pull_fail_after: float | None = None
    #: Make building the JobSet fail with this message (a Warning Event
    #: ``TrainJobResourcesCreationFailed`` on the TrainJob; no condition changes).
    creation_failure: str | None = None
    #: Make the API server refuse the trainer step's pods with this message (a missing
    #: service account, an exceeded quota): the Job controller's Warning Event
    #: ``FailedCreate`` on each of its Jobs, and no pods. ``{namespace}``, ``{job}`` and
    #: ``{pod}`` are substituted.
    pods_refused: str | None = None
    #: Termination message of the trainer step's rank 0 on success (the SDK-generated
    #: program writes the function's JSON return value there); None for none.
    termination_message: str | None = SIMULATED_RESULT
    #: Trainer log lines (None: realistic defaults, with epoch lines on rank 0).
    logs: list[str] | None = None
    #: ``status.trainerStatus`` updates, spread evenly over the trainer step.
    progress: list[ProgressUpdate] = field(default_factory=list)
    #: Suspend the running TrainJob after this many seconds (as Kueue preemption does,
    #: by patching ``spec.suspend``).
    suspend_after: float | None = None
    #: Resume a job suspended by ``suspend_after`` after this many seconds.
    resume_after: float | None = None
    #: Fail with ``DeadlineExceeded`` after this many seconds even without
    #: ``spec.activeDeadlineSeconds`` (which is honoured, scaled, otherwise).
    deadline: float | None = None
    #: Pod failures a Job tolerates (recreating the pod) before it fails. None: the Job
    #: template's ``backoffLimit`` when the runtime sets one, else 0 (real clusters
    #: default to 6 and retry for minutes; tests want the failure now).
    backoff_limit: int | None = None
    #: Per-step overrides, keyed by replicated-job name or ancestor step.
    steps: dict[str, Step] = field(default_factory=dict)
    #: ``False``: the job's nodes serve no logs (see :data:`LOGS_ANNOTATION`), as kwok's
    #: nodes and nodes gone after the job do.
    serve_logs: bool = True
    #: ``"exec"``: run each trainer pod's ``command + args`` as a local subprocess;
    #: ``"function"``: the same where the container runs a function's program the
    #: suite built and that installs nothing, else a simulated success with no result
    #: (its log says why); or a callable ``(PodContext) -> PodResult`` that runs every
    #: pod's main container.
    executor: str | Executor | None = None

    def __post_init__(self) -> None:
        if self.outcome not in OUTCOMES:
            raise ValueError(f"unknown outcome {self.outcome!r}; use one of {', '.join(OUTCOMES)}")
        if isinstance(self.executor, str) and self.executor not in ("exec", "function"):
            raise ValueError(
                f'executor must be "exec", "function" or a callable, not {self.executor!r}'
            )
        for key, step in list(self.steps.items()):
            if isinstance(step, dict):
                self.steps[key] = Step.from_dict(step)
        self.progress = [_progress_update(u) for u in self.progress]
        for name in ("duration", "initializer_duration", "pending_delay", "unschedulable_for"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative")

    # ------------------------------------------------------------------ construction

    @classmethod
    def preset(cls, name: str) -> Scenario:
        """A fresh copy of a named preset (see :data:`PRESETS`)."""
        fields = _PRESETS.get(name)
        if fields is None:
            raise ValueError(
                f"unknown scenario preset {name!r}; presets: {', '.join(sorted(_PRESETS))}"
            )
        return cls(name=name, **fields)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Scenario:
        """Build from JSON-shaped data. A ``"preset"`` key names the base preset; other
        keys are :class:`Scenario` fields (``steps`` values are :class:`Step` objects in
        JSON form). Unknown keys raise ``ValueError``."""
        if not isinstance(data, dict):
            raise ValueError(f"a scenario must be a JSON object, not {type(data).__name__}")
        data = dict(data)
        base_name = data.pop("preset", None)
        if base_name is not None and not isinstance(base_name, str):
            raise ValueError("preset must be a string")
        _check_keys(cls, data, "scenario")
        if "executor" in data and data["executor"] not in (None, "exec", "function"):
            raise ValueError('in JSON, executor can only be "exec" or "function"')
        base = cls.preset(base_name) if base_name else cls()
        if "steps" in data:
            steps = data["steps"]
            if not isinstance(steps, dict):
                raise ValueError("steps must be a JSON object keyed by step name")
            data["steps"] = {str(k): Step.from_dict(v) for k, v in steps.items()}
        if "name" not in data:
            data["name"] = base_name or "custom"
        return base.replace(**data)

    @classmethod
    def from_annotation(cls, value: str) -> Scenario:
        """Parse the ``testing.kf-trainer-suite/scenario`` annotation value."""
        text = value.strip()
        if text.startswith("{"):
            try:
                data = json.loads(text)
            except ValueError as exc:
                raise ValueError(f"the scenario annotation is not valid JSON: {exc}") from None
            return cls.from_dict(data)
        return cls.preset(text)

    def replace(self, **changes: Any) -> Scenario:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    # ------------------------------------------------------------------ resolution

    def step_for(self, replicated_job: str, ancestor: str | None, kind: str) -> Step:
        """The fully resolved script of one step (every field set, except the optional
        ``message``/``logs``/``image_pull_fail_after``)."""
        if kind == "trainer":
            resolved = Step(
                outcome=self.outcome,
                duration=self.duration,
                exit_code=self.exit_code,
                message=self.failure_message,
                logs=self.logs,
                ranks=self.fail_ranks,
                image_pull_fail_after=self.image_pull_fail_after,
                pending_delay=self.pending_delay,
            )
        else:
            resolved = Step(
                outcome="succeed",
                duration=self.initializer_duration,
                pending_delay=self.pending_delay,
            )
        # The ancestor name is the broader key, the replicated-job name the narrower.
        for key in (ancestor, replicated_job):
            override = self.steps.get(key) if key else None
            if override is None:
                continue
            for f in dataclasses.fields(Step):
                value = getattr(override, f.name)
                if value is not None:
                    setattr(resolved, f.name, value)
        if resolved.outcome == "oom":
            resolved.exit_code = 137
        elif resolved.exit_code is None:
            resolved.exit_code = 1 if resolved.outcome == "fail" else 0
        if resolved.ranks is None:
            resolved.ranks = [0]
        return resolved


def _progress_update(value: Any) -> ProgressUpdate:
    if not isinstance(value, (list, tuple)) or len(value) not in (2, 3):
        raise ValueError(
            "a progress update is [progressPercentage, estimatedRemainingSeconds, "
            f"{{metric: value}}], not {value!r}"
        )
    pct, remaining = value[0], value[1]
    metrics = value[2] if len(value) == 3 else {}
    if pct is not None and (not isinstance(pct, int) or not 0 <= pct <= 100):
        raise ValueError(f"progressPercentage must be an integer 0..100, not {pct!r}")
    if remaining is not None and (not isinstance(remaining, int) or remaining < 0):
        raise ValueError(f"estimatedRemainingSeconds must be a non-negative integer: {remaining!r}")
    if not isinstance(metrics, dict):
        raise ValueError(f"progress metrics must be a mapping, not {metrics!r}")
    out: dict[str, str] = {}
    for k, v in metrics.items():
        name, text = str(k), str(v)
        # The CRD caps both at 64 characters; a longer one would make the status
        # write invalid on a real cluster, so say so here.
        if not name or not text or len(name) > _METRIC_LIMIT or len(text) > _METRIC_LIMIT:
            raise ValueError(f"metric {name!r}={text!r}: name and value must be 1..64 characters")
        out[name] = text
    return (pct, remaining, out)


def _check_keys(cls: type[Any], data: dict[str, Any], what: str) -> None:
    allowed = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise ValueError(
            f"unknown {what} field(s) {', '.join(unknown)}; known: {', '.join(sorted(allowed))}"
        )


# ---------------------------------------------------------------------- presets

#: Each preset's fields (its name aside); :meth:`Scenario.preset` builds a fresh one.
_PRESETS: dict[str, dict[str, Any]] = {
    DEFAULT_PRESET: {"executor": "function", "termination_message": None},
    "success": {},
    "fail": {"outcome": "fail", "exit_code": 1},
    "oom": {"outcome": "oom"},
    "image-pull": {"outcome": "image-pull"},
    "creation-failure": {
        "creation_failure": (
            f"simulated JobSet build failure ({SCENARIO_ANNOTATION}=creation-failure)"
        )
    },
    # What the real Job controller reports for a pod whose service account is missing.
    "pods-refused": {
        "pods_refused": (
            'Error creating: pods "{pod}" is forbidden: error looking up service account '
            '{namespace}/missing: serviceaccount "missing" not found'
        )
    },
    "never-finish": {"outcome": "never-finish"},
    "slow-start": {"unschedulable_for": 0.4, "pending_delay": 0.3},
    "progress": {
        "duration": 0.3,
        "progress": [
            (10, 270, {"loss": "2.3010", "epoch": "1"}),
            (40, 180, {"loss": "1.2040", "epoch": "2"}),
            (75, 75, {"loss": "0.4120", "epoch": "3"}),
            (100, 0, {"loss": "0.1289", "epoch": "3"}),
        ],
    },
    "deadline": {"outcome": "never-finish", "deadline": 0.25},
    "exec": {"executor": "exec", "termination_message": None},
    "preempted": {"duration": 0.2, "suspend_after": 0.08, "resume_after": 0.1},
    "evicted": {"outcome": "evicted"},
    # What a real cluster's kwok node (and a GPU node scaled away after the job) gives:
    # the pod succeeds with no termination message and its log cannot be read.
    "log-less": {"termination_message": None, "serve_logs": False},
}

#: Names of the presets :meth:`Scenario.preset` knows.
PRESETS: tuple[str, ...] = tuple(_PRESETS)
