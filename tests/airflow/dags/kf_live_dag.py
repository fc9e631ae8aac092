"""The DAG the live test runs with the real scheduler, triggerer and API server.

- ``deferred``: waits in the triggerer and resumes in a worker (another process);
- ``kill_deferred`` / ``kill_running``: run until the test marks them failed, which must
  delete their jobs (the trigger's ``on_kill`` in the triggerer; the operator's
  ``on_kill`` in the worker);
- ``crash``: its first try's worker process dies right after submitting; the retry must
  wait for that job rather than submit another;
- ``short``: six mapped deferred tasks whose jobs end 0 to 6 s after they defer, where
  Airflow 3.3's stale defer-exit race (apache/airflow#72716) fails tasks unless
  ``resume_grace`` holds the trigger's event; no retries. ``KF_LIVE_RESUME_GRACE``
  overrides the grace (``0`` shows the race).
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timedelta
from typing import Any

from airflow.sdk import DAG
from kf_dag_helpers import CONN_ID, double, scenario

from kf_trainer_airflow._args import DEFAULT_RESUME_GRACE
from kf_trainer_airflow.operators.trainjob import TrainJobOperator
from kf_trainer_core.spec import CustomTrainer
from kf_trainer_core.testing.scenarios import SCENARIO_ANNOTATION

#: How long after submission (so after deferral, to within a second) each short job ends.
SHORT_DURATIONS = (0.0, 1.0, 2.0, 3.0, 4.5, 6.0)
GRACE = float(os.environ.get("KF_LIVE_RESUME_GRACE", DEFAULT_RESUME_GRACE))


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
    _op(TrainJobOperator, "deferred", "exec", deferrable=True, resume_grace=GRACE)
    TrainJobOperator.partial(
        task_id="short",
        kubeflow_trainer_conn_id=CONN_ID,
        trainer=CustomTrainer(double, func_args={"x": 1}),
        deferrable=True,
        resume_grace=GRACE,
    ).expand(
        options=[
            [
                {
                    "type": "Annotations",
                    "annotations": {
                        SCENARIO_ANNOTATION: json.dumps({"preset": "success", "duration": d})
                    },
                }
            ]
            for d in SHORT_DURATIONS
        ]
    )
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
