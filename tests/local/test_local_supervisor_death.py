"""A job whose supervisor is killed fails, with the reason, in the process that waits
for it — within seconds and without a new process (issue 14, item 3) — and no process
of the job outlives the supervisor.

Before: after SIGKILL the training processes ran on, orphaned, and the job stayed
``Running`` in every process that had already opened the state directory (``run()``
without a timeout hung); after SIGTERM the processes stopped but the job still read
``Running``. Only a new process's start-up reconcile repaired it."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from pathlib import Path
from typing import Any

import pytest
from local_helpers import process_alive, wait_for
from local_jobs import sleep_on_rank, sleeper, spawn_tree

from kf_trainer_core.backends.local import workspace_of
from kf_trainer_core.backends.local._common import Paths
from kf_trainer_core.backends.local.procs import JobLock, processes_of_job
from kf_trainer_core.backends.local.store import PODS, TRAINJOBS, Store
from kf_trainer_core.client import AsyncTrainerClient, TrainerClient
from kf_trainer_core.cluster.status import JobState
from kf_trainer_core.config import LocalConfig
from kf_trainer_core.errors import TrainJobFailedError
from kf_trainer_core.spec import CustomTrainer, TrainJobSpec


def _supervisor_pid(config: LocalConfig, uid: str) -> int:
    pid = JobLock(Paths(str(config.state_dir)), uid).holder_pid()
    assert pid is not None
    return pid


def test_sigkilled_supervisor_fails_the_job_in_a_running_wait_and_leaves_no_orphan(
    client: TrainerClient, config: LocalConfig
) -> None:
    spec = TrainJobSpec(trainer=CustomTrainer(spawn_tree, func_args={"out": "/workspace/t"}))
    submitted: list[Any] = []
    outcome: list[BaseException] = []

    def run() -> None:
        try:
            client.run(spec, identity="sigkill", on_submitted=submitted.append)  # no timeout
        except BaseException as exc:
            outcome.append(exc)

    waiter = threading.Thread(target=run, daemon=True)
    waiter.start()
    wait_for(lambda: bool(submitted), 60, "the submit")
    job = submitted[0].job
    pids_file = Path(workspace_of(config, job.namespace, job.name, str(job.uid))) / "t/pids.txt"
    wait_for(pids_file.exists, 60, "the process tree")
    pids = [int(p) for p in pids_file.read_text().split()]
    assert all(process_alive(p) for p in pids)

    os.kill(_supervisor_pid(config, str(job.uid)), signal.SIGKILL)
    waiter.join(30)  # the same process, already past its start-up reconcile
    assert not waiter.is_alive(), "run() still waits for a job whose supervisor is dead"
    assert len(outcome) == 1
    assert isinstance(outcome[0], TrainJobFailedError)
    failure = outcome[0].failure
    assert "supervisor of this job was killed" in failure.message
    assert client.get_job(job.name).status is JobState.FAILED
    # Not one process of the job is left: not the ranks, nor their children, nor the
    # daemon that left the process group.
    wait_for(lambda: not [p for p in pids if process_alive(p)], 10, "the job's processes")
    assert processes_of_job(str(job.uid)) == []


def test_sigterm_fails_the_job_at_once(client: TrainerClient, config: LocalConfig) -> None:
    name = client.train(trainer=CustomTrainer(sleeper))
    job = client.wait_for_job_status(name, "Running", timeout=60)
    os.kill(_supervisor_pid(config, str(job.uid)), signal.SIGTERM)
    with pytest.raises(TrainJobFailedError) as info:
        client.wait(name, timeout=30)
    assert "SIGTERM" in info.value.failure.message
    assert processes_of_job(str(job.uid)) == []


async def test_async_wait_sees_a_killed_supervisor(
    aclient: AsyncTrainerClient, config: LocalConfig
) -> None:
    name = await aclient.train(trainer=CustomTrainer(sleeper))
    job = await aclient.wait_for_job_status(name, "Running", timeout=60)
    os.kill(_supervisor_pid(config, str(job.uid)), signal.SIGKILL)
    with pytest.raises(TrainJobFailedError, match="killed"):
        await aclient.wait(name, timeout=30)
    wait_for(lambda: not processes_of_job(str(job.uid)), 10, "the job's processes")

    # Its log ends too (the writer died with the supervisor): a follow does not hang.
    async def follow() -> list[str]:
        return [line async for line in aclient.get_job_logs(name, follow=True)]

    assert isinstance(await asyncio.wait_for(follow(), 20), list)


def test_a_job_whose_supervisor_died_while_suspending_resumes_and_runs(
    client: TrainerClient, config: LocalConfig
) -> None:
    """The supervisor is killed after the suspend was asked and before it acted on it:
    the reader that repairs the job suspends it as a JobSet suspends — its pods deleted
    (node-1's, which had succeeded, too: every node starts again), ``jobsStatus`` kept —
    so a resume runs the job again. The repair used to leave the dead pods ``Running``
    in the store, and the resumed supervisor took them for a crash and failed the job."""
    name = client.train(trainer=CustomTrainer(sleep_on_rank, num_nodes=2))
    job = client.wait_for_job_status(name, "Running", timeout=60)
    wait_for(
        lambda: any(
            s.name == "node-1" and s.status == "Succeeded" for s in client.get_job(name).steps
        ),
        60,
        "node-1's end",
    )
    pid = _supervisor_pid(config, str(job.uid))
    os.kill(pid, signal.SIGSTOP)  # it cannot act on the suspend
    try:
        client.suspend_job(name)
    finally:
        os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not process_alive(pid), 10, "the supervisor's end")
    client.wait_for_job_status(name, "Suspended", timeout=30)
    store = Store(Paths(str(config.state_dir)).db)
    try:
        pods, _ = store.select(PODS)
        stored = store.get(TRAINJOBS, job.namespace, name)
    finally:
        store.close()
    assert [p for p in pods if p["metadata"]["name"].startswith(f"{name}-")] == []
    assert stored is not None
    assert [s.get("name") for s in stored["status"]["jobsStatus"]] == ["node"]

    client.resume_job(name)
    assert client.wait_for_job_status(name, "Running", timeout=60).status is JobState.RUNNING
    client.delete_job(name)
