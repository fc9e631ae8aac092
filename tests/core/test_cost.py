"""What a job cost, from its timestamps and its pods' container states."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from kf_trainer_core.cluster.cost import job_cost
from kf_trainer_core.cluster.status import JobState, Step, TrainJob

T0 = datetime(2026, 11, 23, 10, 0, tzinfo=timezone.utc)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def job(steps: list[Step], end: float | None) -> TrainJob:
    return TrainJob(
        name="j",
        namespace="ns",
        runtime="torch-distributed",
        status=JobState.COMPLETE if end is not None else JobState.RUNNING,
        steps=steps,
        creation_timestamp=T0,
        completion_timestamp=at(end) if end is not None else None,
    )


def node(i: int, start: float, end: float | None, gpus: str = "4") -> Step:
    return Step(
        name=f"node-{i}",
        pod_name=f"j-node-0-{i}",
        device="gpu",
        device_count=gpus,
        started_at=at(start),
        finished_at=at(end) if end is not None else None,
    )


def test_gpu_hours_pending_and_running() -> None:
    init = Step(
        name="dataset-initializer",
        pod_name="i",
        device="cpu",
        device_count="2",
        started_at=at(60),
        finished_at=at(120),
    )
    cost = job_cost(job([init, node(0, 150, 150 + 3600), node(1, 160, 160 + 1800)], 3800))
    assert cost.wall_seconds == 3800
    assert cost.pending_seconds == 60  # queued until the initializer started
    assert cost.running_seconds == 3740
    # 4 GPUs for an hour, 4 GPUs for half an hour; the CPU initializer counts nothing.
    assert cost.gpu_hours == 6.0


def test_nothing_ran() -> None:
    cost = job_cost(job([], 30))
    assert (cost.wall_seconds, cost.pending_seconds, cost.running_seconds) == (30, 30, 0.0)
    assert cost.gpu_hours == 0.0


def test_a_running_job_is_measured_up_to_now() -> None:
    cost = job_cost(job([node(0, 10, None, gpus="8")], None), now=at(10 + 1800))
    assert cost.running_seconds == 1800
    assert cost.gpu_hours == 4.0
    assert job_cost(job([node(0, 10, None)], None)).running_seconds is None
