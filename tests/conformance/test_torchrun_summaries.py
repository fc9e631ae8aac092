"""A distributed job's failure classed from what its pod's termination message carries:
torchrun's failure summary (what the kubelet keeps of a failed container's log with
``FallbackToLogsOnError``: its last 80 lines or 2 KiB). kwok's pods serve no log, so the
message is all the evidence; the test bed plays the same pods. One body on both servers:
the wait raises the class's error and names the rank, never torchrun's banner."""

from __future__ import annotations

import pytest
from conformance_support import Cluster
from torchrun_texts import Worker, fixture, torchrun_log, traceback

from kf_trainer_core.client import TrainerClient
from kf_trainer_core.errors import (
    TrainJobCapacityError,
    TrainJobFailedError,
    TrainJobInfrastructureError,
    TrainJobUserCodeError,
)


def kubelet_message(lines: list[str]) -> str:
    """What FallbackToLogsOnError keeps of a log: its last 80 lines or 2048 bytes."""
    return "\n".join(lines[-80:]).encode()[-2048:].decode(errors="ignore")


OOM = traceback(["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.91 TiB."])

CASES = [
    ("sigkilled-worker", fixture("gloo_worker_sigkill.log"), TrainJobInfrastructureError,
     "rank 0 on node-0 was killed by SIGKILL"),
    ("cuda-oom", torchrun_log(Worker(0, OOM)), TrainJobCapacityError,
     "rank 0 on node-0 ran out of GPU memory: torch.OutOfMemoryError: CUDA out of memory."),
    # The 2 KiB keep the summary, not the worker's error above it: rank 1 (the root
    # cause), not rank 0 (SIGTERMed by torchrun because rank 1 failed).
    ("value-error-rank-1", fixture("gloo_valueerror_rank1.log"), TrainJobUserCodeError,
     "rank 1 on node-0 exited with code 1"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("log", "error", "evidence"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_a_termination_message_with_torchruns_summary_is_classed(
    client: TrainerClient,
    controllers: Cluster,
    log: list[str],
    error: type[TrainJobFailedError],
    evidence: str,
) -> None:
    runtime = controllers.fast_fail_runtime()
    message = kubelet_message(log)
    spec = controllers.spec("fail", runtime=runtime, exit_code=1, message=message)
    name = client.submit(spec).job.name
    with pytest.raises(TrainJobFailedError) as info:
        client.wait(name, timeout=120)
    assert isinstance(info.value, error), str(info.value)
    failure = info.value.failure
    assert (failure.step, failure.exit_code) == ("node-0", 1)
    assert failure.classified_by.startswith(evidence), failure.classified_by
    assert "====" not in failure.classified_by
    assert failure.log_tail == []  # no log was served: the message was the evidence
    assert client.explain_failure(name).failure_class is info.value.failure_class
