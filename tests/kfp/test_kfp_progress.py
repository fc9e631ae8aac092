"""A KFP pipeline whose TrainJob's function reports progress and loss (run for real by
the test server's ``exec`` scenario, reporting to the TrainJob status server): the
component's log shows each report while the job runs, and its ``Metrics`` output holds
the final metrics and what the job cost."""

# No `from __future__ import annotations`: KFP reads pipeline annotations as objects.
import json
import re
from pathlib import Path
from typing import Any

import pytest
from kfp import dsl
from kfp.dsl import Input, Metrics
from pipeline_parts import LOCAL

from kf_trainer_core.spec import Annotations
from kf_trainer_core.testing.scenarios import SCENARIO_ANNOTATION
from kf_trainer_core.testing.server import KubeTestServer
from kf_trainer_kfp import ComponentImage, trainjob_component

HERE = ComponentImage.current_environment()


def stepped(steps: int = 3) -> dict:
    """Report each step; a short pause between them keeps the reports apart."""
    import time

    from kf_trainer_core.report import report, track

    for i in track(range(steps)):
        report(metrics={"loss": round(1.0 / (i + 1), 4), "step": i})
        time.sleep(0.5)
    return {"steps": steps}


@dsl.component(**LOCAL)
def read_metrics(metrics: Input[Metrics]) -> str:
    import json

    return json.dumps(dict(metrics.metadata), sort_keys=True)


def test_progress_in_the_log_and_metrics_out(
    local_kfp: Path,
    backend: dict[str, Any],
    server: KubeTestServer,
    capsys: pytest.CaptureFixture[str],
) -> None:
    server.enable_status_server()
    train = trainjob_component(
        stepped,
        options=[Annotations({SCENARIO_ANNOTATION: "exec"})],
        env={"KF_TRAINER_REPORT_INTERVAL": "0"},
        backend_config=backend,
        timeout_seconds=120,
        component_image=HERE,
    )

    @dsl.pipeline
    def pipe() -> str:
        trained = train()
        return read_metrics(metrics=trained.outputs["metrics"]).output

    run = pipe()
    metrics = json.loads(run.output)
    assert metrics["loss"] == 0.3333
    assert metrics["step"] == 2
    assert metrics["steps"] == 3  # the returned dict's numbers too
    assert {"wall_seconds", "pending_seconds", "running_seconds", "gpu_hours"} <= set(metrics)
    out = capsys.readouterr().out
    lines = [ln for ln in out.splitlines() if "[kf-trainer] TrainJob default/" in ln]
    progress = [ln for ln in lines if re.search(r"step=\d", ln)]
    # Reports show while the job runs: progress lines of earlier steps come before the
    # line that says it completed.
    done = next(i for i, ln in enumerate(lines) if ": Complete" in ln)
    assert any("step=0" in ln for ln in lines[:done]), lines
    assert progress
