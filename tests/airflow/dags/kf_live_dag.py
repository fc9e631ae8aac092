"""The DAG the live test runs with the real scheduler, triggerer and API server.

- ``deferred``: waits in the triggerer and resumes in a worker (another process);
- ``kill_deferred`` / ``kill_running``: run until the test marks them failed, which must
  delete their jobs (the trigger's ``on_kill`` in the triggerer; the operator's
  ``on_kill`` in the worker);
- ``crash``: its first try's worker process dies right after submitting; the retry must
  wait for that job rather than submit another.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta
from typing import Any

from airflow.sdk import DAG
from kf_dag_helpers import CONN_ID, double, scenario

from kf_trainer_airflow.operators.trainjob import TrainJobOperator
from kf_trainer_core.spec import CustomTrainer


class DieAfterSubmit(TrainJobOperator):
    """The first try's process exits hard once the job exists (a lost worker)."""

    def poll_until_complete(self, external_id: Any, context: Any) -> Any:
        if context["ti"].try_number == 1:
            os._exit(3)
        return super().poll_until_complete(external_id, context)


def _op(cls: type[TrainJobOperator], task_id: str, preset: str, **kwargs: Any) -> Any:
    return cls(
        task_id=task_id,
        kubeflow_trainer_conn_id=CONN_ID,
        trainer=CustomTrainer(double, func_args={"x": 4}),
        options=[scenario(preset)],
        **kwargs,
    )


with DAG(
    "kf_live",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    default_args={"retries": 0},
) as kf_live:
    # The job starts a few seconds late so that its trigger fires well after this
    # worker's defer-exit is processed: Airflow 3.3 fails a task whose resumed try is
    # already running when that stale exit event arrives (apache/airflow#72716).
    _op(TrainJobOperator, "deferred", '{"preset": "exec", "pending_delay": 6}', deferrable=True)
    _op(TrainJobOperator, "kill_deferred", "never-finish", deferrable=True)
    _op(TrainJobOperator, "kill_running", "never-finish", deferrable=False)
    _op(
        DieAfterSubmit,
        "crash",
        '{"preset": "success", "duration": 3.0}',
        deferrable=False,
        retries=1,
        retry_delay=timedelta(seconds=0),
    )
