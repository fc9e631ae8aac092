"""DAGs of TrainJobSensor: a job's initializers and training as separate DAG nodes."""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG
from kf_dag_helpers import CONN_ID, scenario

from kf_trainer_airflow.operators.trainjob import TrainJobOperator
from kf_trainer_airflow.sensors.trainjob import TrainJobSensor
from kf_trainer_core.spec import (
    BuiltinTrainer,
    HuggingFaceDatasetInitializer,
    HuggingFaceModelInitializer,
    Initializer,
    TorchTuneConfig,
)

JOB = "{{ ti.xcom_pull(task_ids='submit', key='job_name') }}"

with DAG("kf_steps", schedule=None, start_date=datetime(2026, 1, 1), catchup=False) as kf_steps:
    submit = TrainJobOperator(
        task_id="submit",
        kubeflow_trainer_conn_id=CONN_ID,
        runtime="torchtune-llama3.2-1b",
        trainer=BuiltinTrainer(TorchTuneConfig(epochs=1)),
        initializer=Initializer(
            dataset=HuggingFaceDatasetInitializer(storage_uri="hf://tatsu-lab/alpaca"),
            model=HuggingFaceModelInitializer(storage_uri="hf://meta-llama/Llama-3.2-1B"),
        ),
        options=[scenario('{"preset": "success", "initializer_duration": 2.0, "duration": 1.0}')],
        wait_for_completion=False,
    )
    dataset = TrainJobSensor(
        task_id="dataset_ready",
        kubeflow_trainer_conn_id=CONN_ID,
        job_name=JOB,
        step="dataset-initializer",
        mode="reschedule",
        poke_interval=1,
        timeout=60,
    )
    training = TrainJobSensor(
        task_id="training_started",
        kubeflow_trainer_conn_id=CONN_ID,
        job_name=JOB,
        step="node-0",
        target_status="Running",
        deferrable=True,
        recheck_interval=0.5,
        timeout=60,
    )
    done = TrainJobSensor(
        task_id="job_done",
        kubeflow_trainer_conn_id=CONN_ID,
        job_name=JOB,
        deferrable=True,
        timeout=60,
    )
    submit >> dataset >> training >> done
