"""DAGs of @task.kubeflow_trainer: XComs in, the function's return value out; mapped."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from airflow.sdk import DAG, task
from kf_dag_helpers import CONN_ID, double, scenario

from kf_trainer_airflow.operators.trainjob import TrainJobOperator
from kf_trainer_core.spec import CustomTrainer

START = datetime(2026, 1, 1)

with DAG("kf_decorated", schedule=None, start_date=START, catchup=False) as kf_decorated:

    @task
    def prepare() -> int:
        return 20

    @task.kubeflow_trainer(
        kubeflow_trainer_conn_id=CONN_ID,
        num_nodes=1,
        resources_per_node={"cpu": 1},
        env={"MODE": "test"},
        options=[scenario("exec")],
    )
    def train(x: int, bonus: int = 0) -> dict[str, Any]:
        import os

        print("mode", os.environ.get("MODE"))
        return {"double": x * 2 + bonus, "mode": os.environ.get("MODE")}

    @task
    def report(result: dict[str, Any]) -> int:
        return int(result["double"])

    report(train(prepare(), bonus=2))

with DAG("kf_mapped", schedule=None, start_date=START, catchup=False) as kf_mapped:

    @task.kubeflow_trainer(
        kubeflow_trainer_conn_id=CONN_ID, options=[scenario("exec")], deferrable=True
    )
    def square(x: int) -> int:
        return x * x

    @task
    def total(values: list[int]) -> int:
        return sum(values)

    total(square.expand(x=[1, 2, 3]))

    # The operator maps too: one TrainJob per argument set.
    grid = TrainJobOperator.partial(
        task_id="grid",
        kubeflow_trainer_conn_id=CONN_ID,
        trainer=CustomTrainer(double),
        options=[scenario("exec")],
    ).expand(func_args=[{"x": 1}, {"x": 5}])
