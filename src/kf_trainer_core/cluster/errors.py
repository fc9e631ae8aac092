"""The errors about one job's outcome: it failed, its result cannot be read, it did not
get where it was waited for in time, it was deleted. Each carries the job as the
cluster last reported it (:class:`~kf_trainer_core.cluster.status.TrainJob`) and what
explains the error (a :class:`~kf_trainer_core.cluster.status.Failure`, a
:class:`~kf_trainer_core.cluster.results.ResultMissing`, a
:class:`~kf_trainer_core.cluster.kueue.QueueStatus`), so they live in the layer that
reads those. Import them from :mod:`kf_trainer_core.errors`, the public module.

They derive from the failure-class markers of :mod:`kf_trainer_core.base.errors`
(:class:`InfrastructureFailure`, :class:`CapacityFailure`, ...), so that
exception-matching retry rules can tell them apart.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kf_trainer_core.base.errors import (
    CapacityFailure,
    ConfigurationFailure,
    FailureClass,
    InfrastructureFailure,
    KFTrainerError,
    UserCodeFailure,
)

if TYPE_CHECKING:
    # Types only: status.py raises these errors (``JobOutputs.require_result``), and the
    # public ``kf_trainer_core.errors`` stays cheap to import (no pydantic models).
    from kf_trainer_core.cluster.kueue import QueueStatus
    from kf_trainer_core.cluster.results import ResultMissing
    from kf_trainer_core.cluster.status import Failure, TrainJob
    from kf_trainer_core.cluster.waiting import Waiting


class _JobProblem(KFTrainerError):
    """An error about one job: a message, the job as last seen, and the failure that
    explains it (its description follows the message)."""

    def __init__(
        self, message: str, job: TrainJob | None = None, failure: Failure | None = None
    ) -> None:
        self.job = job
        self.failure = failure
        super().__init__(message if failure is None else f"{message}\n{failure.describe()}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.args[0].split("\n", 1)[0], self.job, self.failure))


class TrainJobFailedError(KFTrainerError):
    """The job failed; ``failure`` says why (reason, step, pod, exit code, log tail)."""

    def __init__(self, job: TrainJob | None, failure: Failure) -> None:
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
        return self.failure.failure_class


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


class TrainJobNotAdmissibleError(TrainJobCapacityError):
    """Kueue can never admit the job as its queue stands: it asks for more than the
    ClusterQueue's maximum capacity (``current podset request (16) > maximum capacity
    (8)``), or no flavor can ever fit it. Raised by a wait at once, whatever its
    timeouts, instead of waiting for quota that will never free. The job is still
    queued (suspended), not failed: ``queue`` says what Kueue said; the failure names
    the request, the maximum and the fix. A :class:`TrainJobCapacityError` (class
    ``capacity``: a retry will not help)."""

    def __init__(self, job: TrainJob | None, failure: Failure) -> None:
        super().__init__(job, failure)
        name = f"{job.namespace}/{job.name}" if job else "TrainJob"
        self.args = (f"{name} can never be admitted by Kueue: {failure.describe()}",)

    @property
    def queue(self) -> QueueStatus | None:
        """The job's queue status when the wait ended."""
        return self.job.queue if self.job is not None else None


_FAILED_ERRORS: dict[FailureClass, type[TrainJobFailedError]] = {
    FailureClass.INFRASTRUCTURE: TrainJobInfrastructureError,
    FailureClass.CAPACITY: TrainJobCapacityError,
    FailureClass.CONFIGURATION: TrainJobConfigurationError,
    FailureClass.USER_CODE: TrainJobUserCodeError,
}


def failed_error(job: TrainJob | None, failure: Failure) -> TrainJobFailedError:
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

    def __init__(self, job: TrainJob | None, missing: ResultMissing) -> None:
        self.job = job
        self.missing = missing
        super().__init__(missing.message)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.job, self.missing))

    @property
    def failure_class(self) -> FailureClass:
        """Infrastructure when a later read may work, else configuration."""
        return self.missing.failure_class


