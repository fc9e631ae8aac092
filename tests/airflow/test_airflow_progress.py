"""Airflow shows what the training function reports while it runs: progress lines in the
task log, from the worker (``deferrable=False``) and from the triggerer, and the final
metrics and the job's cost in XCom. The function runs for real (the test server's
``exec`` scenario) and reports to the TrainJob status server.

After each report the function waits until the task log has shown it (a log handler
opens a gate file): a report that reached the log only at the end would leave the job
stuck."""

from __future__ import annotations

import asyncio
import logging
import re
from pathlib import Path
from typing import Any

import pytest
from airflow.triggers.base import TriggerEvent
from test_operator import FakeTI, context, op

from kf_trainer_airflow.triggers.trainjob import TrainJobTrigger
from kf_trainer_core.client import TrainerClient
from kf_trainer_core.config import KubernetesConfig
from kf_trainer_core.spec import Annotations, CustomTrainer, TrainJobSpec
from kf_trainer_core.testing.scenarios import SCENARIO_ANNOTATION
from kf_trainer_core.testing.server import KubeTestServer

pytestmark = pytest.mark.usefixtures("kf_conn")

EXEC = Annotations({SCENARIO_ANNOTATION: "exec"})
FAST = {"KF_TRAINER_REPORT_INTERVAL": "0"}


def paced(steps: int = 3, gate: str = "") -> dict[str, int]:
    """Report each step, then wait until ``gate/<step>`` exists."""
    import os
    import time

    from kf_trainer_core.report import report, track

    for i in track(range(steps)):
        report(metrics={"loss": round(1.0 / (i + 1), 4), "step": i})
        deadline = time.monotonic() + 60
        while gate and not os.path.exists(os.path.join(gate, str(i))):
            if time.monotonic() > deadline:
                raise TimeoutError(f"gate {i} never opened")
            time.sleep(0.02)
    return {"steps": steps}


class GateHandler(logging.Handler):
    """Keeps the task log's progress lines; opens ``gate/<step>`` for each step shown."""

    def __init__(self, gate: Path) -> None:
        super().__init__(logging.INFO)
        self.gate = gate
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        line = record.getMessage()
        if "% done" in line:
            self.lines.append(line)
        for step in re.findall(r"step=(\d+)", line):
            (self.gate / step).touch()


def watch(task: Any, tmp_path: Path) -> GateHandler:
    """Send the task's (or trigger's) log to a standard logger with a gate handler
    (Airflow's own is structlog, which writes straight to the task log file)."""
    gate = tmp_path / "gate"
    gate.mkdir(exist_ok=True)
    handler = GateHandler(gate)
    logger = logging.getLogger(f"kf-test-progress-{id(task)}")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    # The logging mixins keep the logger here (operators: _cached_logger, triggers: _log).
    task._cached_logger = logger
    task._log = logger
    return handler


def test_worker_logs_progress_and_publishes_metrics_and_cost(
    kube: KubeTestServer, tmp_path: Path
) -> None:
    kube.enable_status_server()
    task = op(
        trainer=CustomTrainer(paced, env=FAST),
        func_args={"steps": 3, "gate": str(tmp_path / "gate")},
        options=[EXEC],
        wait_timeout=120,
    )
    handler = watch(task, tmp_path)
    ti = FakeTI()
    out = task.execute(context(ti))
    assert out["result"] == {"steps": 3}
    assert ti.xcoms["metrics"] == {"loss": 0.3333, "step": 2}
    assert set(ti.xcoms["cost"]) == {
        "wall_seconds",
        "pending_seconds",
        "running_seconds",
        "gpu_hours",
    }
    steps = [m for line in handler.lines for m in re.findall(r"step=(\d+)", line)]
    assert steps == sorted(steps)
    assert {"0", "1", "2"} <= set(steps)
    assert any("100% done" in line for line in handler.lines)


async def test_triggerer_logs_progress(kube: KubeTestServer, kf_conn: Path, tmp_path: Path) -> None:
    kube.enable_status_server()
    gate = tmp_path / "gate"
    spec = TrainJobSpec(
        trainer=CustomTrainer(paced, func_args={"steps": 2, "gate": str(gate)}, env=FAST),
        options=[EXEC],
    )
    with TrainerClient(KubernetesConfig(kubeconfig=str(kf_conn))) as client:
        name = client.submit(spec).job.name
    trigger = TrainJobTrigger(
        job_name=name, namespace="default", kubeflow_trainer_conn_id="kf_test", timeout=120
    )
    handler = watch(trigger, tmp_path)

    async def first() -> TriggerEvent:
        async for event in trigger.run():
            return event
        raise AssertionError("no event")

    event = await asyncio.wait_for(first(), 120)
    payload = dict(event.payload)
    assert payload["status"] == "success"
    assert payload["outputs"]["metrics"] == {"loss": 0.5, "step": 1}
    assert payload["outputs"]["running_seconds"] is not None
    steps = [m for line in handler.lines for m in re.findall(r"step=(\d+)", line)]
    assert {"0", "1"} <= set(steps)
