"""What an orchestrator keeps of a finished job (:class:`JobOutputs`): its state, steps,
metrics, result and cost, built from what the cluster said. It sits above the job-outcome
errors (:mod:`kf_trainer_core.cluster.errors`) because :meth:`JobOutputs.require_result`
raises one, while those errors sit above the status models they carry."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from kf_trainer_core.base.timeutil import duration_text
from kf_trainer_core.cluster.cost import job_cost
from kf_trainer_core.cluster.errors import result_unavailable_error
from kf_trainer_core.cluster.kueue import QueueStatus
from kf_trainer_core.cluster.multikueue import WorkerCluster
from kf_trainer_core.cluster.results import ResultMissing, carried
from kf_trainer_core.cluster.status import (
    Failure,
    JobState,
    MetricValue,
    Progress,
    Step,
    TrainJob,
    _Out,
)


class JobOutputs(_Out):
    """What an orchestrator keeps of a finished job (XCom, task result, KFP outputs).
    Secrets never enter it: it is built from status, steps and the function's result."""

    name: str
    namespace: str
    status: JobState
    runtime: str
    steps: list[Step] = Field(default_factory=list)
    #: The job's reported metrics: numbers where they are numbers.
    metrics: dict[str, MetricValue] = Field(default_factory=dict)
    result: Any = None
    #: Wall time: from creation to completion.
    duration_seconds: float | None = None
    failure: Failure | None = None
    #: The job's Kueue queue status when it was queued by Kueue.
    queue: QueueStatus | None = None
    #: MultiKueue: the worker cluster that ran the job.
    worker: WorkerCluster | None = None
    #: Of the wall time: waiting to start (queued, suspended, scheduling, pulling
    #: images) and running (from the first container's start to completion).
    pending_seconds: float | None = None
    running_seconds: float | None = None
    #: GPUs of each training node times the time its container ran, summed, in hours.
    gpu_hours: float | None = None
    #: The last ``trainerStatus`` (progress, time left, metrics) the job reported.
    progress: Progress | None = None
    #: Set when the job succeeded but its function's return value could not be read
    #: (``result`` is then ``None``): why, and what to do.
    #: See :mod:`kf_trainer_core.cluster.results`.
    result_missing: ResultMissing | None = None

    def require_result(self) -> Any:
        """The function's return value; a job whose result could not be read raises
        :class:`~kf_trainer_core.errors.TrainJobResultUnavailableError` saying why (for
        callers that need the value, not merely the finished job)."""
        if self.result_missing is not None:
            raise result_unavailable_error(None, self.result_missing)
        return self.result

    def cost(self) -> dict[str, float | None]:
        """What the job cost, as data (``None`` where unknown): ``wall_seconds``,
        ``pending_seconds``, ``running_seconds``, ``gpu_hours``."""
        return {
            "wall_seconds": self.duration_seconds,
            "pending_seconds": self.pending_seconds,
            "running_seconds": self.running_seconds,
            "gpu_hours": self.gpu_hours,
        }

    def cost_text(self) -> str:
        """``pending 3s, running 1m 02s, 0.52 GPU-hours`` (unknown parts left out)."""
        parts = []
        if self.pending_seconds is not None:
            parts.append(f"pending {duration_text(self.pending_seconds)}")
        if self.running_seconds is not None:
            parts.append(f"running {duration_text(self.running_seconds)}")
        if self.gpu_hours:
            parts.append(f"{self.gpu_hours:.3g} GPU-hours")
        return ", ".join(parts)


# ---------------------------------------------------------------------- derivation


def outputs(job: TrainJob, result: Any, missing: ResultMissing | None = None) -> JobOutputs:
    """A finished job's outputs for an orchestrator: its result (or why it could not be
    read), the metrics it reported, and what it cost (wall, pending and running time,
    GPU-hours).

    What the job returned is untrusted: a value too deep or too large to carry further
    (pydantic, an XCom, a trigger's payload, a KFP output would fail on it) is withheld —
    ``result`` is a placeholder that says so, ``result_missing`` why
    (:func:`~kf_trainer_core.cluster.results.unusable`)."""
    result, withheld = carried(f"{job.namespace}/{job.name}", result)
    missing = missing or withheld
    cost = job_cost(job)
    return JobOutputs(
        name=job.name,
        namespace=job.namespace,
        status=job.status,
        runtime=job.runtime,
        steps=job.steps,
        metrics=job.progress.metrics if job.progress else {},
        result=result,
        duration_seconds=cost.wall_seconds if job.completion_timestamp else None,
        failure=job.failure,
        queue=job.queue,
        worker=job.worker,
        pending_seconds=cost.pending_seconds,
        running_seconds=cost.running_seconds,
        gpu_hours=cost.gpu_hours,
        progress=job.progress,
        result_missing=missing,
    )


__all__ = ["JobOutputs", "outputs"]
