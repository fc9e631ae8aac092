"""Airflow provider for Kubeflow Trainer v2: run a TrainJob as an Airflow task.

>>> from kf_trainer_airflow.operators.trainjob import TrainJobOperator
>>> from kf_trainer_airflow.sensors.trainjob import TrainJobSensor
>>> # and the TaskFlow decorator, registered by the provider: @task.kubeflow_trainer(...)

This package module stays empty of imports: Airflow loads
:mod:`kf_trainer_airflow.provider_info` while it initialises itself, and DAG files pay
for every import. The names below are resolved on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kf_trainer_core.tasks import lazy_names, require

# Every module of the provider is imported through this package: one check, and a
# lookup only (no Airflow import here; DAG files pay for every import).
require("airflow", "airflow", "kf_trainer_airflow", "Apache Airflow 3")

if TYPE_CHECKING:
    from kf_trainer_airflow.hooks.trainer import KubeflowTrainerHook
    from kf_trainer_airflow.operators.trainjob import TrainJobOperator
    from kf_trainer_airflow.sensors.trainjob import TrainJobSensor
    from kf_trainer_airflow.triggers.trainjob import TrainJobTrigger

__all__ = ["KubeflowTrainerHook", "TrainJobOperator", "TrainJobSensor", "TrainJobTrigger"]

__getattr__, _ = lazy_names(
    __name__,
    {
        "KubeflowTrainerHook": "kf_trainer_airflow.hooks.trainer",
        "TrainJobOperator": "kf_trainer_airflow.operators.trainjob",
        "TrainJobSensor": "kf_trainer_airflow.sensors.trainjob",
        "TrainJobTrigger": "kf_trainer_airflow.triggers.trainjob",
    },
    globals(),
)
