"""SIGTERM to a running component — what KFP's pod receives when a run is cancelled —
stops the TrainJob and ends the task with a non-zero status.

The component runs exactly as in a pod: its container command (``sh -ec`` writing the
embedded source, then ``exec python3 -m kfp.dsl.executor_main``) with a real executor
input, against the test server, with a job that never finishes.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kfp_support import scenario

from kf_trainer_core.client import TrainerClient
from kf_trainer_core.cluster.status import JobState
from kf_trainer_core.errors import TrainJobNotFoundError
from kf_trainer_core.spec import Annotations, CustomTrainer, TrainJobSpec
from kf_trainer_core.testing.scenarios import SCENARIO_ANNOTATION
from kf_trainer_kfp import ComponentImage, step_components, trainjob_launcher

_ARTIFACT_TYPES = {"metrics": "Metrics", "model": "Model", "summary": "Markdown"}


@dataclass
class Task:
    """A running component process and the lines it printed so far."""

    proc: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def out(self) -> str:
        return "\n".join(self.lines)

    def wait_for(self, text: str) -> None:
        for _ in range(1200):
            if any(text in line for line in self.lines):
                return
            assert self.proc.poll() is None, self.out
            time.sleep(0.05)
        raise AssertionError(f"{text!r} never printed:\n{self.out}")

    def terminate(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=120)
        time.sleep(0.1)  # the reader takes the last lines
        return code


def start(component: Any, arguments: dict[str, Any], root: Path) -> Task:
    """Start the component's container command with an executor input, as the KFP
    launcher does in a pod (``python3`` is this interpreter, as kfp.local sets it)."""
    spec = component.component_spec
    values = {name: inp.default for name, inp in (spec.inputs or {}).items()}
    values.update(arguments)
    outputs = spec.outputs or {}
    executor_input = {
        "inputs": {"parameterValues": values},
        "outputs": {
            "parameters": {
                name: {"outputFile": str(root / name)}
                for name in outputs
                if name not in _ARTIFACT_TYPES
            },
            "artifacts": {
                name: {
                    "artifacts": [
                        {
                            "name": name,
                            "type": {"schemaTitle": f"system.{kind}", "schemaVersion": "0.0.1"},
                            "uri": str(root / name),
                            "metadata": {},
                        }
                    ]
                }
                for name, kind in _ARTIFACT_TYPES.items()
                if name in outputs
            },
            "outputFile": str(root / "executor_output.json"),
        },
    }
    container = spec.implementation.container
    command = [*container.command, *container.args]
    script = command.index(next(c for c in command if "executor_main" in c))
    command[script] = command[script].replace("python3", sys.executable)
    command = [c.replace("{{$}}", json.dumps(executor_input)) for c in command]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return Task(proc)


def gone(client: TrainerClient, name: str) -> bool:
    for _ in range(200):
        try:
            client.get_job(name)
        except TrainJobNotFoundError:
            return True
        time.sleep(0.05)
    return False


NEVER = TrainJobSpec(
    trainer=CustomTrainer("def fit():\n    return 1\n"),
    options=[Annotations({SCENARIO_ANNOTATION: scenario("never-finish")})],
)


def test_sigterm_deletes_the_job(
    backend: dict[str, Any], client: TrainerClient, tmp_path: Path
) -> None:
    launch = trainjob_launcher(component_image=ComponentImage.current_environment())
    task = start(
        launch,
        {
            "spec": NEVER.to_json_dict(),
            "backend_config": backend,
            "pipeline_run_id": "run-sigterm",
            "pipeline_task_name": "train",
        },
        tmp_path,
    )
    task.wait_for(": Running")  # the task is waiting on its running job
    [job] = client.list_jobs()
    assert task.terminate() == 128 + signal.SIGTERM, task.out
    assert gone(client, job.name)
    assert "[kf-trainer] SIGTERM received" in task.out
    assert f"[kf-trainer] delete: {job.name}" in task.out


def test_sigterm_can_suspend_instead(
    backend: dict[str, Any], client: TrainerClient, tmp_path: Path
) -> None:
    """``on_cancel="suspend"``: the pods go, the job stays to be resumed; here through
    the step-level wait, which knows its job by name."""
    steps = step_components(component_image=ComponentImage.current_environment())
    name = client.submit(NEVER, identity="sigterm/suspend").job.name
    task = start(
        steps.wait_for_step,
        {"job_name": name, "step": "trainer", "backend_config": backend, "on_cancel": "suspend"},
        tmp_path,
    )
    task.wait_for(": Running")
    assert task.terminate() == 128 + signal.SIGTERM, task.out
    for _ in range(200):  # the controller reports the suspension after the patch
        if client.get_job(name).status is JobState.SUSPENDED:
            break
        time.sleep(0.05)
    assert client.get_job(name).status is JobState.SUSPENDED
    assert f"[kf-trainer] suspend: {name}" in task.out
