"""What happens to a TrainJob when its Prefect task does not get to finish: a task
timeout or a flow run cancellation stops it (delete, or suspend by choice); a crash
leaves it running and a re-run of the flow run reattaches to it; the flow hooks stop
the jobs of tasks that waited in worker threads.

Signals are real: SIGTERM goes to this process, where Prefect's flow engine turns it
into ``TerminationSignal`` as it does for a runner's cancellation or an evicted pod.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any
from uuid import UUID

import pytest
from prefect import flow, unmapped
from prefect.client.orchestration import get_client
from prefect.exceptions import TerminationSignal
from prefect.states import Cancelling, Scheduled
from prefect_support import read_artifacts, read_logs, spec

from kf_trainer_core.client import TrainerClient
from kf_trainer_core.cluster.outputs import JobOutputs
from kf_trainer_core.cluster.status import JobState, TrainJob
from kf_trainer_prefect import (
    KubeflowTrainerCredentials,
    arun_trainjob,
    run_trainjob,
    stream_trainjob_logs,
    submit_trainjob,
    trainjob_cleanup_hook,
    wait_trainjob,
)
from kf_trainer_prefect._engine import FLOW_RUN_LABEL

pytestmark = pytest.mark.usefixtures("prefect_server")

NEVER = "never-finish"


def eventually(check: Callable[[], bool], what: str, limit: float = 30.0) -> None:
    """Wait for ``check`` (bounded, so that a bug fails instead of hanging)."""
    deadline = time.monotonic() + limit
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened: {what}")
        time.sleep(0.05)


def live(k8s: TrainerClient) -> list[TrainJob]:
    return [j for j in k8s.list_jobs() if not j.deleting]


@pytest.fixture
def sigterm_when() -> Iterator[Callable[..., threading.Thread]]:
    """Send SIGTERM to this process once a condition holds (and, first, run an
    action such as marking the flow run Cancelling).

    After handling a raw SIGTERM, Prefect sends it again to the handler that was there
    before the flow, so that the process exits as it was asked to: here that handler
    only records it, and the test process lives on.
    """
    threads: list[threading.Thread] = []
    received: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, _frame: received.append(signum))

    def arm(
        condition: Callable[[], bool], before: Callable[[], None] | None = None
    ) -> threading.Thread:
        def run() -> None:
            eventually(condition, "the moment to send SIGTERM")
            if before is not None:
                before()
            os.kill(os.getpid(), signal.SIGTERM)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        threads.append(thread)
        return thread

    try:
        yield arm
    finally:
        for thread in threads:
            thread.join(30)
        signal.signal(signal.SIGTERM, previous)


def running_job(k8s: TrainerClient, count: int = 1) -> Callable[[], bool]:
    return lambda: sum(j.status is JobState.RUNNING for j in k8s.list_jobs()) >= count


def flow_run_of(k8s: TrainerClient) -> str:
    return k8s.list_jobs()[0].labels[FLOW_RUN_LABEL]


def mark_cancelling(k8s: TrainerClient) -> Callable[[], None]:
    def mark() -> None:
        with get_client(sync_client=True) as client:
            client.set_flow_run_state(UUID(flow_run_of(k8s)), Cancelling(), force=True)

    return mark


# ----------------------------------------------------------------------- timeouts


@pytest.mark.parametrize("submitted", [False, True], ids=["main-thread", "worker-thread"])
def test_task_timeout_deletes_the_job(
    creds: KubeflowTrainerCredentials, k8s: TrainerClient, submitted: bool
) -> None:
    timed = run_trainjob.with_options(timeout_seconds=2.5)

    @flow
    def train() -> JobOutputs:
        if submitted:
            return timed.submit(spec(NEVER), creds).result()
        return timed(spec(NEVER), creds)

    state = train(return_state=True)
    assert state.is_failed()
    with pytest.raises(TimeoutError):
        state.result()
    eventually(lambda: live(k8s) == [], "the job is deleted")
    logs = read_logs(state.state_details.flow_run_id)
    assert any(line.startswith("Deleted TrainJob ") for line in logs)
    summaries = [a for a in read_artifacts(state.state_details.flow_run_id) if a.type == "markdown"]
    assert summaries
    assert "the job was deleted" in summaries[0].data


def test_own_timeout_can_suspend_instead(
    creds: KubeflowTrainerCredentials, k8s: TrainerClient
) -> None:
    @flow
    def train() -> JobOutputs:
        return run_trainjob(spec(NEVER), creds, timeout=1.0, on_cancel="suspend")

    state = train(return_state=True)
    assert state.is_failed()
    (job,) = k8s.list_jobs()
    eventually(lambda: k8s.get_job(job.name).status is JobState.SUSPENDED, "the job is suspended")


def test_keep_leaves_the_job_running(creds: KubeflowTrainerCredentials, k8s: TrainerClient) -> None:
    @flow
    def train() -> JobOutputs:
        job = submit_trainjob(spec(NEVER), creds)
        return wait_trainjob.with_options(timeout_seconds=2.0)(job, creds, on_cancel="keep")

    state = train(return_state=True)
    assert state.is_failed()
    (job,) = k8s.list_jobs()
    assert job.status is JobState.RUNNING
    k8s.delete_job(job.name)


def test_startup_timeout_explains_and_deletes(
    creds: KubeflowTrainerCredentials, k8s: TrainerClient
) -> None:
    @flow
    def train() -> JobOutputs:
        return run_trainjob(spec("image-pull"), creds, startup_timeout=1.0)

    state = train(return_state=True)
    with pytest.raises(TimeoutError, match="did not start"):
        state.result()
    eventually(lambda: live(k8s) == [], "the stuck job is deleted")


# ------------------------------------------------------------ cancellation, crash


def test_cancelled_flow_run_deletes_the_job(
    creds: KubeflowTrainerCredentials,
    k8s: TrainerClient,
    sigterm_when: Callable[..., threading.Thread],
) -> None:
    @flow
    def train() -> JobOutputs:
        return run_trainjob(spec(NEVER), creds)

    # What a runner does: the flow run is marked Cancelling, then its process gets SIGTERM.
    cancelled: list[str] = []
    mark = mark_cancelling(k8s)

    def before() -> None:
        cancelled.append(flow_run_of(k8s))
        mark()

    sigterm_when(running_job(k8s), before=before)
    with pytest.raises(TerminationSignal):
        train()
    eventually(lambda: live(k8s) == [], "the job is deleted")
    logs = read_logs(cancelled[0])
    assert any(line.startswith("Deleted TrainJob train-linear-") for line in logs)


def test_crash_keeps_the_job_and_a_rerun_reattaches(
    creds: KubeflowTrainerCredentials,
    k8s: TrainerClient,
    sigterm_when: Callable[..., threading.Thread],
) -> None:
    from prefect.flow_engine import run_flow

    @flow
    def train() -> JobOutputs:
        return run_trainjob(spec('{"preset": "success", "duration": 3.0}'), creds)

    # SIGTERM without a cancellation: infrastructure ending the process (a crash).
    sigterm_when(running_job(k8s))
    with pytest.raises(TerminationSignal):
        train()
    (job,) = live(k8s)
    assert job.status is JobState.RUNNING
    flow_run_id = UUID(job.labels[FLOW_RUN_LABEL])

    # What a worker does with a crashed run it is told to retry: run it again.
    with get_client(sync_client=True) as client:
        client.set_flow_run_state(flow_run_id, Scheduled(), force=True)
        flow_run = client.read_flow_run(flow_run_id)
    out = run_flow(train, flow_run=flow_run, return_type="result")
    assert isinstance(out, JobOutputs)
    assert out.name == job.name
    assert out.status is JobState.COMPLETE
    assert [j.name for j in k8s.list_jobs()] == [job.name]
    logs = read_logs(flow_run_id)
    assert any(line.startswith(f"TrainJob {job.name} keeps running") for line in logs)
    assert any(line.startswith(f"Reattached to TrainJob default/{job.name}") for line in logs)


@pytest.mark.parametrize("task", [run_trainjob, arun_trainjob], ids=["sync", "async"])
def test_hook_stops_the_jobs_of_tasks_in_worker_threads(
    task: Any,
    creds: KubeflowTrainerCredentials,
    k8s: TrainerClient,
    sigterm_when: Callable[..., threading.Thread],
) -> None:
    # Both faces learn of the task runner's shutdown (the async one used to wait on,
    # unaware, until the hook deleted its job under it).
    cleanup = trainjob_cleanup_hook(creds)

    @flow(on_crashed=[cleanup], on_cancellation=[cleanup])
    def sweep() -> list[Any]:
        futures = task.map(
            [spec(NEVER, nodes=1), spec(NEVER, nodes=2)], unmapped(creds), on_cancel="keep"
        )
        return futures.result()

    jobs: list[TrainJob] = []
    sigterm_when(running_job(k8s, 2), before=lambda: jobs.extend(k8s.list_jobs()))
    with pytest.raises(TerminationSignal):
        sweep()
    assert len(jobs) == 2
    eventually(lambda: live(k8s) == [], "the hook deleted both jobs")
    logs = read_logs(jobs[0].labels[FLOW_RUN_LABEL])
    # The tasks (on_cancel="keep") stopped waiting and left their jobs; the hook took them.
    assert sum(" keeps running (TaskRunnerShutdown" in line for line in logs) == 2
    if task is run_trainjob:
        for job in jobs:
            assert f"Deleted TrainJob {job.name}: the flow run is Crashed" in logs


# ------------------------------------------------- the sync face leaves nothing behind


def helpers() -> list[threading.Thread]:
    """The threads in which sync tasks run their coroutines."""
    return [t for t in threading.enumerate() if t.name == "kf-trainer-prefect" and t.is_alive()]


def test_interrupted_log_stream_leaves_no_helper(
    creds: KubeflowTrainerCredentials, k8s: TrainerClient
) -> None:
    # A job whose log is written at once, then stays quiet while it runs on.
    quiet = spec('{"preset": "never-finish", "duration": 0.5}')
    follow = stream_trainjob_logs.with_options(timeout_seconds=3.0)

    @flow
    def tail() -> int:
        job = submit_trainjob(quiet, creds)
        return follow(job, creds, follow=True)

    assert helpers() == []
    state = tail(return_state=True)
    assert state.is_failed()
    # The stream was closed before the task ended: no helper is left following it.
    assert helpers() == []
    (job,) = k8s.list_jobs()
    k8s.delete_job(job.name)


def test_interrupted_run_that_keeps_its_job_leaves_no_helper(
    creds: KubeflowTrainerCredentials, k8s: TrainerClient
) -> None:
    timed = run_trainjob.with_options(timeout_seconds=2.5)

    @flow
    def train() -> JobOutputs:
        return timed(spec(NEVER), creds, on_cancel="keep")

    assert helpers() == []
    state = train(return_state=True)
    assert state.is_failed()
    (job,) = k8s.list_jobs()
    assert job.status is JobState.RUNNING
    # The job runs on (on_cancel="keep"), but the task stopped waiting for it.
    assert helpers() == []
    k8s.delete_job(job.name)


def test_ready_made_flow_stops_its_job_when_cancelled(
    creds: KubeflowTrainerCredentials, k8s: TrainerClient
) -> None:
    from kf_trainer_prefect import trainjob_flow

    creds.save("kf-prefect-hook-test", overwrite=True)

    @flow
    def submit_only() -> TrainJob:
        return submit_trainjob(spec(NEVER), "kf-prefect-hook-test")

    state = submit_only(return_state=True)
    job = state.result()
    with get_client(sync_client=True) as client:
        flow_run = client.read_flow_run(state.state_details.flow_run_id)
    # The parameters a served run of trainjob_flow would have; its hook reads them.
    flow_run.parameters = {"spec": {}, "credentials": "kf-prefect-hook-test"}
    (hook,) = trainjob_flow.on_cancellation_hooks
    hook(trainjob_flow, flow_run, Cancelling())
    eventually(lambda: live(k8s) == [], f"{job.name} is deleted")
