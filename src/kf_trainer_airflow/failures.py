"""Failure classes for Airflow: exception types a retry policy can match, a ready
policy, and fail-fast for configuration errors.

A failed TrainJob task raises a subclass of
:class:`~kf_trainer_airflow.operators.trainjob.TrainJobFailedException` per failure class
(see :mod:`kf_trainer_core.cluster.failures`), so Airflow 3.3's ``ExceptionRetryPolicy`` can
match them by type — or use :class:`TrainJobRetryPolicy`, which also classifies API
errors. By default a *configuration* failure is raised as
:class:`TrainJobConfigurationFailFast`, an ``AirflowFailException``: the task fails
without spending its retries on a job that cannot run (operator argument
``fail_fast_on=()`` turns that off).

This module imports no Kubernetes client: the operator module stays cheap to import.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from datetime import timedelta
from typing import Any

try:
    from airflow.sdk.exceptions import AirflowFailException
except ImportError:  # pragma: no cover - Airflow before the task SDK
    from airflow.exceptions import AirflowFailException  # type: ignore[no-redef]

# The operator module imports this one only when a task fails: no import cycle.
from kf_trainer_airflow.operators.trainjob import TrainJobFailedException
from kf_trainer_core.errors import (
    DEFAULT_RETRY_ON,
    CapacityFailure,
    ConfigurationFailure,
    FailureClass,
    InfrastructureFailure,
    UserCodeFailure,
    failure_class_of,
)

#: The classes the operators fail fast on by default.
DEFAULT_FAIL_FAST: tuple[str, ...] = (FailureClass.CONFIGURATION.value,)


class TrainJobInfrastructureException(InfrastructureFailure, TrainJobFailedException):
    """The TrainJob failed for the platform's sake (eviction, preemption, node loss,
    registry or API server trouble): a retry may succeed."""


class TrainJobCapacityException(CapacityFailure, TrainJobFailedException):
    """The TrainJob did not fit (out of memory, deadline, unschedulable, not admitted)."""


class TrainJobConfigurationException(ConfigurationFailure, TrainJobFailedException):
    """The TrainJob cannot run as configured (missing image, bad runtime, secret)."""


class TrainJobUserCodeException(UserCodeFailure, TrainJobFailedException):
    """The training code failed (a traceback, a non-zero exit)."""


class TrainJobConfigurationFailFast(TrainJobConfigurationException, AirflowFailException):
    """A configuration failure raised as ``AirflowFailException``: Airflow fails the
    task at once instead of retrying a job that cannot run."""


_EXCEPTION_TYPES: dict[FailureClass, type[TrainJobFailedException]] = {
    FailureClass.INFRASTRUCTURE: TrainJobInfrastructureException,
    FailureClass.CAPACITY: TrainJobCapacityException,
    FailureClass.CONFIGURATION: TrainJobConfigurationException,
    FailureClass.USER_CODE: TrainJobUserCodeException,
    FailureClass.UNKNOWN: TrainJobFailedException,
}


def failed_exception(
    message: str,
    *,
    job_name: str | None,
    namespace: str | None,
    failure: Mapping[str, Any] | None,
    failure_class: FailureClass | str | None = None,
    fail_fast_on: Collection[str] = DEFAULT_FAIL_FAST,
) -> TrainJobFailedException:
    """The exception for a failed task: the type of its failure class (from
    ``failure_class``, else ``failure["failure_class"]``), fail-fast when the class is
    in ``fail_fast_on``. The message gains a line naming the class."""
    raw = failure_class or (failure or {}).get("failure_class") or FailureClass.UNKNOWN
    try:
        klass = FailureClass(raw)
    except ValueError:
        klass = FailureClass.UNKNOWN
    cls = _EXCEPTION_TYPES[klass]
    if klass.value in set(fail_fast_on) and klass is FailureClass.CONFIGURATION:
        cls = TrainJobConfigurationFailFast
    if klass is not FailureClass.UNKNOWN and "failure class:" not in message:
        retry = "a retry may succeed" if klass.retryable else "a retry will not help"
        message = f"{message}\nfailure class: {klass.value} ({retry})"
    return cls(message, job_name=job_name, namespace=namespace, failure=failure)


def refused_exception(
    exc: BaseException, fail_fast_on: Collection[str] = DEFAULT_FAIL_FAST
) -> TrainJobFailedException | None:
    """What a submit's ``exc`` fails the task with: a configuration error raised before
    any job exists (a runtime the cluster lacks, a name another job holds, an API
    refusal: :func:`~kf_trainer_core.errors.failure_class_of`) fails fast as a job that
    cannot run does, when ``fail_fast_on`` says so; ``None``: ``exc`` is raised as it
    is (Airflow's retries, or a ``retry_policy``, decide)."""
    if failure_class_of(exc) is not FailureClass.CONFIGURATION:
        return None
    if FailureClass.CONFIGURATION.value not in set(fail_fast_on):
        return None
    return failed_exception(
        f"{type(exc).__name__}: {exc}",
        job_name=None,
        namespace=None,
        failure=None,
        failure_class=FailureClass.CONFIGURATION,
        fail_fast_on=fail_fast_on,
    )


def _retry_policy_base() -> type[Any]:
    try:
        from airflow.sdk.definitions.retry_policy import RetryPolicy
    except ImportError:  # Airflow before 3.3: no retry policies; the class still imports
        return object
    return RetryPolicy


class TrainJobRetryPolicy(_retry_policy_base()):  # type: ignore[misc]
    """A ready ``retry_policy`` (Airflow 3.3+): retry infrastructure failures, fail at
    once on configuration and user-code errors, leave the rest (capacity, unknown, other
    exceptions) to the task's usual retries.

    >>> TrainJobOperator(..., retries=3, retry_policy=TrainJobRetryPolicy())

    :param retry_on: classes to retry (within the task's ``retries``).
    :param fail_on: classes that fail the task without a retry.
    :param retry_delay: delay before a retry of ``retry_on`` (default: the task's).
    """

    def __init__(
        self,
        retry_on: Collection[FailureClass | str] = DEFAULT_RETRY_ON,
        fail_on: Collection[FailureClass | str] = (
            FailureClass.CONFIGURATION,
            FailureClass.USER_CODE,
        ),
        retry_delay: timedelta | None = None,
    ) -> None:
        self.retry_on = frozenset(FailureClass(c) for c in retry_on)
        self.fail_on = frozenset(FailureClass(c) for c in fail_on)
        self.retry_delay = retry_delay

    def evaluate(
        self,
        exception: BaseException,
        try_number: int,
        max_tries: int,
        context: Any = None,
    ) -> Any:
        from airflow.sdk.definitions.retry_policy import RetryDecision

        klass = failure_class_of(exception)
        if klass is None:
            return RetryDecision.default()
        if klass in self.retry_on:
            return RetryDecision.retry(
                self.retry_delay, reason=f"TrainJob failure class {klass.value}: retrying"
            )
        if klass in self.fail_on:
            return RetryDecision.fail(reason=f"TrainJob failure class {klass.value}: no retry")
        return RetryDecision.default()

    def serialize(self) -> dict[str, Any]:
        return {
            "__type": "TrainJobRetryPolicy",
            "retry_on": sorted(c.value for c in self.retry_on),
            "fail_on": sorted(c.value for c in self.fail_on),
            "retry_delay": self.retry_delay.total_seconds() if self.retry_delay else None,
        }

    @classmethod
    def deserialize(cls, data: dict[str, Any]) -> TrainJobRetryPolicy:
        delay = data.get("retry_delay")
        return cls(
            data.get("retry_on", ()),
            data.get("fail_on", ()),
            timedelta(seconds=delay) if delay is not None else None,
        )


def exception_retry_policy(retry_delay: timedelta | None = None) -> Any:
    """The same decisions as Airflow's own ``ExceptionRetryPolicy`` (rules by exception
    type, serialisable by dotted path): retry
    :class:`~kf_trainer_core.errors.InfrastructureFailure`, fail on
    :class:`~kf_trainer_core.errors.ConfigurationFailure` and
    :class:`~kf_trainer_core.errors.UserCodeFailure`."""
    from airflow.sdk.definitions.retry_policy import (
        ExceptionRetryPolicy,
        RetryAction,
        RetryRule,
    )

    return ExceptionRetryPolicy(
        rules=[
            RetryRule(
                exception="kf_trainer_core.errors.InfrastructureFailure",
                action=RetryAction.RETRY,
                retry_delay=retry_delay,
                reason="TrainJob infrastructure failure: retrying",
            ),
            RetryRule(
                exception=[
                    "kf_trainer_core.errors.ConfigurationFailure",
                    "kf_trainer_core.errors.UserCodeFailure",
                ],
                action=RetryAction.FAIL,
                reason="TrainJob configuration or user-code failure: no retry",
            ),
        ]
    )
