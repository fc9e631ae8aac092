"""What a finished job cost, as data: wall time, the part of it spent waiting to start
(queued, suspended, scheduling, pulling images) and the part spent running, and the
GPU-hours of its training nodes.

Pure functions of the job's view (:class:`~kf_trainer_core.cluster.status.TrainJob`): the
timestamps come from the TrainJob (creation, completion) and its pods' container states
(``startedAt``, ``finishedAt``), the GPUs from each node's resource limits. A step
whose pod was replaced (a resume after a suspension) counts from its newest pod's
start: the earlier run shows as waiting.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from kf_trainer_core.base import untrusted
from kf_trainer_core.cluster.status import TrainJob
from kf_trainer_core.fields import names

#: Steps whose GPUs count: the training nodes (the MPI launcher is ``node-0``).
_NODE_PREFIX = f"{names.NODE}-"


@dataclass(frozen=True)
class Cost:
    """Wall, pending and running seconds, and GPU-hours; ``None`` where unknown."""

    wall_seconds: float | None
    pending_seconds: float | None
    running_seconds: float | None
    gpu_hours: float | None


def _seconds(start: datetime | None, end: datetime | None) -> float | None:
    if start is None or end is None:
        return None
    return max(0.0, (end - start).total_seconds())


def job_cost(job: TrainJob, *, now: datetime | None = None) -> Cost:
    """The cost of ``job`` so far: a running job is measured up to ``now`` (pass it
    for a snapshot; a finished job ends at its completion)."""
    end = job.completion_timestamp or now
    wall = _seconds(job.creation_timestamp, end)
    starts = [s.started_at for s in job.steps if s.started_at is not None]
    first = min(starts) if starts else None
    if first is None:
        # Nothing ever ran: all of the wall time was waiting.
        return Cost(wall, wall, 0.0 if wall is not None else None, 0.0)
    pending = _seconds(job.creation_timestamp, first)
    running = _seconds(first, end)
    gpu_seconds = 0.0
    for step in job.steps:
        if step.device != "gpu" or not step.name.startswith(_NODE_PREFIX):
            continue
        gpus = untrusted.whole_number(step.device_count) or 0
        ran = _seconds(step.started_at, step.finished_at or end)
        gpu_seconds += gpus * (ran or 0.0)
    return Cost(wall, pending, running, round(gpu_seconds / 3600.0, 6))
