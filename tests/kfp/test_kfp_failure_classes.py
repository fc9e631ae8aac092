"""Failure classes in Kubeflow Pipelines: a failed TrainJob component exits with its
class's code (so an exit handler or a retry policy can tell them apart) and says the
class in its log and summary; a queued job's log says why it waits."""

# No `from __future__ import annotations`: KFP reads pipeline annotations as objects.
from pathlib import Path
from typing import Any

import pytest
from kfp import dsl

from kf_trainer_core.errors import FailureClass, failed_error
from kf_trainer_core.failures import EXIT_CODES
from kf_trainer_core.spec import Annotations, CustomTrainer, TrainJobSpec
from kf_trainer_core.status import Failure
from kf_trainer_core.testing.scenarios import SCENARIO_ANNOTATION
from kf_trainer_kfp import ComponentImage, trainjob_launcher
from kf_trainer_kfp.task import _classified

HERE = ComponentImage.current_environment()


@pytest.mark.parametrize(
    ("klass", "code"),
    [
        (FailureClass.INFRASTRUCTURE, 75),
        (FailureClass.CAPACITY, 69),
        (FailureClass.CONFIGURATION, 78),
        (FailureClass.USER_CODE, 70),
    ],
)
def test_each_class_has_its_exit_code(
    klass: FailureClass, code: int, capsys: pytest.CaptureFixture[str]
) -> None:
    failure = Failure(reason="FailedJobs", failure_class=klass, classified_by="evidence")

    def fail() -> None:
        raise failed_error(None, failure)

    with pytest.raises(SystemExit) as ended:
        _classified(fail)
    assert ended.value.code == code == EXIT_CODES[klass]
    out = capsys.readouterr().out
    assert f"failure class: {klass.value}; exiting with code {code}" in out
    assert "TrainJobFailedError" in out


def test_unknown_class_keeps_the_plain_error() -> None:
    def fail() -> None:
        raise failed_error(None, Failure(reason="Mystery"))

    with pytest.raises(Exception, match="Mystery"):
        _classified(fail)


def test_evicted_job_exits_as_infrastructure(
    local_kfp: Path, backend: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    launch = trainjob_launcher(backend_config=backend, component_image=HERE)
    evicted = TrainJobSpec(
        trainer=CustomTrainer("def fit():\n    return 1\n"),
        options=[Annotations({SCENARIO_ANNOTATION: "evicted"})],
    )

    @dsl.pipeline
    def pipe() -> None:
        launch(spec=evicted)

    with pytest.raises(RuntimeError):
        pipe()
    out = capsys.readouterr().out
    assert "failure class: infrastructure; exiting with code 75" in out
    assert "Evicted" in out
    summary = next(local_kfp.rglob("launch-trainjob/summary")).read_text()
    assert "failure class: infrastructure" in summary
