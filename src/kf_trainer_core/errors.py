"""Every public error of kf-trainer-suite, in one place to import them from (API failures
aside: they are :class:`~kf_trainer_core.k8s.errors.ApiError`, with the HTTP status).

Two layers define them, and this module names both:

- :mod:`kf_trainer_core.base.errors`, the errors every layer raises: the base class
  :class:`KFTrainerError`; a bad spec (:class:`SpecError`, one :class:`FieldProblem` a
  field, each naming the field and the fix, so that a bad DAG or flow fails at parse or
  submit time); a bad name, a missing job, a refused submit; and the failure-class
  markers :class:`InfrastructureFailure`, :class:`CapacityFailure`,
  :class:`ConfigurationFailure` and :class:`UserCodeFailure` (see
  :mod:`kf_trainer_core.cluster.failures`).
- :mod:`kf_trainer_core.cluster.errors`, the errors about one job's outcome (failed,
  result unavailable, timed out, deleted), which carry the job as the cluster reported
  it. They derive from the markers, so that exception-matching retry rules can tell
  them apart.

The failure classes' decisions are named here too, for the adapters' retry policies:
:func:`failure_class_of` (the class of any exception), :func:`should_retry` (the shared
retry decision), :data:`DEFAULT_RETRY_ON` and :data:`EXIT_CODES` (a class's process exit
code), from :mod:`kf_trainer_core.cluster.failures`.

Code inside the core imports from the module of its own layer (``docs/architecture.md``);
everyone else imports from here. Importing this module loads no pydantic model and no
Kubernetes client.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kf_trainer_core.base.errors import (
    BackendConfigRejectedError,
    CapacityFailure,
    ClassifiedFailure,
    ClusterConfigError,
    ConfigurationFailure,
    DeleteConflictError,
    DeleteRefusedError,
    FailureClass,
    FieldProblem,
    InfrastructureFailure,
    InvalidNameError,
    KFTrainerError,
    NamespaceNotFoundError,
    ResourcesBusyError,
    RuntimeNotFoundError,
    SpecConflictError,
    SpecError,
    StateDirNotFoundError,
    SubmitError,
    TrainJobNotFoundError,
    UserCodeFailure,
    WaitInterrupted,
    WorkerUnreachableError,
    join_problems,
)
from kf_trainer_core.base.lazy import lazy_names
from kf_trainer_core.cluster.errors import (
    StepFailedError,
    TrainJobAdmissionTimeoutError,
    TrainJobCapacityError,
    TrainJobConfigurationError,
    TrainJobCreationFailedError,
    TrainJobDeletedError,
    TrainJobFailedError,
    TrainJobInfrastructureError,
    TrainJobNotAdmissibleError,
    TrainJobResultLostError,
    TrainJobResultUnavailableError,
    TrainJobResultUnreachableError,
    TrainJobTimeoutError,
    TrainJobUserCodeError,
    failed_error,
    result_unavailable_error,
)

if TYPE_CHECKING:
    from kf_trainer_core.cluster.failures import (
        DEFAULT_RETRY_ON,
        EXIT_CODES,
        failure_class_of,
        should_retry,
    )

__all__ = [
    "DEFAULT_RETRY_ON",
    "EXIT_CODES",
    "BackendConfigRejectedError",
    "CapacityFailure",
    "ClassifiedFailure",
    "ClusterConfigError",
    "ConfigurationFailure",
    "DeleteConflictError",
    "DeleteRefusedError",
    "FailureClass",
    "FieldProblem",
    "InfrastructureFailure",
    "InvalidNameError",
    "KFTrainerError",
    "NamespaceNotFoundError",
    "ResourcesBusyError",
    "RuntimeNotFoundError",
    "SpecConflictError",
    "SpecError",
    "StateDirNotFoundError",
    "StepFailedError",
    "SubmitError",
    "TrainJobAdmissionTimeoutError",
    "TrainJobCapacityError",
    "TrainJobConfigurationError",
    "TrainJobCreationFailedError",
    "TrainJobDeletedError",
    "TrainJobFailedError",
    "TrainJobInfrastructureError",
    "TrainJobNotAdmissibleError",
    "TrainJobNotFoundError",
    "TrainJobResultLostError",
    "TrainJobResultUnavailableError",
    "TrainJobResultUnreachableError",
    "TrainJobTimeoutError",
    "TrainJobUserCodeError",
    "UserCodeFailure",
    "WaitInterrupted",
    "WorkerUnreachableError",
    "failed_error",
    "failure_class_of",
    "join_problems",
    "result_unavailable_error",
    "should_retry",
]

# The failure classes' decisions load on first use: DAG files import this module (retry
# rules name its errors), and the classifier's log readers are not theirs to pay for.
__getattr__, __dir__ = lazy_names(
    __name__,
    dict.fromkeys(
        ("DEFAULT_RETRY_ON", "EXIT_CODES", "failure_class_of", "should_retry"),
        "kf_trainer_core.cluster.failures",
    ),
    globals(),
)
