"""Retry conditions for Prefect tasks that run TrainJobs.

Prefect calls a task's ``retry_condition_fn(task, task_run, state)`` before each retry;
these decide from the failure's class (see :mod:`kf_trainer_core.cluster.failures`): a retry is
spent only on a failure a retry can fix.

>>> @task(retries=3, retry_condition_fn=retry_infrastructure_failures)
... def train(): return run_trainjob(...)

Exceptions that are not the suite's are left to Prefect's usual retries (``True``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kf_trainer_core.errors import FailureClass, failure_class_of, should_retry

__all__ = ["failure_class_of_state", "retry_infrastructure_failures", "retry_on_classes"]


def _exception(state: Any) -> BaseException | None:
    data = getattr(state, "data", None)
    if isinstance(data, BaseException):
        return data
    try:
        value = state.result(raise_on_failure=False)
    except Exception:  # a result that cannot be read: no class to decide on
        return None
    return value if isinstance(value, BaseException) else None


def failure_class_of_state(state: Any) -> FailureClass | None:
    """The failure class of a failed Prefect state (``None`` when it holds none)."""
    exc = _exception(state)
    return failure_class_of(exc) if exc is not None else None


def retry_infrastructure_failures(task: Any, task_run: Any, state: Any) -> bool:
    """Retry infrastructure failures (eviction, preemption, node loss, registry or API
    server trouble); not capacity, configuration or user-code failures."""
    exc = _exception(state)
    return True if exc is None else should_retry(exc)


def retry_on_classes(*classes: FailureClass | str) -> Callable[[Any, Any, Any], bool]:
    """A ``retry_condition_fn`` that retries the given classes, e.g.
    ``retry_on_classes("infrastructure", "capacity")``."""
    wanted = frozenset(FailureClass(c) for c in classes)

    # Prefect calls the condition only when it is a plain function: a closure, not an
    # object with __call__.
    def condition(task: Any, task_run: Any, state: Any) -> bool:
        exc = _exception(state)
        return True if exc is None else should_retry(exc, wanted)

    return condition
