"""The DAGs of :mod:`bench.triggerer` (read by Airflow's DAG processor and workers).

``kf_bench_ours``: ``KF_BENCH_TASKS`` mapped ``TrainJobOperator(deferrable=True)`` tasks;
``kf_bench_poll``: as many :class:`~bench.triggerer_poll.PollingTrainJobOperator` tasks
(the baseline). Both submit the same job, with no retries. ``KF_BENCH_BLOCK`` (seconds,
a check that the load test can fail): our trigger first blocks its event loop that long.
"""

from __future__ import annotations

import os
from datetime import datetime
from typing import Any

from airflow.sdk import DAG

from bench.triggerer_block import BlockingTrainJobTrigger
from bench.triggerer_poll import PollingTrainJobOperator
from kf_trainer_airflow.operators.trainjob import TrainJobOperator
from kf_trainer_airflow.triggers.trainjob import TrainJobTrigger
from kf_trainer_core.spec import CustomTrainer

CONN_ID = "kf_bench"
TASKS = int(os.environ.get("KF_BENCH_TASKS", "40"))
BLOCK = float(os.environ.get("KF_BENCH_BLOCK", "0"))
GRACE = float(os.environ.get("KF_BENCH_GRACE", "10"))


def train(i: int) -> dict[str, int]:
    """The job's function (the test bed's scenario decides how the job runs)."""
    return {"i": i}


class MaybeBlockingOperator(TrainJobOperator):
    """``TrainJobOperator``; with ``KF_BENCH_BLOCK`` set it defers to the blocking trigger."""

    def defer(self, *, trigger: Any, **kwargs: Any) -> Any:
        if BLOCK > 0 and isinstance(trigger, TrainJobTrigger):
            trigger = BlockingTrainJobTrigger(**trigger.serialize()[1])
        return super().defer(trigger=trigger, **kwargs)


#: One mapped task per job (an annotation tells them apart in the job's manifest).
OPTIONS = [
    [{"type": "Annotations", "annotations": {"bench.kf-trainer-suite/index": str(i)}}]
    for i in range(TASKS)
]


def _dag(dag_id: str) -> DAG:
    return DAG(
        dag_id,
        schedule=None,
        start_date=datetime(2026, 1, 1),
        catchup=False,
        max_active_tasks=TASKS + 16,
        default_args={"retries": 0},
    )


with _dag("kf_bench_ours") as kf_bench_ours:
    MaybeBlockingOperator.partial(
        task_id="wait",
        kubeflow_trainer_conn_id=CONN_ID,
        deferrable=True,
        resume_grace=GRACE,
        trainer=CustomTrainer(train, func_args={"i": 1}),
    ).expand(options=OPTIONS)

with _dag("kf_bench_poll") as kf_bench_poll:
    PollingTrainJobOperator.partial(
        task_id="wait",
        kubeflow_trainer_conn_id=CONN_ID,
        kubeconfig_path=os.environ.get("KF_BENCH_KUBECONFIG", ""),
        poll_interval=float(os.environ.get("KF_BENCH_POLL", "10")),
        deferrable=True,
        trainer=CustomTrainer(train, func_args={"i": 1}),
    ).expand(options=OPTIONS)
