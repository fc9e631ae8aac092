"""A Python function as the template of TrainJobs: checked once when an adapter's
decorator wraps it, then one ``CustomTrainer`` spec per call, the call's arguments
becoming its ``func_args``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from kf_trainer_core.base.errors import SpecError
from kf_trainer_core.spec import (
    CustomTrainer,
    Initializer,
    RuntimeRef,
    TrainJobSpec,
    train_spec,
)

__all__ = ["TRAINER_SETTINGS", "FunctionTemplate"]

#: The ``CustomTrainer`` settings a decorator takes beside the function.
TRAINER_SETTINGS = (
    "num_nodes",
    "resources_per_node",
    "num_proc_per_node",
    "packages_to_install",
    "pip_index_urls",
    "env",
    "image",
)


class FunctionTemplate:
    """The job a decorated function runs, checked once at decoration time."""

    def __init__(
        self,
        fn: Callable[..., Any],
        runtime: str | RuntimeRef | None,
        trainer: Mapping[str, Any],
        initializer: Initializer | None,
        options: list[Any] | None,
    ) -> None:
        self.signature = inspect.signature(fn)
        for param in self.signature.parameters.values():
            if param.kind in (param.POSITIONAL_ONLY, param.VAR_POSITIONAL):
                raise SpecError.single(
                    f"func.{param.name}",
                    f"`{fn.__name__}` takes {param.name} positionally only; the pod calls "
                    "the function with keyword arguments.",
                    "make it an ordinary (or keyword-only) parameter.",
                )
        # Validates the function (self-contained, not async) and every trainer field now.
        self.trainer = CustomTrainer(fn, **dict(trainer))
        self.spec = train_spec(runtime, self.trainer, initializer, options)

    def spec_for(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> TrainJobSpec:
        """The spec for one call: the arguments become ``func_args``."""
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise SpecError.single(
                "func_args", f"the call does not match the function: {exc}.", "fix the call."
            ) from None
        func_args: dict[str, Any] = {}
        for key, value in bound.arguments.items():
            param = self.signature.parameters[key]
            if param.kind is param.VAR_KEYWORD:
                func_args.update(value)
            else:
                func_args[key] = value
        trainer = self.trainer.model_dump(mode="python")
        trainer["func_args"] = func_args or None
        return TrainJobSpec.parse(
            {**self.spec.model_dump(mode="python"), "trainer": CustomTrainer.parse(trainer)}
        )
