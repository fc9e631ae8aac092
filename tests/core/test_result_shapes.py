"""Nothing a job returns can make a reader fail (issue 33, finding 3): any JSON value,
however deep or large, goes through every serialisation the suite makes of a finished
job's outputs — the dict an Airflow XCom and a trigger's payload carry, the CLI's
``jobs get -o json|yaml``, the Prefect artifact's markdown and table, KFP's
``result_json`` and summary — without raising. A value too deep or too large is withheld:
``result`` says so, ``result_missing`` says why (class ``configuration``).

A 600-byte result nested 300 levels deep (valid JSON; the pod's ``json.dumps`` accepts it)
made ``JobOutputs.model_dump(mode="json")`` raise ``Maximum serialization depth
exceeded``: the Airflow trigger fired ``status=error`` for a Complete job and ``kf-trainer
jobs get`` exited 2.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kf_trainer_core.base import untrusted
from kf_trainer_core.cli._output import dump
from kf_trainer_core.cluster.job_summary import outputs_summary
from kf_trainer_core.cluster.outputs import JobOutputs, outputs
from kf_trainer_core.cluster.status import JobState, TrainJob
from kf_trainer_core.errors import FailureClass, TrainJobResultUnavailableError
from kf_trainer_core.tasks.jobs import outputs_rows

JOB = TrainJob(name="j", namespace="ns", runtime="torch-distributed", status=JobState.COMPLETE)

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5),
    max_leaves=40,
)


def nested(depth: int) -> Any:
    value: Any = 1
    for i in range(depth):
        value = [value] if i % 2 else {"k": value}
    return value


def every_serialisation(out: JobOutputs) -> None:
    """What the adapters and the CLI make of a finished job's outputs."""
    data = out.model_dump(mode="json")  # Airflow's XCom and trigger payload, the CLI
    json.dumps(data)
    JobOutputs.model_validate(data)  # the CLI's table reads it back
    dump({"outputs": data}, "json")
    dump({"outputs": data}, "yaml")
    outputs_summary(out)  # Prefect's artifact, the Airflow log, KFP's summary
    json.dumps(outputs_rows(out), default=str)  # Prefect's table artifact
    json.dumps(out.result, sort_keys=True, default=str)  # KFP's result_json


@settings(max_examples=200, deadline=None)
@given(json_values)
def test_any_json_a_job_returns_survives_every_serialisation(value: Any) -> None:
    out = outputs(JOB, value)
    every_serialisation(out)
    if untrusted.json_shape_problem(value) is None:
        assert out.result == value or value != value  # NaN is not equal to itself
        assert out.result_missing is None


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (nested(300), "nested more than 32 levels"),
        (nested(50_000), "nested more than 32 levels"),
        (["x" * 1000] * 2000, "more than 1,000,000 characters"),
        ({str(i): i for i in range(100_000)}, "more than 1,000,000 characters"),
    ],
    ids=["300-deep", "50000-deep", "2MB-list", "100k-keys"],
)
def test_a_value_too_deep_or_too_large_is_withheld_and_said_why(value: Any, why: str) -> None:
    out = outputs(JOB, value)
    every_serialisation(out)
    assert isinstance(out.result, str)
    assert out.result.startswith("[kf-trainer: result withheld: ")
    assert why in out.result
    missing = out.result_missing
    assert missing is not None
    assert missing.cause == "unusable"
    assert missing.failure_class is FailureClass.CONFIGURATION
    assert "Fix: return a small, flat value" in missing.message
    with pytest.raises(TrainJobResultUnavailableError, match="withheld"):
        out.require_result()


def test_the_300_level_result_of_the_issue_is_600_bytes_of_valid_json() -> None:
    text = "[" * 300 + "]" * 300
    assert len(text) == 600
    value = json.loads(text)
    with pytest.raises(ValueError, match=r"recursion|depth"):
        JobOutputs(
            name="j", namespace="ns", status=JobState.COMPLETE, runtime="r", result=value
        ).model_dump(mode="json")
    every_serialisation(outputs(JOB, value))


def test_the_shape_check_never_recurses() -> None:
    assert untrusted.json_shape_problem(nested(200_000)) is not None
    assert untrusted.json_shape_problem({"a": [1, 2, {"b": "c"}]}) is None
