"""@task.kubeflow_trainer on its own: the function captured when the DAG is parsed, the
call's arguments as keyword arguments for the pods (DAG runs are in test_dags.py)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest
from airflow.sdk import DAG, task

from kf_trainer_core.errors import SpecError


def decorated(func: Any, *args: Any, **kwargs: Any) -> Any:
    """The operator a decorated call creates in a DAG."""
    with DAG("unit", schedule=None, start_date=datetime(2026, 1, 1)):
        return task.kubeflow_trainer(kubeflow_trainer_conn_id="kf_test", num_nodes=2)(func)(
            *args, **kwargs
        ).operator


def fit(data: str, lr: float = 0.1, ds: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"data": data, "lr": lr, "ds": ds, **extra}


def positional(data: str, /) -> str:
    return data


def wants_ti(ti: Any = None) -> None:
    return None


def test_arguments_become_keyword_arguments() -> None:
    op = decorated(fit, "s3://bucket/x", lr=0.5, epochs=3)
    args = op.call_arguments({"ds": "2026-01-02"})
    assert args == {"data": "s3://bucket/x", "lr": 0.5, "epochs": 3, "ds": "2026-01-02"}
    spec = op.build_spec()
    assert spec.trainer.num_nodes == 2
    assert spec.trainer.func.name == "fit"
    assert "@task" not in spec.trainer.func.source  # the decorator stays in the DAG file


def test_context_dates_travel_as_text() -> None:
    op = decorated(fit, "x")
    args = op.call_arguments({"ds": datetime(2026, 1, 2, 3, 4)})
    assert args["ds"] == "2026-01-02T03:04:00"


def test_context_objects_cannot_reach_the_pods() -> None:
    op = decorated(wants_ti)
    with pytest.raises(TypeError, match=r"context value `ti` \(object\).*Fix: pass"):
        op.call_arguments({"ti": object()})


def test_arguments_must_be_json() -> None:
    op = decorated(fit, {1, 2})
    with pytest.raises(TypeError, match=r"must be JSON to reach the pods.*Fix"):
        op.call_arguments({})


def test_positional_only_parameters() -> None:
    op = decorated(positional, "x")
    with pytest.raises(TypeError, match=r"positionally only.*Fix: make it a normal parameter"):
        op.call_arguments({})


def test_closures_fail_when_the_dag_is_parsed() -> None:
    scale = 3

    def closure(x: int) -> int:
        return x * scale

    with pytest.raises(SpecError, match="enclosing function"):
        decorated(closure, 1)


def test_bad_trainer_settings_fail_when_the_dag_is_parsed() -> None:
    with (
        DAG("unit2", schedule=None, start_date=datetime(2026, 1, 1)),
        pytest.raises(SpecError, match="resources_per_node"),
    ):
        task.kubeflow_trainer(resources_per_node={"gpus": 1})(fit)("x")


@pytest.mark.parametrize(
    ("kwargs", "typo", "meant"),
    [
        ({"num_node": 2}, "num_node", "num_nodes"),
        ({"packages_to_instal": ["numpy"]}, "packages_to_instal", "packages_to_install"),
        ({"job_timout": 60}, "job_timout", "job_timeout"),
        ({"deferable": True}, "deferable", "deferrable"),
    ],
)
def test_misspelled_decorator_argument_suggests_the_right_one(
    kwargs: dict[str, Any], typo: str, meant: str
) -> None:
    with (
        DAG("unit3", schedule=None, start_date=datetime(2026, 1, 1)),
        pytest.raises(
            SpecError,
            match=rf"@task\.kubeflow_trainer: {typo}: unknown argument\. Fix: .*Did you mean `{meant}`\?",
        ),
    ):
        task.kubeflow_trainer(**kwargs)(fit)("x")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"job_timeout": "1h"},
            r"job_timeout: a str is not a number of seconds \(got '1h'\)\. Fix",
        ),
        ({"job_name": "My_Job"}, r"job_name: 'My_Job' is not a valid TrainJob name"),
        ({"job_name": "x" * 49}, r"job_name: 'x{49}' has 49 characters.*at most 48"),
        ({"log_step": "worker"}, r"log_step='worker': unknown step"),
    ],
)
def test_bad_task_arguments_fail_when_the_dag_is_parsed(
    kwargs: dict[str, Any], message: str
) -> None:
    with (
        DAG("unit4", schedule=None, start_date=datetime(2026, 1, 1)),
        pytest.raises(ValueError, match=message),
    ):
        task.kubeflow_trainer(**kwargs)(fit)("x")
