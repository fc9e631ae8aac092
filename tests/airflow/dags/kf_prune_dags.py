"""The ready-made maintenance DAG (``prune_dag``) and a training task that deletes its
job once its outputs are in XCom (``on_finish_action="delete"``), for ``dag.test()``."""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG
from kf_dag_helpers import CONN_ID, double, scenario

from kf_trainer_airflow.operators.prune import prune_dag
from kf_trainer_airflow.operators.trainjob import TrainJobOperator
from kf_trainer_core.spec import CustomTrainer

kf_prune = prune_dag("kf_prune", kubeflow_trainer_conn_id=CONN_ID, schedule=None, older_than=0)
kf_prune_plan = prune_dag(
    "kf_prune_plan", kubeflow_trainer_conn_id=CONN_ID, schedule=None, keep_last=0, dry_run=True
)

with DAG("kf_train_then_delete", schedule=None, start_date=datetime(2026, 1, 1)) as kf_then_delete:
    TrainJobOperator(
        task_id="train",
        kubeflow_trainer_conn_id=CONN_ID,
        trainer=CustomTrainer(double, func_args={"x": 21}),
        options=[scenario("exec")],
        deferrable=False,
        on_finish_action="delete",
    )
