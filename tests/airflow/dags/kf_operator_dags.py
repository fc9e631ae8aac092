"""DAGs of TrainJobOperator for ``dag.test()``: waits in the worker and deferred,
failures, retries after a crash and after a failed job."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from airflow.sdk import DAG
from kf_dag_helpers import (
    CONN_ID,
    at,
    braces,
    chatty,
    double,
    explode,
    hostile,
    scenario,
    scenario_by_try,
)

from kf_trainer_airflow.operators.trainjob import TrainJobOperator
from kf_trainer_core.spec import CustomTrainer

START = datetime(2026, 1, 1)


class CrashAfterSubmit(TrainJobOperator):
    """The first try's worker dies right after the job is submitted: nothing of the
    try runs after that (no wait, no clean-up)."""

    def poll_until_complete(self, external_id: Any, context: Any) -> Any:
        if context["ti"].try_number == 1:
            raise RuntimeError("simulated worker crash after submitting the job")
        return super().poll_until_complete(external_id, context)


class KilledWhileWaiting(TrainJobOperator):
    """The first try is killed while it waits for its running job (Airflow calls
    ``on_kill``: ``on_kill_action`` applies), and its worker goes; the retry finds the
    job's name in the task state store. The test acts at ``before kill``, ``after
    kill`` and ``retry decided`` (the retry has read the stored job's state)."""

    def poll_until_complete(self, external_id: Any, context: Any) -> Any:
        if context["ti"].try_number == 1:
            name = str(external_id)
            self._session(context).call(lambda c: c.wait(name, ("Running",), timeout=30))
            at("before kill")
            self.on_kill()
            at("after kill")
            raise RuntimeError("simulated kill of the first try while it waited")
        return super().poll_until_complete(external_id, context)

    def get_job_status(self, external_id: Any, context: Any) -> str:
        status = super().get_job_status(external_id, context)
        at("retry decided")
        return status


class CrashThenTimeOut(TrainJobOperator):
    """The first try's worker dies right after the job is submitted (the test acts at
    ``crash``); the retry's ``execution_timeout`` runs out while it looks for that job
    (the test slows the API server down), and Airflow calls ``on_kill`` (the test acts
    at ``on kill``) after ``execute`` has ended."""

    def poll_until_complete(self, external_id: Any, context: Any) -> Any:
        if context["ti"].try_number == 1:
            at("crash")
            raise RuntimeError("simulated worker crash after submitting the job")
        return super().poll_until_complete(external_id, context)

    def on_kill(self) -> None:
        at("on kill")
        super().on_kill()


def _train(task_id: str, **kwargs: Any) -> TrainJobOperator:
    kwargs.setdefault("trainer", CustomTrainer(double, func_args={"x": 21}))
    kwargs.setdefault("options", [scenario("exec")])
    return TrainJobOperator(task_id=task_id, kubeflow_trainer_conn_id=CONN_ID, **kwargs)


with DAG("kf_train", schedule=None, start_date=START, catchup=False) as kf_train:
    _train("train", deferrable=False, log_tail=50)

with DAG("kf_train_deferred", schedule=None, start_date=START, catchup=False) as kf_deferred:
    _train("train", deferrable=True, dashboard_url="https://kubeflow.example/{namespace}/{name}")

with DAG("kf_templated", schedule=None, start_date=START, catchup=False) as kf_templated:
    _train(
        "train",
        trainer=CustomTrainer(braces),
        func_args={"word": "{{ dag_run.conf.get('word', 'plain') }}"},
        deferrable=False,
    )

with DAG(
    "kf_retry_after_failure",
    schedule=None,
    start_date=START,
    catchup=False,
    default_args={"retries": 1, "retry_delay": timedelta(0)},
) as kf_retry_after_failure:
    _train("train", options=[scenario_by_try("fail", "success")], deferrable=False)

with DAG("kf_explode", schedule=None, start_date=START, catchup=False) as kf_explode:
    _train("train", trainer=CustomTrainer(explode), deferrable=False)

for deferrable in (False, True):
    # A job whose output is hostile (escapes, markup, malformed progress, a long line).
    hostile_id = "kf_hostile_deferred" if deferrable else "kf_hostile"
    with DAG(hostile_id, schedule=None, start_date=START, catchup=False) as hostile_dag:
        _train("train", trainer=CustomTrainer(hostile), deferrable=deferrable, log_tail=20)
    globals()[hostile_id] = hostile_dag

for durable in (True, False):
    # durable=False is what Airflow < 3.3 does (no task state store): the job's
    # identity labels alone lead the retry back to it.
    with DAG(
        "kf_retry_after_crash" if durable else "kf_retry_after_crash_not_durable",
        schedule=None,
        start_date=START,
        catchup=False,
        default_args={"retries": 1, "retry_delay": timedelta(0)},
    ) as crash_dag:
        CrashAfterSubmit(
            task_id="train",
            kubeflow_trainer_conn_id=CONN_ID,
            trainer=CustomTrainer(double, func_args={"x": 5}),
            options=[scenario('{"preset": "success", "duration": 2.0}')],
            deferrable=False,
            durable=durable,
        )
    globals()[crash_dag.dag_id] = crash_dag


# A deferred task whose job writes its log for a few seconds: the log is streamed into
# the task log while it is deferred (or, switched off, its tail printed at the resume).
for _dag_id, _streamed in (("kf_deferred_log", True), ("kf_deferred_log_tail", False)):
    with DAG(_dag_id, schedule=None, start_date=START, catchup=False):
        _train(
            "train",
            # Long enough to outlast the trigger's start (its imports, off the loop).
            trainer=CustomTrainer(chatty, func_args={"n": 12 if _streamed else 3}),
            deferrable=True,
            resume_grace=0,
            log_while_deferred=_streamed,
        )


def _retried_once(dag_id: str) -> DAG:
    """A DAG whose task is retried once, at once."""
    retry = {"retries": 1, "retry_delay": timedelta(0)}
    return DAG(dag_id, schedule=None, start_date=START, catchup=False, default_args=retry)


# A try killed while it waits, for each on_kill_action; the retry takes up what the kill
# left (docs/safety.md, "task retry"), found through the task state store. With a fixed
# name too: what the store remembers may be another's job by the time the retry runs.
_SLOW = scenario('{"preset": "success", "duration": 2.0}')
for _action in ("delete", "suspend", "keep"):
    for _named in (False, True):
        with _retried_once(f"kf_killed_{_action}" + ("_named" if _named else "")):
            KilledWhileWaiting(
                task_id="train",
                kubeflow_trainer_conn_id=CONN_ID,
                trainer=CustomTrainer(double, func_args={"x": 4}),
                options=[_SLOW],
                job_name="kf-killed-job" if _named else None,
                on_kill_action=_action,
                deferrable=False,
            )

# The retry of a crashed try is timed out before it has learnt its job's name: on_kill
# finds the job by the task's identity, as a kill while execute runs does.
_TIMED_OUT = {"durable": False, "execution_timeout": timedelta(seconds=3), "deferrable": False}
with _retried_once("kf_timed_out_while_attaching"):
    _never = {"trainer": CustomTrainer(double), "options": [scenario("never-finish")]}
    CrashThenTimeOut(task_id="train", kubeflow_trainer_conn_id=CONN_ID, **_never, **_TIMED_OUT)
