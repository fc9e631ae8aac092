"""``@task.kubeflow_trainer``: a Python function as a Kubeflow Trainer TrainJob.

>>> @task.kubeflow_trainer(runtime="torch-distributed", num_nodes=2,
...                        resources_per_node={"gpu": 1}, packages_to_install=["numpy"])
... def train(data_uri: str, lr: float = 0.1):
...     import torch  # imports inside: only the function's source reaches the pods
...     ...
...     return {"loss": 0.12}
>>> metrics = train(prepare(), lr=0.05)   # XComArgs in, the function's return value out

The function becomes a ``CustomTrainer`` (its source is captured when the DAG is
parsed, so a closure or a lambda fails there, with the reason); the call's arguments —
XComs and templates resolved — become its ``func_args`` and must be JSON; its return
value (JSON, at most 4 KiB through the termination message) is the task's XCom. The
task otherwise behaves as :class:`~kf_trainer_airflow.operators.trainjob.TrainJobOperator`
(idempotent retries, deferral, log streaming, cancellation on kill), whose arguments
the decorator also takes.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Mapping, Sequence
from datetime import date, datetime
from typing import TYPE_CHECKING, Any

from kf_trainer_airflow._compat import DecoratedOperator, known_context_keys, task_decorator_factory
from kf_trainer_airflow.operators.trainjob import TrainJobOperator

if TYPE_CHECKING:
    from airflow.sdk import Context

    from kf_trainer_airflow._compat import TaskDecorator
    from kf_trainer_core.tasks import JobOutputs


# The generated program calls the function with keyword arguments only.
_POSITIONAL = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.POSITIONAL_ONLY)


class _KubeflowTrainerDecoratedOperator(DecoratedOperator, TrainJobOperator):
    """The operator behind ``@task.kubeflow_trainer``."""

    custom_operator_name = "@task.kubeflow_trainer"
    template_fields: Sequence[str] = (
        "op_args",
        "op_kwargs",
        "runtime",
        "trainer",
        "initializer",
        "options",
        "job_name",
        "namespace",
        "dashboard_url",
    )
    # The function itself is never copied deeply (nor rendered).
    shallow_copy_attrs: Sequence[str] = ("python_callable",)

    def __init__(
        self,
        *,
        python_callable: Callable[..., Any],
        runtime: Any = None,
        num_nodes: int | None = None,
        resources_per_node: Mapping[str, Any] | None = None,
        packages_to_install: Sequence[str] | None = None,
        pip_index_urls: Sequence[str] | None = None,
        env: Mapping[str, Any] | None = None,
        image: str | None = None,
        num_proc_per_node: int | None = None,
        **kwargs: Any,
    ) -> None:
        settings: dict[str, Any] = {
            "num_nodes": num_nodes,
            "resources_per_node": dict(resources_per_node) if resources_per_node else None,
            "packages_to_install": list(packages_to_install) if packages_to_install else None,
            "env": dict(env) if env else None,
            "image": image,
            "num_proc_per_node": num_proc_per_node,
        }
        if pip_index_urls:
            settings["pip_index_urls"] = list(pip_index_urls)
        from kf_trainer_core.spec import CustomTrainer  # not at import: DAG files stay cheap

        trainer = CustomTrainer(
            python_callable, **{k: v for k, v in settings.items() if v is not None}
        )
        super().__init__(
            python_callable=python_callable, runtime=runtime, trainer=trainer, **kwargs
        )

    def execute(self, context: Context) -> Any:
        self.func_args = self.call_arguments(context)
        return super().execute(context)

    def call_arguments(self, context: Context) -> dict[str, Any]:
        """The call's arguments (rendered) as the function's keyword arguments, with
        the JSON-friendly context values (``ds``, ``run_id``...) it asks for."""
        name = self.python_callable.__name__
        signature = inspect.signature(self.python_callable)
        bound = signature.bind_partial(*self.op_args, **self.op_kwargs)
        arguments: dict[str, Any] = {}
        for param_name, value in bound.arguments.items():
            param = signature.parameters[param_name]
            if param.kind is inspect.Parameter.VAR_KEYWORD:
                arguments.update(value)
            elif param.kind in _POSITIONAL:
                raise TypeError(
                    f"`{name}` takes `{param_name}` positionally only; a TrainJob passes "
                    "keyword arguments. Fix: make it a normal parameter."
                )
            else:
                arguments[param_name] = value
        context_keys = known_context_keys()
        for param_name in signature.parameters:
            if param_name in context_keys and param_name not in arguments:
                arguments[param_name] = _context_value(name, param_name, context)
        try:
            json.dumps(arguments, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise TypeError(
                f"the arguments of `{name}` must be JSON to reach the pods ({exc}). Fix: pass "
                "str/int/float/bool/None, lists and dicts; turn dates and paths into strings."
            ) from None
        return arguments

    def task_result(self, outputs: JobOutputs) -> Any:
        """The decorated function's return value; a succeeded job whose return value
        cannot be read fails the task with
        :class:`~kf_trainer_core.errors.TrainJobResultUnavailableError` saying why (a
        retry finds the finished job and reads again; it does not train again)."""
        return outputs.require_result()


def _context_value(func: str, key: str, context: Context) -> Any:
    value = context.get(key)
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    raise TypeError(
        f"`{func}` asks for the Airflow context value `{key}` ({type(value).__name__}), which "
        "cannot reach the pods. Fix: pass what you need from it as an argument "
        "(e.g. a value pulled from XCom)."
    )


def kubeflow_trainer_task(
    python_callable: Callable[..., Any] | None = None,
    multiple_outputs: bool | None = None,
    **kwargs: Any,
) -> TaskDecorator:
    """Run the decorated function as a Kubeflow Trainer ``CustomTrainer`` TrainJob.

    Takes ``runtime``, ``num_nodes``, ``resources_per_node``, ``packages_to_install``,
    ``pip_index_urls``, ``env``, ``image``, ``num_proc_per_node`` for the trainer, and
    every :class:`~kf_trainer_airflow.operators.trainjob.TrainJobOperator` argument
    (``initializer``, ``options``, ``deferrable``, ``kubeflow_trainer_conn_id``...).

    :param python_callable: the training function.
    :param multiple_outputs: unroll a dict return value into one XCom per key.
    """
    return task_decorator_factory(
        python_callable=python_callable,
        multiple_outputs=multiple_outputs,
        decorated_operator_class=_KubeflowTrainerDecoratedOperator,
        **kwargs,
    )
