"""A job that restarts or cannot start, explained once: what ``get_job`` says, what a
wait that runs out of time says (with the fix of the failure class and what the wait
leaves behind), what ``kf-trainer jobs get`` and ``jobs wait`` print.

Restarting: a training program that exits 3 on the upstream runtime, whose Jobs keep
Kubernetes' default ``backoffLimit`` of 6: the Job controller runs it seven times, for
about ten minutes on a real cluster, while the TrainJob reads Running and Created by
turns. Pending: a step that asks more GPUs than any node has. One body on the test bed
and the real controllers."""

from __future__ import annotations

import json
import re

import pytest
from conformance_support import Cluster, until, wait_on
from test_real_controllers import cli

from kf_trainer_core.client import AsyncTrainerClient, TrainerClient
from kf_trainer_core.cluster.status import JobState, TrainJob
from kf_trainer_core.errors import FailureClass, TrainJobTimeoutError
from kf_trainer_core.spec import CustomTrainer, TrainJobSpec

RETRYING = re.compile(
    r"step node-0 is failing and being retried \(attempt (\d) of 7, exit code 3\)"
)


def restarting(client: TrainerClient, name: str) -> TrainJob:
    """The job once it shows a retried step."""

    def seen() -> TrainJob | None:
        job = client.get_job(name)
        return job if job.waiting is not None and job.waiting.state == "Restarting" else None

    found: TrainJob = until(seen, timeout=90, what="a restarting step")
    return found


@pytest.mark.parametrize("face", ["sync", "async"])
async def test_a_retried_step_is_restarting_with_its_attempt(
    controllers: Cluster,
    client: TrainerClient,
    aclient: AsyncTrainerClient,
    face: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    name = client.submit(controllers.spec("retry")).job.name
    job = restarting(client, name)
    waiting = job.waiting
    assert waiting is not None
    assert job.status in (JobState.CREATED, JobState.RUNNING)
    assert job.display_status == "Restarting"
    assert waiting.attempts == 7  # backoffLimit 6, read from the JobSet
    assert waiting.attempt is not None
    assert 2 <= waiting.attempt <= 7
    assert waiting.exit_code == 3
    assert waiting.step == "node-0"
    assert waiting.failure_class is FailureClass.USER_CODE
    assert RETRYING.fullmatch(waiting.reason), waiting.reason

    with pytest.raises(TrainJobTimeoutError) as info:
        await wait_on(face, client, aclient, name, timeout=2)
    err = info.value
    lines = str(err).splitlines()
    assert err.waiting is not None
    assert err.waiting.state == "Restarting"
    assert err.failure_class is FailureClass.USER_CODE
    assert RETRYING.search(lines[0]), lines
    assert lines[1] == "failure class: user-code — the training program exited with code 3"
    # One fix for the class, not "a retry will not help" beside "wait longer".
    assert lines[2].startswith("fix: read the step's log (")
    assert f"jobs logs {name} --step node-0" in lines[2]
    assert "wait longer" not in str(err)
    assert "retry will not help" not in str(err)
    assert lines[3].startswith(
        f"left behind: TrainJob {controllers.namespace}/{name} still exists (Restarting); "
        "delete it with: "
    )
    assert f"jobs delete {name}" in lines[3]
    assert f"client.delete_job('{name}')" in lines[3]

    code, out = cli(capsys, controllers, "jobs", "get", name)
    assert code == 0, out
    (status,) = [line for line in out.splitlines() if line.startswith("Status:")]
    assert RETRYING.search(status), out
    assert "Restarting: " in status, out
    assert "Class:     user-code — the training program exited with code 3" in out
    code, out = cli(capsys, controllers, "jobs", "list", "-o", "table")
    assert code == 0, out
    assert re.search(rf"{name}\s+\S+\s+Restarting\s", out), out
    code, out = cli(capsys, controllers, "jobs", "get", name, "-o", "json")
    assert json.loads(out)["job"]["waiting"]["state"] == "Restarting"

    code, out = cli(capsys, controllers, "jobs", "wait", name, "--timeout", "2")
    assert code == 5, out
    assert RETRYING.search(out), out
    assert "Fix: wait longer" not in out
    assert client.delete_job(name)


def test_a_job_too_big_for_any_node_is_pending_with_the_schedulers_reason(
    controllers: Cluster, client: TrainerClient, capsys: pytest.CaptureFixture[str]
) -> None:
    # Every node (kwok's and the test bed's) has 8 GPUs.
    trainer = CustomTrainer(controllers.spec().trainer.func, resources_per_node={"gpu": 16})
    name = client.submit(TrainJobSpec(trainer=trainer)).job.name
    pending = "Pending: step node-0 cannot be scheduled: 0/4 nodes can give it 16 nvidia.com/gpu (each has fewer in all or fewer unused)"

    def shown() -> TrainJob | None:
        job = client.get_job(name)
        return job if job.waiting is not None else None

    job = until(shown, what="an unschedulable pod")
    assert job.status is JobState.CREATED
    assert job.waiting is not None
    assert job.waiting.line() == pending
    assert job.waiting.failure_class is FailureClass.CAPACITY

    with pytest.raises(TrainJobTimeoutError) as info:
        client.wait(name, timeout=1)
    text = str(info.value)
    assert info.value.failure_class is FailureClass.CAPACITY
    # The scheduler's reason once, one fix, and what is left behind.
    assert text.count("nvidia.com/gpu") == 1, text
    assert text.splitlines()[0].endswith(f"within 1s; it is {pending}")
    assert "retry will not help" not in text
    assert "wait longer" not in text
    assert "left behind: " in text
    assert f"jobs delete {name}" in text

    code, out = cli(capsys, controllers, "jobs", "get", name)
    assert code == 0, out
    assert f"Status:    {pending}" in out, out
    code, out = cli(capsys, controllers, "jobs", "wait", name, "--timeout", "1")
    assert code == 5, out
    # The progress line says it while the command waits; the error, once.
    progress, error = out.split("kf-trainer: ", 1)
    assert "Pending step node-0 cannot be scheduled" in progress, out
    assert "Created" not in progress, out
    assert error.count("nvidia.com/gpu") == 1, out
    assert client.delete_job(name)
