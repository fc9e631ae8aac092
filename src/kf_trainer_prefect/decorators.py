"""Turn a Python function into a Prefect task that runs it as a ``CustomTrainer``
TrainJob and returns what it returns.

>>> @trainjob_task(num_nodes=2, resources_per_node={"gpu": 1}, credentials="prod")
... def fine_tune(lr: float = 1e-4, epochs: int = 3) -> dict:
...     import torch                      # imports inside: only the source reaches the pods
...     ...
...     return {"loss": 0.12}
...
>>> @flow
... def nightly():
...     metrics = fine_tune(lr=3e-4)      # a TrainJob; its return value comes back here

The function is checked when it is decorated (a closure, lambda or async function is
refused with the reason), its arguments when the task is called (they must be JSON):
a mistake fails before anything is submitted. Calls with the same arguments in one flow
run share one job; pass different arguments (or a ``Labels`` option) for separate runs.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar, overload

from typing_extensions import ParamSpec

from kf_trainer_core.spec import Initializer, RuntimeRef
from kf_trainer_core.tasks import (
    TRAINER_SETTINGS,
    FunctionTemplate,
    check_finish_action,
    checks,
    unknown_arguments_error,
)
from kf_trainer_core.tasks.interruptions import CancelAction, check_action
from kf_trainer_core.tasks.sync_runner import sync_face
from kf_trainer_prefect import _engine
from kf_trainer_prefect._engine import RunOptions
from kf_trainer_prefect.credentials import CredentialsLike

if TYPE_CHECKING:
    from prefect import Task

P = ParamSpec("P")
R = TypeVar("R")

__all__ = ["atrainjob_task", "trainjob_task"]


@overload
def trainjob_task(fn: Callable[P, R], /) -> Task[P, R]: ...


@overload
def trainjob_task(
    fn: None = None,
    /,
    *,
    runtime: str | RuntimeRef | None = None,
    num_nodes: int | None = None,
    resources_per_node: Mapping[str, Any] | None = None,
    num_proc_per_node: int | None = None,
    packages_to_install: list[str] | None = None,
    pip_index_urls: list[str] | None = None,
    env: Mapping[str, Any] | None = None,
    image: str | None = None,
    initializer: Initializer | None = None,
    options: list[Any] | None = None,
    credentials: CredentialsLike | None = None,
    namespace: str | None = None,
    timeout: float | None = None,
    startup_timeout: float | None = None,
    stream_logs: bool = True,
    log_tail: int = 1000,
    on_cancel: CancelAction = "delete",
    artifacts: bool = True,
    fresh_after_failure: bool = True,
    on_finish: str = "keep",
    **task_options: Any,
) -> Callable[[Callable[P, R]], Task[P, R]]: ...


def trainjob_task(fn: Callable[..., Any] | None = None, /, **kwargs: Any) -> Any:
    """Make a Prefect task that runs ``fn`` as a ``CustomTrainer`` TrainJob (``fn`` on
    every node, with the call's arguments) and returns ``fn``'s return value.

    The trainer arguments are the SDK's ``CustomTrainer`` fields; ``credentials`` to
    ``fresh_after_failure`` are :func:`~kf_trainer_prefect.run_trainjob`'s; other
    keywords (``retries``, ``timeout_seconds``, ``tags``, ``name``...) go to
    :func:`prefect.task`. Use it bare (``@trainjob_task``) or with arguments (the
    overloads above list them).
    """
    return _decorator(fn, _Split(kwargs), asynchronous=False)


@overload
def atrainjob_task(fn: Callable[P, R], /) -> Task[P, Any]: ...


@overload
def atrainjob_task(
    fn: None = None, /, **kwargs: Any
) -> Callable[[Callable[P, R]], Task[P, Any]]: ...


def atrainjob_task(fn: Callable[..., Any] | None = None, /, **kwargs: Any) -> Any:
    """The async twin of :func:`trainjob_task`: the same arguments, an async task
    (``await fine_tune(lr=3e-4)`` in an async flow). The training function itself
    stays a plain ``def``: it runs in the pods, not in the event loop."""
    return _decorator(fn, _Split(kwargs), asynchronous=True)


def _decorator(fn: Callable[..., Any] | None, split: _Split, *, asynchronous: bool) -> Any:
    def decorate(func: Callable[..., Any]) -> Any:
        from prefect import task

        # The function's job, checked at decoration (the core's, shared by any adapter).
        template = FunctionTemplate(
            func, split.runtime, split.trainer, split.initializer, split.options
        )

        async def arun(*args: Any, **kwargs: Any) -> Any:
            spec = template.spec_for(args, kwargs)
            outputs = await _engine.run(spec, split.credentials, split.run_options)
            # The flow gets the function's return value: one that cannot be read is an
            # error saying why, never a silent None (the job itself succeeded).
            return outputs.require_result()

        run = arun if asynchronous else sync_face(arun, func.__name__)
        # The task shows (and binds calls against) the training function's signature,
        # name and docstring; Prefect still sees `run` as sync or async by its code.
        functools.update_wrapper(run, func)
        from prefect.cache_policies import NO_CACHE

        return task(run, **{"name": func.__name__, "cache_policy": NO_CACHE, **split.task_options})

    return decorate if fn is None else decorate(fn)


class _Split:
    """:func:`trainjob_task`'s keyword arguments sorted by where they go."""

    _TRAINER = TRAINER_SETTINGS
    _RUN = (
        "namespace",
        "timeout",
        "startup_timeout",
        "stream_logs",
        "log_tail",
        "on_cancel",
        "artifacts",
        "fresh_after_failure",
        "on_finish",
    )

    def __init__(self, kwargs: dict[str, Any]) -> None:
        rest = dict(kwargs)
        self.runtime: str | RuntimeRef | None = rest.pop("runtime", None)
        self.initializer: Initializer | None = rest.pop("initializer", None)
        self.options: list[Any] | None = rest.pop("options", None)
        self.credentials: CredentialsLike | None = rest.pop("credentials", None)
        trainer = {k: rest.pop(k) for k in self._TRAINER if k in rest}
        self.trainer = {
            k: dict(v) if isinstance(v, Mapping) else v for k, v in trainer.items() if v is not None
        }
        run = {k: rest.pop(k) for k in self._RUN if k in rest}
        if "on_cancel" in run:
            check_action(run["on_cancel"])
        if "on_finish" in run:
            check_finish_action(run["on_finish"])
        if run.get("namespace") is not None:
            checks.check_namespace(run["namespace"])  # at decoration, not in the flow run
        checks.check_seconds(timeout=run.get("timeout"), startup_timeout=run.get("startup_timeout"))
        self.run_options = RunOptions(**run)
        self.task_options = rest
        _check_task_options(rest)


_OWN_ARGUMENTS = (
    "runtime",
    "initializer",
    "options",
    "credentials",
    *_Split._TRAINER,
    *_Split._RUN,
)


def _check_task_options(options: Mapping[str, Any]) -> None:
    """What is not ours goes to ``prefect.task``: a misspelt argument (``num_node``)
    fails here, at decoration, with the spec's "did you mean" suggestion."""
    from prefect import task

    accepted = [p for p in inspect.signature(task).parameters if not p.startswith("_")]
    unknown = [k for k in options if k not in accepted]
    if unknown:
        raise unknown_arguments_error(unknown, [*_OWN_ARGUMENTS, *accepted], where="trainjob_task")
