"""The errors every layer raises: the base class, a spec's field problems, names and
submits, and the failure-class markers. Import them from :mod:`kf_trainer_core.errors`,
the public module, which adds the errors about a job's outcome
(:mod:`kf_trainer_core.cluster.errors`: they carry the job as the cluster reported it).

Every error a user can cause carries the field it is about and the fix, so that a bad
DAG or flow fails at parse or submit time with a message that says what to change. The
failure-class markers (:class:`InfrastructureFailure`, :class:`CapacityFailure`,
:class:`ConfigurationFailure`, :class:`UserCodeFailure`; see
:mod:`kf_trainer_core.cluster.failures`) let exception-matching retry rules tell a job's
failures apart.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, ClassVar


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


class RuntimeNotFoundError(TrainJobNotFoundError):
    """No runtime of that name and kind: the message names the nearest installed name,
    or the other kind when a runtime of that name has it, and the fix. A
    :class:`TrainJobNotFoundError` (what a missing runtime raised before it had a class
    of its own)."""


class NamespaceNotFoundError(TrainJobNotFoundError):
    """The namespace does not exist on the cluster (a real API server lists an empty
    collection there, which would read as "no jobs"). ``namespace`` names it."""

    def __init__(self, message: str, namespace: str = "") -> None:
        super().__init__(message)
        self.namespace = namespace


class WaitInterrupted(KeyboardInterrupt):
    """Ctrl-C while a client waited on a job it had submitted (``run``): only the wait
    stopped, the TrainJob keeps running. A ``KeyboardInterrupt``, so a program stops as
    it did (and ``except Exception`` does not swallow it); its message names the job
    and how to stop it or follow it again. ``name`` and ``namespace`` name the job."""

    def __init__(self, message: str, name: str = "", namespace: str = "") -> None:
        super().__init__(message)
        self.name = name
        self.namespace = namespace


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


#: The cause reason of a 422 for a job that fits the machine but not what other jobs
#: leave of it now (the local backend's GPUs, ``on_missing_resources="fail"``).
RESOURCES_BUSY_REASON = "ResourcesHeldByOtherJobs"


class ResourcesBusyError(SubmitError, CapacityFailure):
    """The backend refused the TrainJob because other jobs hold what it asks for now:
    capacity, not configuration — the same job may fit once they end, so an
    orchestrator's retries (not its fail-fast) decide."""


class ConfigurationFailure(ClassifiedFailure):
    """The job as written cannot run (missing image, bad runtime or spec)."""

    failure_class = FailureClass.CONFIGURATION


class UserCodeFailure(ClassifiedFailure):
    """The training code failed (a traceback, a non-zero exit)."""

    failure_class = FailureClass.USER_CODE


class DeleteRefusedError(ConfigurationFailure):
    """The API server refused to delete a TrainJob (403: the credentials lack the
    ``delete`` verb, or an admission policy says no). Asked before anything changed,
    so the job is as it was; where the refusal came only after the job was suspended,
    the suspension was undone (``restored``), or the message says how to undo it.
    ``name``/``namespace`` name the job."""

    def __init__(
        self, message: str, *, namespace: str = "", name: str = "", restored: bool = True
    ) -> None:
        super().__init__(message)
        self.namespace = namespace
        self.name = name
        self.restored = restored


class DeleteConflictError(InfrastructureFailure):
    """A delete gave up on a TrainJob that changed between each of its reads and the
    delete (each delete is made under a precondition on the version read, so that what
    was checked of the job is what goes): another controller keeps writing it. Nothing
    was deleted and nothing else changed; trying again is reasonable. ``name`` and
    ``namespace`` name the job."""

    def __init__(self, message: str, *, namespace: str = "", name: str = "") -> None:
        super().__init__(message)
        self.namespace = namespace
        self.name = name


class WorkerUnreachableError(ConfigurationFailure):
    """A MultiKueue job's worker cluster cannot be reached from here, so what only it
    holds (the job's pods and their logs) cannot be read; the message names the worker,
    why, and the fix (a ``multikueue_workers`` entry, or RBAC to grant). It never
    quotes the worker's credentials."""


class StateDirNotFoundError(TrainJobNotFoundError, ConfigurationFailure):
    """A read on the local (or container) backend named a state directory that holds
    no jobs: it does not exist, or no job was ever submitted with it. Reading never
    creates a state directory (a mistyped one would otherwise answer "no jobs" and be
    left behind); only a submit does. A :class:`TrainJobNotFoundError` (no job can be
    found there), whose message names the directory; ``state_dir`` is the directory."""

    def __init__(self, message: str, state_dir: str = "") -> None:
        super().__init__(message)
        self.state_dir = state_dir