class TrainJobResultUnreachableError(InfrastructureFailure, TrainJobResultUnavailableError):
    """node-0's log could not be read (refused, server error, timeout): a retry reads
    the finished job's result again and may get it; it does not train again."""


class TrainJobResultLostError(ConfigurationFailure, TrainJobResultUnavailableError):
    """The result is gone with node-0's pod, or its log no longer holds it: reading
    again will not bring it back. Keep results small (the termination message) or
    return a storage URI."""


def result_unavailable_error(
    job: TrainJob | None, missing: ResultMissing
) -> TrainJobResultUnavailableError:
    """The error for a succeeded job whose result cannot be read, of the subclass that
    matches ``missing.failure_class``."""
    if missing.failure_class is FailureClass.INFRASTRUCTURE:
        return TrainJobResultUnreachableError(job, missing)
    return TrainJobResultLostError(job, missing)


class TrainJobTimeoutError(_JobProblem, TimeoutError):
    """The job did not reach the wanted state in time. Where the wait explains itself
    (``lines``, see :func:`kf_trainer_core.cluster.waiting.timeout_lines`), the message
    says what holds the job up (``waiting``: restarting, pending), the fix of its
    failure class (``fix``) and what the wait leaves behind; ``failure`` keeps the
    stuck pod's details for the adapters."""

    def __init__(
        self,
        message: str,
        job: TrainJob | None = None,
        failure: Failure | None = None,
        *,
        lines: list[str] | None = None,
        waiting: Waiting | None = None,
        fix: str | None = None,
    ) -> None:
        self.waiting = waiting
        self.fix = fix
        self.lines = list(lines) if lines else None
        if self.lines is None:
            super().__init__(message, job, failure)
            return
        self.job, self.failure = job, failure
        KFTrainerError.__init__(self, "\n".join(self.lines))

    def _args(self, message: str) -> tuple[Any, ...]:
        """The positional arguments that make this error again with ``message``."""
        return (message, self.job, self.failure)

    def __reduce__(self) -> tuple[Any, ...]:
        if self.lines is None:
            return (type(self), self._args(self.args[0].split("\n", 1)[0]))
        kwargs = {"lines": self.lines, "waiting": self.waiting, "fix": self.fix}
        return (_rebuild, (type(self), self._args(self.lines[0]), kwargs))

    def settled(self, what: str) -> TrainJobTimeoutError:
        """The same error whose last line, what the wait left behind, says instead what
        the task then did to the job (``what``: "the task deleted TrainJob ns/x")."""
        if not self.lines or not self.lines[-1].startswith("left behind:"):
            return self
        lines = [*self.lines[:-1], what]
        return type(self)(
            *self._args(self.lines[0]), lines=lines, waiting=self.waiting, fix=self.fix
        )

    @property
    def failure_class(self) -> FailureClass:
        """What kept the job from getting there: the class of what holds it up (a
        restarting step, a pod that cannot start), else unknown."""
        if self.waiting is not None:
            return self.waiting.failure_class
        return self.failure.failure_class if self.failure else FailureClass.UNKNOWN


class TrainJobAdmissionTimeoutError(CapacityFailure, TrainJobTimeoutError):
    """Kueue did not admit the job in time (``admission_timeout``). ``queue`` says what
    the queue was waiting for (pending reason and message, position)."""

    def __init__(
        self,
        message: str,
        job: TrainJob | None = None,
        failure: Failure | None = None,
        queue: QueueStatus | None = None,
        **explained: Any,
    ) -> None:
        self.queue = queue
        super().__init__(message, job, failure, **explained)

    def _args(self, message: str) -> tuple[Any, ...]:
        return (*super()._args(message), self.queue)


class TrainJobDeletedError(KFTrainerError):
    """The job was deleted while being waited for."""


class StepFailedError(_JobProblem):
    """The step failed, or the job ended without the step reaching the wanted state.
    ``failure`` explains the job's failure when there is one."""


def _rebuild(cls: type[Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """An error of ``cls`` made again from its arguments (pickling)."""
    return cls(*args, **kwargs)
