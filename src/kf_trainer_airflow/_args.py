"""Checks of the operator's, sensor's and decorator's arguments, made when the DAG is
parsed: a bad value fails there, naming the argument and the fix, before anything is
submitted.

Also the default of ``resume_grace``, the defence against Airflow's stale defer-exit
race (see :data:`DEFAULT_RESUME_GRACE`). Nothing here imports Airflow or a Kubernetes
client.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any

# Durations (seconds or a timedelta) are checked by the core's one rule.
from kf_trainer_core.tasks import seconds as seconds

# The core's "did you mean" of every unknown field or argument.
from kf_trainer_core.tasks import shown, unknown_arguments_error

#: Seconds after a task defers before its trigger may report the job's end.
#:
#: Airflow 3.3 fails a deferred task whose trigger fires before the scheduler has
#: processed the executor's "success" event of the worker process that deferred
#: (apache/airflow#71580, #72716): once the resumed try is ``queued`` or ``running``,
#: that stale event reads as "the task finished but the database says otherwise" and
#: the task is failed. The event is only safe while the task is still ``deferred``
#: (or ``scheduled``). It arrives once the worker's supervisor has seen its child
#: exit — within ``[workers] min_heartbeat_interval`` (5 s by default) — and the
#: scheduler's next loop has read it (about a second); nothing observable from a
#: trigger tells that it has been processed. So a job that ends sooner than this after
#: the deferral is reported at this mark instead: 10 s covers the default interval
#: twice over. Jobs that end later are reported at once.
DEFAULT_RESUME_GRACE = 10.0


def log_step(value: Any) -> str:
    """A step whose log can be shown: ``node-<i>``, ``dataset-initializer`` or
    ``model-initializer``."""
    if value == "node-0":
        return "node-0"
    # The core's step grammar (imported only for non-default steps: parsing stays cheap).
    from kf_trainer_core.tasks.step_waits import StepGoal

    if not isinstance(value, str):
        raise ValueError(
            f"log_step={shown(value)} is not a step name. Fix: use node-0, node-<i>, "
            "dataset-initializer or model-initializer."
        )
    try:
        StepGoal.of(value)
    except ValueError as exc:
        raise ValueError(f"log_step={shown(value)}: {exc}") from None
    return value


def options_list(value: Any) -> None:
    """``options`` is a list (or tuple) of options, not one option."""
    if value is None or isinstance(value, (list, tuple)):
        return
    if isinstance(value, str) and "{{" in value:
        return  # a template that renders to a list
    kind = type(value).__name__
    if hasattr(value, "resolve") or kind.endswith("XComArg"):
        return  # resolved when the task runs
    shown = kind if not isinstance(value, Mapping) else "a mapping"
    raise ValueError(
        f"options is {shown}, not a list of options. Fix: wrap it in a list, e.g. "
        f"options=[{kind}(...)]."
    )


def job_name(value: Any) -> None:
    """A fixed job name is a valid TrainJob name (pattern and length), unless it is a
    template."""
    if value is None:
        return
    if isinstance(value, (bool, int, float, bytes)):
        raise ValueError(f"job_name={shown(value)} is not a string. Fix: give the TrainJob's name.")
    if not isinstance(value, str):
        return  # an XComArg or another value Airflow resolves when the task runs
    if "{{" in value or "{%" in value:
        return
    from kf_trainer_core.tasks import name_problem

    problem = name_problem(value)
    if problem:
        raise ValueError(f"job_name: {problem}")


@lru_cache(maxsize=64)
def _accepted(cls: type) -> frozenset[str]:
    names: set[str] = set()
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None or klass is object:
            continue
        try:
            params = inspect.signature(init).parameters.values()
        except (TypeError, ValueError):  # pragma: no cover - builtins without signatures
            continue
        names.update(
            p.name
            for p in params
            if p.name != "self" and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
        )
    return frozenset(names)


def unknown_arguments(cls: type, given: Iterable[str], what: str) -> None:
    """Fail on an argument no ``__init__`` of ``cls`` (and its bases) takes, with the
    spec's "did you mean" suggestion — before Airflow's own check, which names no fix."""
    accepted = _accepted(cls)
    unknown = [name for name in given if name not in accepted]
    if unknown:
        raise unknown_arguments_error(unknown, accepted, where=what)


def operator_choices(
    on_kill_action: Any, on_finish_action: Any, log_tail: Any, fail_fast_on: Any
) -> None:
    """The operator's enumerated arguments: each one of its accepted values (the
    actions' checks are the core's, as every adapter's)."""
    from kf_trainer_core.tasks import check_finish_action
    from kf_trainer_core.tasks.interruptions import check_action

    check_action(on_kill_action, "on_kill_action")
    check_finish_action(on_finish_action, "on_finish_action")
    if isinstance(log_tail, bool) or not isinstance(log_tail, int) or log_tail < 0:
        raise ValueError(f"log_tail={shown(log_tail)}. Fix: give 0 or more lines.")
    if isinstance(fail_fast_on, str) or not set(fail_fast_on) <= {"configuration"}:
        raise ValueError(
            f"fail_fast_on={shown(fail_fast_on)}. Fix: use ('configuration',) (the default) "
            "or () — other failure classes are a retry_policy's to decide "
            "(kf_trainer_airflow.failures.TrainJobRetryPolicy)."
        )


def dashboard_url(value: str | None) -> None:
    """The operator's link template, checked by the core's rule once Airflow has rendered
    it (it is a template field): an http(s) URL with ``{namespace}`` and ``{name}``."""
    if not value:
        return
    # Imported when a task runs, not when the DAG is parsed: the backend fields pull in
    # the configuration models.
    from kf_trainer_core.tasks.backend_fields import check_dashboard_url

    try:
        check_dashboard_url(value)
    except ValueError as exc:
        raise ValueError(f"{exc} (the operator's dashboard_url argument)") from None
