"""DAGs run on the real control plane (tests/airflow/test_airflow_realcluster.py): the operator
deferred to the triggerer, and the decorated task, on kwok's log-less nodes."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

from airflow.sdk import DAG, task
from kf_dag_helpers import CONN_ID, double

from kf_trainer_airflow.operators.trainjob import TrainJobOperator
from kf_trainer_core.spec import CustomTrainer
from kf_trainer_core.testing import kwok

START = datetime(2026, 1, 1)
#: What the node pods' termination message carries (kwok writes it, as the generated
#: program would).
RESULT = {"double": 42}
#: The MultiKueue task's execution_timeout: long enough for its job to reach the
#: worker (dispatch takes a second or two), short enough to keep the test short.
MULTIKUEUE_TASK_SECONDS = 8

with DAG("kf_real_deferred", schedule=None, start_date=START, catchup=False) as kf_real_deferred:
    TrainJobOperator(
        task_id="train",
        kubeflow_trainer_conn_id=CONN_ID,
        trainer=CustomTrainer(double, func_args={"x": 21}, num_nodes=2),
        options=[kwok.termination_message(json.dumps(RESULT))],
        deferrable=True,
    )
    # kwok's default pods: no termination message, no log. The job succeeded: so does
    # the task, its XCom saying why the result is missing.
    TrainJobOperator(
        task_id="log_less",
        kubeflow_trainer_conn_id=CONN_ID,
        trainer=CustomTrainer(double, func_args={"x": 1}, num_nodes=2),
        deferrable=True,
    )

with DAG("kf_real_decorated", schedule=None, start_date=START, catchup=False) as kf_real_decorated:

    @task.kubeflow_trainer(kubeflow_trainer_conn_id=CONN_ID, deferrable=True, retries=0)
    def square(x: int) -> int:
        return x * x

    @task
    def report(value: Any) -> Any:
        return value

    report(square(3))

with DAG(
    "kf_real_multikueue", schedule=None, start_date=START, catchup=False
) as kf_real_multikueue:
    # On a MultiKueue manager (tests/airflow/test_airflow_realcluster.py): the job runs on
    # the worker its Workload names; its pods ask for cpu, a resource the queue covers.
    from kf_trainer_core.spec import MANAGED_BY_MULTIKUEUE, ManagedBy, QueueName

    TrainJobOperator(
        task_id="train",
        kubeflow_trainer_conn_id=CONN_ID,
        trainer=CustomTrainer(
            double, func_args={"x": 21}, num_nodes=2, resources_per_node={"cpu": "1"}
        ),
        options=[
            QueueName("multikueue"),
            ManagedBy(MANAGED_BY_MULTIKUEUE),
            kwok.node_annotations(
                {kwok.TERMINATION_MESSAGE: json.dumps(RESULT), kwok.DURATION: "3s"}
            ),
        ],
        deferrable=True,
    )

with DAG(
    "kf_real_multikueue_timeout",
    schedule=None,
    start_date=START,
    catchup=False,
    default_args={"retries": 0},
) as kf_real_multikueue_timeout:
    # A long MultiKueue job whose task runs out of time while it waits in the worker:
    # Airflow calls on_kill, whose on_kill_action (delete) must clear both clusters.
    from kf_trainer_core.spec import MANAGED_BY_MULTIKUEUE, ManagedBy, QueueName

    TrainJobOperator(
        task_id="train",
        kubeflow_trainer_conn_id=CONN_ID,
        trainer=CustomTrainer(
            double, func_args={"x": 1}, num_nodes=1, resources_per_node={"cpu": "1"}
        ),
        options=[
            QueueName("multikueue"),
            ManagedBy(MANAGED_BY_MULTIKUEUE),
            kwok.node_annotations({kwok.DURATION: "300s"}),
        ],
        deferrable=False,
        execution_timeout=timedelta(seconds=MULTIKUEUE_TASK_SECONDS),
    )
