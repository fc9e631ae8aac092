"""A job whose supervisor cannot be started is not left behind, never to run.

Starting the supervisor is a fork and an exec, which fail when the machine has no
process or memory to spare (EAGAIN, ENOMEM: a DAG's many parallel tasks). Before, the
create or resume that needed it stayed written: a job ``Created`` (or resumed) that
nothing ran — no supervisor, so no marker for a reader to notice — and the task's
retry, adopting it by its identity, waited for it for good."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest
from local_jobs import trivial

from kf_trainer_core.backends.local import procs
from kf_trainer_core.backends.local._common import Paths
from kf_trainer_core.backends.local.store import TRAINJOBS, Store
from kf_trainer_core.client import TrainerClient
from kf_trainer_core.cluster.status import JobState
from kf_trainer_core.config import LocalConfig
from kf_trainer_core.spec import CustomTrainer, Suspend, TrainJobSpec

REAL_POPEN = subprocess.Popen


class _NoSupervisor(REAL_POPEN):  # type: ignore[type-arg]
    """Popen, failing as a fork does on a machine out of processes, for supervisors."""

    def __init__(self, argv: Any, *args: Any, **kwargs: Any) -> None:
        if "kf_trainer_core.backends.local.supervisor" in list(argv):
            raise BlockingIOError(11, "Resource temporarily unavailable")
        super().__init__(argv, *args, **kwargs)


def test_a_submit_whose_supervisor_cannot_start_leaves_no_job(
    client: TrainerClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = TrainJobSpec(trainer=CustomTrainer(trivial))
    monkeypatch.setattr(procs.subprocess, "Popen", _NoSupervisor)
    with pytest.raises(Exception) as info:
        client.submit(spec, identity="starved")
    monkeypatch.setattr(procs.subprocess, "Popen", REAL_POPEN)
    assert client.list_jobs() == []
    assert "could not start the supervisor" in str(info.value)
    # The task's retry submits it afresh, and it runs.
    run = client.run(spec, identity="starved", timeout=60)
    assert (run.status, run.result) == (JobState.COMPLETE, {"doubled": 2})


def test_a_resume_whose_supervisor_cannot_start_leaves_the_job_suspended(
    client: TrainerClient, config: LocalConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = TrainJobSpec(trainer=CustomTrainer(trivial), options=[Suspend()])
    name = client.submit(spec).job.name
    client.wait_for_job_status(name, "Suspended", timeout=30)
    monkeypatch.setattr(procs.subprocess, "Popen", _NoSupervisor)
    with pytest.raises(Exception) as info:
        client.resume_job(name)
    monkeypatch.setattr(procs.subprocess, "Popen", REAL_POPEN)
    assert client.get_job(name).status is JobState.SUSPENDED
    store = Store(Paths(str(config.state_dir)).db)
    try:
        stored = store.get(TRAINJOBS, client.get_job(name).namespace, name)
    finally:
        store.close()
    assert stored is not None
    assert stored["spec"]["suspend"] is True  # a resume now starts it
    assert "could not start the supervisor" in str(info.value)
    client.resume_job(name)
    job, result = client.wait(name, timeout=60)
    assert (job.status, result) == (JobState.COMPLETE, {"doubled": 2})
