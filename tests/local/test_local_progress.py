"""Progress and metrics reported from inside the function, on the local backend: the
supervisor writes what rank 0 prints into the TrainJob's ``status.trainerStatus``, so
any process sees it while the job runs, and the outputs carry the final metrics and
the job's cost."""

from __future__ import annotations

from pathlib import Path

from local_helpers import wait_for
from progress_jobs import every_rank_reports, paced

from kf_trainer_core.client import TrainerClient
from kf_trainer_core.cluster.status import JobState, Progress
from kf_trainer_core.config import LocalConfig
from kf_trainer_core.report import MARKER
from kf_trainer_core.spec import CustomTrainer, TrainJobSpec

# Every report is sent at once (no 5 s coalescing), so each step shows.
FAST = {"KF_TRAINER_REPORT_INTERVAL": "0"}


def test_progress_arrives_while_the_job_runs_in_order(
    client: TrainerClient, config: LocalConfig, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    gate.mkdir()
    spec = TrainJobSpec(
        runtime="torch-distributed",
        trainer=CustomTrainer(paced, func_args={"steps": 3, "gate": str(gate)}, env=FAST),
    )
    name = client.submit(spec).job.name
    with TrainerClient(config) as other:  # another client: it reads the shared state
        for step in range(3):
            want = step

            def reported(want: int = want) -> bool:
                progress = other.get_job(name).progress
                return progress is not None and progress.metrics.get("step") == want

            wait_for(reported, what=f"step {step} reported")
            (gate / str(step)).touch()
    seen: list[Progress] = []
    job, result = client.wait(name, timeout=60, on_progress=seen.append)
    assert result == {"steps": 3}
    assert job.progress is not None
    assert job.progress.percentage == 100
    assert job.progress.metrics == {"loss": 0.3333, "step": 2}
    assert seen
    assert seen[-1].percentage == 100
    outputs = client.get_job_outputs(name)
    assert outputs.metrics == {"loss": 0.3333, "step": 2}
    assert outputs.progress is not None
    assert outputs.progress.percentage == 100
    # Cost: all of the wall time is either waiting or running; no GPUs here.
    assert outputs.duration_seconds is not None
    assert outputs.pending_seconds is not None
    assert outputs.running_seconds is not None
    assert abs(outputs.pending_seconds + outputs.running_seconds - outputs.duration_seconds) < 1
    assert outputs.gpu_hours == 0.0


def test_only_rank_zero_reports(client: TrainerClient) -> None:
    spec = TrainJobSpec(
        runtime="torch-distributed",
        trainer=CustomTrainer(every_rank_reports, num_nodes=2, env=FAST),
    )
    out = client.run(spec, timeout=120)
    assert out.status is JobState.COMPLETE
    assert out.metrics == {"rank": 0}
    assert out.progress is not None
    assert out.progress.percentage == 95
    # The other node printed nothing: its reports were no-ops.
    node1 = client.get_job_logs(out.name, "node-1", raw=True)
    assert not [line for line in node1 if MARKER in line]
    assert [line for line in client.get_job_logs(out.name, "node-0", raw=True) if MARKER in line]
