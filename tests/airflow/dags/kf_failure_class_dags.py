"""DAGs of failure classes for ``dag.test()``: Airflow 3.3 retry policies deciding from
the TrainJob's failure class, configuration errors failing fast, and a Kueue admission
timeout and a job Kueue can never admit."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

from airflow.sdk import DAG
from kf_dag_helpers import CONN_ID, scenario, scenario_by_try

from kf_trainer_airflow.failures import TrainJobRetryPolicy, exception_retry_policy
from kf_trainer_airflow.operators.trainjob import TrainJobOperator
from kf_trainer_core.cluster.kueue import QUEUE_NAME_LABEL
from kf_trainer_core.spec import Annotations, CustomTrainer, Labels
from kf_trainer_core.testing.scenarios import SCENARIO_ANNOTATION

START = datetime(2026, 1, 1)
RETRIES = {"retries": 2, "retry_delay": timedelta(0)}


def train(x: int = 1) -> dict[str, Any]:
    return {"x": x}


def _train(task_id: str, **kwargs: Any) -> TrainJobOperator:
    kwargs.setdefault("trainer", CustomTrainer(train))
    kwargs.setdefault("deferrable", False)
    return TrainJobOperator(task_id=task_id, kubeflow_trainer_conn_id=CONN_ID, **kwargs)


# Evicted on the first try (infrastructure): the policy retries, the next attempt runs.
with DAG("kf_policy_retries_infra", schedule=None, start_date=START, default_args=RETRIES):
    _train(
        "train",
        options=[scenario_by_try("evicted", "success")],
        retry_policy=TrainJobRetryPolicy(),
    )

# The same with Airflow's own ExceptionRetryPolicy matching the exception types, deferred.
with DAG("kf_exception_policy_deferred", schedule=None, start_date=START, default_args=RETRIES):
    _train(
        "train",
        options=[scenario_by_try("evicted", "success")],
        retry_policy=exception_retry_policy(),
        deferrable=True,
    )

# The training code fails (user code): the policy fails the task without a retry.
with DAG("kf_policy_fails_user_code", schedule=None, start_date=START, default_args=RETRIES):
    _train("train", options=[scenario("fail")], retry_policy=TrainJobRetryPolicy())

# A configuration failure fails fast by default, retries left or not; switchable.
with DAG("kf_config_fails_fast", schedule=None, start_date=START, default_args=RETRIES):
    _train("train", options=[scenario("creation-failure")])

with DAG("kf_config_retried", schedule=None, start_date=START, default_args=RETRIES):
    _train("train", options=[scenario("creation-failure")], fail_fast_on=())

# A configuration error before any job exists (the cluster has no such runtime): the
# submit is refused, and the task fails as fast as for a job that cannot run.
for _dag_id, _fail_fast_on in (("kf_config_refused", None), ("kf_config_refused_retried", ())):
    with DAG(_dag_id, schedule=None, start_date=START, default_args=RETRIES):
        _refused = {} if _fail_fast_on is None else {"fail_fast_on": _fail_fast_on}
        _train("train", runtime="no-such-runtime", **_refused)

# Kueue has not admitted it (4 GPUs behind a job holding the queue's 4) within its
# admission timeout: the admission timeout says why.
for _dag_id, _deferrable in (("kf_not_admitted", False), ("kf_not_admitted_deferred", True)):
    with DAG(_dag_id, schedule=None, start_date=START, catchup=False):
        _train(
            "train",
            trainer=CustomTrainer(train, resources_per_node={"gpu": 4}),
            options=[Labels({QUEUE_NAME_LABEL: "team-a"})],
            admission_timeout=1.5,
            deferrable=_deferrable,
        )

# Kueue can never admit it (8 GPUs, the queue has 4): the wait fails at once, without
# an admission timeout, naming the request and the maximum.
for _dag_id, _deferrable in (("kf_never_admitted", False), ("kf_never_admitted_deferred", True)):
    with DAG(_dag_id, schedule=None, start_date=START, catchup=False):
        _train(
            "train",
            trainer=CustomTrainer(train, resources_per_node={"gpu": 8}),
            options=[Labels({QUEUE_NAME_LABEL: "team-a"})],
            deferrable=_deferrable,
        )

# A training program that exits 3 while its Job retries it (as a real cluster's default
# backoffLimit of 6 does), and a step asking more GPUs than any node has: the wait runs
# out of time and the task log says what holds the job up, the fix of its class and
# what is left behind, in the core's words (the CLI's).
_RESTARTING = Annotations(
    {
        SCENARIO_ANNOTATION: json.dumps(
            {"preset": "fail", "exit_code": 3, "backoff_limit": 6, "duration": 3}
        )
    }
)
for _dag_id, _deferrable in (("kf_restarting", False), ("kf_restarting_deferred", True)):
    with DAG(_dag_id, schedule=None, start_date=START, catchup=False):
        _train("train", options=[_RESTARTING], wait_timeout=5, deferrable=_deferrable)

for _dag_id, _deferrable in (("kf_too_big", False), ("kf_too_big_deferred", True)):
    with DAG(_dag_id, schedule=None, start_date=START, catchup=False):
        _train(
            "train",
            trainer=CustomTrainer(train, resources_per_node={"gpu": 16}),
            wait_timeout=2,
            deferrable=_deferrable,
        )
