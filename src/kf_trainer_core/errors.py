"""Every public error of kf-trainer-suite (API failures aside: they are
:class:`~kf_trainer_core.k8s.errors.ApiError`, with the HTTP status).

Every error a user can cause carries the field it is about and the fix, so that a bad
DAG or flow fails at parse or submit time with a message that says what to change.
Errors about a job's outcome derive from the failure-class markers
(:class:`InfrastructureFailure`, :class:`CapacityFailure`, :class:`ConfigurationFailure`,
:class:`UserCodeFailure`; see :mod:`kf_trainer_core.cluster.failures`), so that
exception-matching retry rules can tell them apart.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, ClassVar, TypeAlias

# What the errors about one job carry, from the cluster layer above this module (every
# layer raises these errors, so this module imports none of them): the job as last seen
# (:class:`kf_trainer_core.cluster.status.TrainJob`), why it failed
# (:class:`~kf_trainer_core.cluster.status.Failure`), why its result cannot be read
# (:class:`~kf_trainer_core.cluster.results.ResultMissing`) and its Kueue queue
# (:class:`~kf_trainer_core.cluster.kueue.QueueStatus`).
_Job: TypeAlias = Any
_Failure: TypeAlias = Any
_Missing: TypeAlias = Any
_Queue: TypeAlias = Any


class KFTrainerError(Exception):
    """Base class of every error raised by kf-trainer-suite."""


@dataclass(frozen=True)
class FieldProblem:
    """One problem with one field of a spec: where, what, and how to fix it."""

    field: str
    problem: str
    fix: str = ""

    def __str__(self) -> str:
        text = f"{self.field or '<spec>'}: {self.problem}"
        if self.fix:
            text += f" Fix: {self.fix}"
        return text


class SpecError(KFTrainerError, ValueError):
    """A training spec that cannot become a valid TrainJob.

    Raised before anything is submitted. ``problems`` lists every field at fault; the
    message names each field and the fix.
    """

    def __init__(
        self, problems: Sequence[FieldProblem] | FieldProblem, *, title: str = "", root: str = ""
    ) -> None:
        if isinstance(problems, FieldProblem):
            problems = [problems]
        #: Problems with field paths relative to the object that was validated.
        self.problems: tuple[FieldProblem, ...] = tuple(problems)
        self.title = title or "Invalid training spec"
        #: What was validated when it was not a whole spec, e.g. "CustomTrainer".
        self.root = root
        super().__init__(self._render())

    @classmethod
    def single(cls, field: str, problem: str, fix: str = "", *, title: str = "") -> SpecError:
        """An error about one field."""
        return cls(FieldProblem(field, problem, fix), title=title)

    @property
    def fields(self) -> list[str]:
        """The fields at fault, in order, as the message names them."""
        return [self._full(p.field) for p in self.problems]

    def _full(self, field: str) -> str:
        if not self.root:
            return field
        return f"{self.root}{'' if field.startswith('[') else '.'}{field}" if field else self.root

    def _render(self) -> str:
        shown = [FieldProblem(self._full(p.field), p.problem, p.fix) for p in self.problems]
        if len(shown) == 1:
            return f"{self.title}: {shown[0]}"
        lines = "\n".join(f"  - {p}" for p in shown)
        return f"{self.title} ({len(shown)} problems):\n{lines}"

    def __reduce__(self) -> tuple[Any, ...]:
        # Keep the error picklable (Airflow and Prefect ship exceptions across processes).
        return (type(self), (list(self.problems),), {"title": self.title, "root": self.root})

    def __setstate__(self, state: dict[str, Any] | None) -> None:
        state = state or {}
        self.title = state.get("title", self.title)
        self.root = state.get("root", "")
        self.args = (self._render(),)


class ClusterConfigError(SpecError):
    """The cluster credentials of a configuration could not be loaded (a context,
    cluster or user the kubeconfig lacks, a failing exec plugin). The message has every
    secret of the configuration cut out."""


def join_problems(groups: Iterable[Sequence[FieldProblem]]) -> list[FieldProblem]:
    """Flatten groups of problems, dropping exact duplicates but keeping order."""
    seen: set[FieldProblem] = set()
    out: list[FieldProblem] = []
    for group in groups:
        for p in group:
            if p not in seen:
                seen.add(p)
                out.append(p)
    return out


# --------------------------------------------------------------- names and submits


class InvalidNameError(KFTrainerError, ValueError):
    """A job name given to a client method (or a task, component or command built on
    one) cannot name a TrainJob; raised before any request is made."""


class TrainJobNotFoundError(KFTrainerError, LookupError):
    """No TrainJob of that name in the namespace."""


class SpecConflictError(KFTrainerError):
    """A TrainJob of the same name exists with a different spec: adopting it would run
    something other than what was asked."""


class SubmitError(KFTrainerError):
    """The API refused the TrainJob (its message names the fields)."""


class BackendConfigRejectedError(SubmitError, ValueError):
    """The backend cannot run any job as it is configured (the container backend with no
    image or no engine that answers): the fix is in the backend configuration, not in
    the job. A ``ValueError``: bad input, nothing was submitted."""


# ------------------------------------------------------------------ failure classes


class FailureClass(str, Enum):
    """The class of a failure (see the module's documentation)."""

    INFRASTRUCTURE = "infrastructure"
    CAPACITY = "capacity"
    CONFIGURATION = "configuration"
    USER_CODE = "user-code"
    UNKNOWN = "unknown"

    @property
    def retryable(self) -> bool:
        """Whether a plain retry may help (only infrastructure trouble, by default)."""
        return self is FailureClass.INFRASTRUCTURE


class ClassifiedFailure(KFTrainerError):
    """Base of the per-class marker types; ``failure_class`` says which."""

    failure_class: ClassVar[FailureClass] = FailureClass.UNKNOWN


class InfrastructureFailure(ClassifiedFailure):
    """The platform failed the job (eviction, preemption, node loss, registry or API
    server trouble): retrying is reasonable."""

    failure_class = FailureClass.INFRASTRUCTURE


class CapacityFailure(ClassifiedFailure):
    """The job does not fit (out of memory, deadline, unschedulable, not admitted)."""

    failure_class = FailureClass.CAPACITY


class ConfigurationFailure(ClassifiedFailure):
    """The job as written cannot run (missing image, bad runtime or spec)."""

    failure_class = FailureClass.CONFIGURATION


class UserCodeFailure(ClassifiedFailure):
    """The training code failed (a traceback, a non-zero exit)."""

    failure_class = FailureClass.USER_CODE


class StateDirNotFoundError(TrainJobNotFoundError, ConfigurationFailure):
    """A read on the local (or container) backend named a state directory that holds
    no jobs: it does not exist, or no job was ever submitted with it. Reading never
    creates a state directory (a mistyped one would otherwise answer "no jobs" and be
    left behind); only a submit does. A :class:`TrainJobNotFoundError` (no job can be
    found there), whose message names the directory; ``state_dir`` is the directory."""

    def __init__(self, message: str, state_dir: str = "") -> None:
        super().__init__(message)
        self.state_dir = state_dir


# ----------------------------------------------------------------- a job's outcome


class _JobProblem(KFTrainerError):
    """An error about one job: a message, the job as last seen, and the failure that
    explains it (its description follows the message)."""

    def __init__(
        self, message: str, job: _Job | None = None, failure: _Failure | None = None
    ) -> None:
        self.job = job
        self.failure = failure
        super().__init__(message if failure is None else f"{message}\n{failure.describe()}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.args[0].split("\n", 1)[0], self.job, self.failure))


class TrainJobFailedError(KFTrainerError):
    """The job failed; ``failure`` says why (reason, step, pod, exit code, log tail)."""

    def __init__(self, job: _Job | None, failure: _Failure) -> None:
        self.job = job
        self.failure = failure
        name = f"{job.namespace}/{job.name}" if job else "TrainJob"
        super().__init__(f"{name} failed: {failure.describe()}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.job, self.failure))

    @property
    def failure_class(self) -> FailureClass:
        """The failure's class (see :mod:`kf_trainer_core.cluster.failures`); the subclasses
        below carry it as a class attribute too, for exception-matching rules."""
        found: FailureClass = self.failure.failure_class
        return found


class TrainJobInfrastructureError(InfrastructureFailure, TrainJobFailedError):
    """The job failed for the platform's sake (eviction, preemption, node loss,
    registry trouble): a retry may succeed."""


class TrainJobCapacityError(CapacityFailure, TrainJobFailedError):
    """The job failed for want of capacity (out of memory, deadline)."""


class TrainJobConfigurationError(ConfigurationFailure, TrainJobFailedError):
    """The job failed because of how it is configured (image, runtime, secret)."""


class TrainJobUserCodeError(UserCodeFailure, TrainJobFailedError):
    """The training code failed (a traceback or a non-zero exit)."""


class TrainJobCreationFailedError(ConfigurationFailure, TrainJobFailedError):
    """The Trainer could not build the job's JobSet (a ``TrainJobResourcesCreationFailed``
    event): the job would stay pending forever."""


_FAILED_ERRORS: dict[FailureClass, type[TrainJobFailedError]] = {
    FailureClass.INFRASTRUCTURE: TrainJobInfrastructureError,
    FailureClass.CAPACITY: TrainJobCapacityError,
    FailureClass.CONFIGURATION: TrainJobConfigurationError,
    FailureClass.USER_CODE: TrainJobUserCodeError,
}


def failed_error(job: _Job | None, failure: _Failure) -> TrainJobFailedError:
    """The error for a failed job: the subclass of :class:`TrainJobFailedError` that
    matches the failure's class (all of them are ``TrainJobFailedError``)."""
    return _FAILED_ERRORS.get(failure.failure_class, TrainJobFailedError)(job, failure)


class TrainJobResultUnavailableError(KFTrainerError):
    """The job SUCCEEDED, but its function's return value cannot be read (no
    termination message, and node-0's log refused, gone or without the result line).

    Raised only where a caller needs the value (a decorated Airflow task, a Prefect
    ``trainjob_task``, a KFP function component); a wait, ``run`` and
    ``get_job_outputs`` return the finished job with ``result_missing`` instead. It is
    never a :class:`TrainJobFailedError`: the training did not fail, and a retry (which
    finds the finished job by its identity and trains nothing) only reads again.
    ``missing`` says why and what to do; the subclasses carry its failure class."""

    def __init__(self, job: _Job | None, missing: _Missing) -> None:
        self.job = job
        self.missing = missing
        super().__init__(missing.message)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.job, self.missing))

    @property
    def failure_class(self) -> FailureClass:
        """Infrastructure when a later read may work, else configuration."""
        found: FailureClass = self.missing.failure_class
        return found


class TrainJobResultUnreachableError(InfrastructureFailure, TrainJobResultUnavailableError):
    """node-0's log could not be read (refused, server error, timeout): a retry reads
    the finished job's result again and may get it; it does not train again."""


class TrainJobResultLostError(ConfigurationFailure, TrainJobResultUnavailableError):
    """The result is gone with node-0's pod, or its log no longer holds it: reading
    again will not bring it back. Keep results small (the termination message) or
    return a storage URI."""


def result_unavailable_error(job: _Job | None, missing: _Missing) -> TrainJobResultUnavailableError:
    """The error for a succeeded job whose result cannot be read, of the subclass that
    matches ``missing.failure_class``."""
    if missing.failure_class is FailureClass.INFRASTRUCTURE:
        return TrainJobResultUnreachableError(job, missing)
    return TrainJobResultLostError(job, missing)


class TrainJobTimeoutError(_JobProblem, TimeoutError):
    """The job did not reach the wanted state in time."""

    @property
    def failure_class(self) -> FailureClass:
        """What kept the job from getting there: the stuck pod's class, else unknown."""
        return self.failure.failure_class if self.failure else FailureClass.UNKNOWN


class TrainJobAdmissionTimeoutError(CapacityFailure, TrainJobTimeoutError):
    """Kueue did not admit the job in time (``admission_timeout``). ``queue`` says what
    the queue was waiting for (pending reason and message, position)."""

    def __init__(
        self,
        message: str,
        job: _Job | None = None,
        failure: _Failure | None = None,
        queue: _Queue | None = None,
    ) -> None:
        self.queue = queue
        super().__init__(message, job, failure)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.args[0].split("\n", 1)[0], self.job, self.failure, self.queue))


class TrainJobDeletedError(KFTrainerError):
    """The job was deleted while being waited for."""


class StepFailedError(_JobProblem):
    """The step failed, or the job ended without the step reaching the wanted state.
    ``failure`` explains the job's failure when there is one."""
