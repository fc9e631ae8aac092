"""The Airflow names this provider uses, wherever the running Airflow 3 keeps them.

Airflow 3.0 to 3.3 moved classes into the Task SDK (``airflow.sdk``) release by
release. Each name is taken from the SDK first, then from Airflow's own compatibility
provider (``apache-airflow-providers-common-compat``, a dependency of Airflow 3), which
knows where older releases keep it. Type checkers read the SDK's names.

Two features have a behavioural fallback:

- ``ResumableJobMixin`` (``durable=``) and the task state store arrived in 3.3. Below,
  the stand-in submits on every try — still safe here, because the core finds a task's
  job again by its identity labels.
- ``BaseTrigger.on_kill`` arrived in 3.3 (see :mod:`kf_trainer_airflow.triggers.trainjob`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from kf_trainer_core.tasks import shown

_SDK = ("airflow.sdk", "airflow.providers.common.compat.sdk")
_EXCEPTIONS = ("airflow.sdk.exceptions", "airflow.providers.common.compat.sdk")
_DECORATORS = ("airflow.sdk.bases.decorator", "airflow.providers.common.compat.sdk")


def _first(name: str, *modules: str) -> Any:
    """``name`` from the first of ``modules`` that has it."""
    for module in modules:
        try:
            return getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):
            continue
    raise ImportError(f"{name} is in none of {', '.join(modules)}: is Airflow >= 3.0 installed?")


if TYPE_CHECKING:
    from airflow.sdk import (
        BaseHook,
        BaseOperator,
        BaseOperatorLink,
        BaseSensorOperator,
        BaseXCom,
        Connection,
        PokeReturnValue,
        ResumableJobMixin,
        conf,
    )
    from airflow.sdk.bases.decorator import (
        DecoratedOperator,
        TaskDecorator,
        task_decorator_factory,
    )
    from airflow.sdk.exceptions import AirflowException, AirflowNotFoundException, TaskDeferred
else:

    def __getattr__(name: str) -> Any:
        """Each name is resolved on first use and then kept (PEP 562): ``airflow.sdk``
        loads its classes lazily, and a DAG file that imports the sensor should not pay
        for the decorator bases, the XCom backend or the hook machinery. Lazy only to
        defer the cost: every dependent still names what it uses at its top."""
        where = _WHERE.get(name)
        if where is None:
            raise AttributeError(f"module {shown(__name__)} has no attribute {shown(name)}")
        try:
            value = _first(name, *where)
        except ImportError:
            if name != "ResumableJobMixin":
                raise
            value = _ResumableStandIn  # Airflow < 3.3 with an older compat provider
        globals()[name] = value
        return value


#: Where each name is looked for, in order.
_WHERE: dict[str, tuple[str, ...]] = {
    "BaseHook": _SDK,
    "BaseOperator": _SDK,
    "BaseOperatorLink": _SDK,
    "BaseSensorOperator": _SDK,
    "BaseXCom": (*_SDK, "airflow.models.xcom"),
    "Connection": _SDK,
    "PokeReturnValue": _SDK,
    "conf": _SDK,
    "ResumableJobMixin": _SDK,
    "DecoratedOperator": _DECORATORS,
    "TaskDecorator": _DECORATORS,
    "task_decorator_factory": _DECORATORS,
    "AirflowException": _EXCEPTIONS,
    "AirflowNotFoundException": _EXCEPTIONS,
    "TaskDeferred": _EXCEPTIONS,
}


class _ResumableStandIn:
    """Airflow < 3.3: submit, wait, read — on every try."""

    external_id_key = "remote_job_id"

    def __init__(self, *, durable: bool = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.durable = False

    def execute_resumable(self, context: Any) -> Any:
        external_id = self.submit_job(context)  # type: ignore[attr-defined]
        self.poll_until_complete(external_id, context)  # type: ignore[attr-defined]
        return self.get_job_result(external_id, context)  # type: ignore[attr-defined]


def known_context_keys() -> frozenset[str]:
    """The names of the task context's values (what a TaskFlow function may ask for)."""
    keys = _first("KNOWN_CONTEXT_KEYS", "airflow.sdk.definitions.context", "airflow.utils.context")
    return frozenset(keys)


__all__ = [
    "AirflowException",
    "AirflowNotFoundException",
    "BaseHook",
    "BaseOperator",
    "BaseOperatorLink",
    "BaseSensorOperator",
    "BaseXCom",
    "Connection",
    "DecoratedOperator",
    "PokeReturnValue",
    "ResumableJobMixin",
    "TaskDecorator",
    "TaskDeferred",
    "conf",
    "known_context_keys",
    "task_decorator_factory",
]
