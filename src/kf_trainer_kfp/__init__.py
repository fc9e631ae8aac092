"""Kubeflow Trainer TrainJobs as steps of Kubeflow Pipelines v2 pipelines.

>>> from kfp import dsl
>>> from kf_trainer_kfp import trainjob_component
>>>
>>> def train(lr: float = 0.1, epochs: int = 3) -> dict:
...     import torch
...     ...
...     return {"model_uri": "s3://models/run-1", "loss": 0.12}
>>>
>>> train_op = trainjob_component(train, num_nodes=2, resources_per_node={"gpu": 1})
>>>
>>> @dsl.pipeline
... def pipeline(lr: float = 0.05):
...     trained = train_op(lr=lr)
...     evaluate(model=trained.outputs["model"], metrics=trained.outputs["metrics"])

Components: :func:`trainjob_component` (a training function), :func:`trainjob_launcher`
(any spec, as JSON inputs), :func:`step_components` (submit / wait for a step /
outputs / cancel as separate nodes), :func:`prune_component` (a maintenance step that
deletes finished TrainJobs; schedule its pipeline), and ready-made instances of those
with the default :class:`ComponentImage`: ``launch_trainjob``, ``submit_trainjob``,
``wait_for_trainjob_step``, ``trainjob_outputs``, ``cancel_trainjob``.

Importing this package imports neither ``kfp`` nor a Kubernetes library (``kfp``
imports its client, and with it ``kubernetes``): names are resolved on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from kf_trainer_core.tasks import require, shown

if TYPE_CHECKING:
    from kf_trainer_kfp.components import (
        StepComponents,
        prune_component,
        step_components,
        trainjob_component,
        trainjob_launcher,
    )
    from kf_trainer_kfp.image import ComponentImage

__all__ = [
    "ComponentImage",
    "StepComponents",
    "cancel_trainjob",
    "launch_trainjob",
    "prune_component",
    "step_components",
    "submit_trainjob",
    "trainjob_component",
    "trainjob_launcher",
    "trainjob_outputs",
    "wait_for_trainjob_step",
]

_FROM = {
    "ComponentImage": "kf_trainer_kfp.image",
    "StepComponents": "kf_trainer_kfp.components",
    "prune_component": "kf_trainer_kfp.components",
    "step_components": "kf_trainer_kfp.components",
    "trainjob_component": "kf_trainer_kfp.components",
    "trainjob_launcher": "kf_trainer_kfp.components",
}
_STEP_DEFAULTS = {
    "submit_trainjob": "submit",
    "wait_for_trainjob_step": "wait_for_step",
    "trainjob_outputs": "outputs",
    "cancel_trainjob": "cancel",
}
_made: dict[str, Any] = {}


def __getattr__(name: str) -> Any:
    if name in _FROM or name == "launch_trainjob" or name in _STEP_DEFAULTS:
        # The package imports without kfp (its names resolve on first use): the first
        # use says which extra installs it.
        require("kfp", "kfp", "kf_trainer_kfp", "Kubeflow Pipelines (kfp)")
    if name in _FROM:
        return getattr(importlib.import_module(_FROM[name]), name)
    if name == "launch_trainjob":
        if name not in _made:
            from kf_trainer_kfp.components import trainjob_launcher

            _made[name] = trainjob_launcher()
        return _made[name]
    if name in _STEP_DEFAULTS:
        if "steps" not in _made:
            from kf_trainer_kfp.components import step_components

            _made["steps"] = step_components()
        return getattr(_made["steps"], _STEP_DEFAULTS[name])
    raise AttributeError(f"module {shown(__name__)} has no attribute {shown(name)}")


def __dir__() -> list[str]:
    return sorted(__all__)
