"""A training function whose return value is not JSON fails its job with the type and
the fix, instead of succeeding with no result (every adapter would hand ``None`` on as
if the function had returned it); ``KF_TRAINER_RESULT_NOT_JSON=ignore`` opts out."""

from __future__ import annotations

import pytest

from kf_trainer_core.client import TrainerClient
from kf_trainer_core.cluster.status import JobState
from kf_trainer_core.errors import TrainJobFailedError
from kf_trainer_core.spec import CustomTrainer, TrainJobSpec
from kf_trainer_core.spec.function import RESULT_NOT_JSON_ENV

RETURNS_A_DATE = """\
def train():
    import datetime
    return {"trained_on": datetime.date(2024, 1, 1)}
"""


def test_a_result_that_is_not_json_fails_the_job_naming_the_type(client: TrainerClient) -> None:
    spec = TrainJobSpec(trainer=CustomTrainer(RETURNS_A_DATE))
    with pytest.raises(TrainJobFailedError) as caught:
        client.run(spec, name="not-json", timeout=120)
    text = str(caught.value)
    assert "Object of type date is not JSON serializable" in text
    assert "return their URI" in text
    assert f"{RESULT_NOT_JSON_ENV}=ignore" in text
    assert client.get_job("not-json").status is JobState.FAILED


def test_opting_out_succeeds_without_a_result(client: TrainerClient) -> None:
    trainer = CustomTrainer(RETURNS_A_DATE, env={RESULT_NOT_JSON_ENV: "ignore"})
    out = client.run(TrainJobSpec(trainer=trainer), name="not-json-ok", timeout=120)
    assert out.status is JobState.COMPLETE
    assert out.result is None
    assert any("is not reported" in line for line in client.get_job_logs("not-json-ok"))
