"""A Prefect flow whose TrainJob's function reports progress and loss (run for real by
the test server's ``exec`` scenario, reporting to the TrainJob status server): the
progress artifact follows each report while the job runs, and the table artifact ends
with the final metrics and what the job cost.

The function waits after each report until the progress artifact, read back through
the Prefect API, shows it: a progress artifact updated only at the end would leave the
job stuck."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from prefect import flow
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey
from prefect_support import read_artifacts, read_logs

from kf_trainer_core.cluster.outputs import JobOutputs
from kf_trainer_core.cluster.status import JobState
from kf_trainer_core.spec import Annotations, CustomTrainer, TrainJobSpec
from kf_trainer_core.testing.scenarios import SCENARIO_ANNOTATION
from kf_trainer_core.testing.server import KubeTestServer
from kf_trainer_prefect import KubeflowTrainerCredentials, run_trainjob

pytestmark = pytest.mark.usefixtures("prefect_server")


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


def _watch_artifact(key: str, gate: Path, seen: list[str], stop: threading.Event) -> None:
    """Open ``gate/<step>`` once the progress artifact's description shows that step."""
    with get_client(sync_client=True) as client:
        while not stop.is_set():
            found = client.read_artifacts(
                artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[key]))
            )
            for artifact in found:
                text = artifact.description or ""
                if not seen or seen[-1] != text:
                    seen.append(text)
                for part in text.replace(",", " ").split():
                    if part.startswith("step="):
                        (gate / part.removeprefix("step=")).touch()
            time.sleep(0.1)


def test_progress_artifact_follows_the_reports(
    kube: KubeTestServer, creds: KubeflowTrainerCredentials, tmp_path: Path
) -> None:
    kube.enable_status_server()
    gate = tmp_path / "gate"
    gate.mkdir()
    job = TrainJobSpec(
        trainer=CustomTrainer(
            paced,
            func_args={"steps": 3, "gate": str(gate)},
            env={"KF_TRAINER_REPORT_INTERVAL": "0"},
        ),
        options=[Annotations({SCENARIO_ANNOTATION: "exec"})],
    )
    seen: list[str] = []
    stop = threading.Event()
    watcher = threading.Thread(
        target=_watch_artifact, args=("prog-live-progress", gate, seen, stop), daemon=True
    )
    watcher.start()

    @flow
    def train() -> JobOutputs:
        return run_trainjob(job, creds, name="prog-live", stream_logs=False)

    try:
        state = train(return_state=True)
    finally:
        stop.set()
        watcher.join(5)
    out: JobOutputs = state.result()
    assert out.status is JobState.COMPLETE
    assert out.metrics == {"loss": 0.3333, "step": 2}
    steps = [s for text in seen for s in ("step=0", "step=1", "step=2") if s in text]
    assert steps == sorted(steps)
    assert {"step=0", "step=1", "step=2"} <= set(steps)
    flow_run_id = state.state_details.flow_run_id
    artifacts = {a.key: a for a in read_artifacts(flow_run_id) if a.key}
    assert float(artifacts["prog-live-progress"].data) == 100
    rows: list[dict[str, Any]] = artifacts["prog-live-steps"].data
    if isinstance(rows, str):
        import json

        rows = json.loads(rows)
    metrics = {r["name"]: r["value"] for r in rows if r["kind"] == "metric"}
    assert metrics == {"loss": 0.3333, "step": 2}
    cost = {r["name"] for r in rows if r["kind"] == "cost"}
    assert {"wall_seconds", "pending_seconds", "running_seconds", "gpu_hours"} <= cost
    assert "**Cost:**" in artifacts["prog-live-summary"].data
    logs = read_logs(flow_run_id)
    assert any("reported: loss=0.3333, step=2" in line for line in logs)
