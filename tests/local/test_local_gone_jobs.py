"""A deleted job leaves nothing in the state directory, whoever finds it gone.

A supervisor can start for a job that is already deleted: a reconcile (every new
process runs one) or a resume read the job, and its delete purged it before the
supervisor took the job's lock — at once after a submit, the spawned supervisor is still
starting. Before, that supervisor's start (its log, its marker) made ``run/<uid>/`` again
after the purge had removed it, and nothing removed it again; the repair of a supervisor
killed in its purge, after the job's rows went, left it too, and the lock file."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from local_helpers import wait_for
from local_jobs import resumable, sleeper, trivial

from kf_trainer_core.backends.local._common import Paths
from kf_trainer_core.backends.local.api import LocalApi
from kf_trainer_core.backends.local.liveness import mark_supervising
from kf_trainer_core.backends.local.procs import spawn_supervisor
from kf_trainer_core.backends.local.recovery import check_supervisors
from kf_trainer_core.backends.local.store import EVENTS, Store
from kf_trainer_core.client import TrainerClient
from kf_trainer_core.config import LocalConfig
from kf_trainer_core.spec import CustomTrainer, Suspend, TrainJobSpec


def _supervisors_of(uid: str) -> list[int]:
    """The running supervisors of job ``uid``."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if b"backends.local.supervisor" in cmdline and uid.encode() in cmdline:
            found.append(int(entry.name))
    return found


def _deleted_job(client: TrainerClient) -> tuple[str, str, str]:
    """A job submitted suspended (no supervisor runs it) and deleted: its namespace,
    name and uid."""
    spec = TrainJobSpec(trainer=CustomTrainer(sleeper), options=[Suspend()])
    job = client.submit(spec).job
    assert client.delete_job(job.name) is True
    return job.namespace, job.name, str(job.uid)


def test_a_supervisor_started_for_a_deleted_job_leaves_nothing(
    client: TrainerClient, config: LocalConfig
) -> None:
    paths = Paths(str(config.state_dir))
    namespace, name, uid = _deleted_job(client)
    assert not paths.run_dir(uid).exists()
    # As a reconcile or a resume that read the job before its delete does.
    spawn_supervisor(paths, namespace, name, uid, None)

    def started() -> bool:  # its command line is its own once it runs; or it is done
        return bool(_supervisors_of(uid)) or not paths.run_dir(uid).exists()

    wait_for(started, 30, "the supervisor's start")
    wait_for(lambda: not _supervisors_of(uid), 30, "the supervisor's end")
    assert not paths.run_dir(uid).exists()
    assert not paths.lock(uid).exists()


def test_the_repair_of_a_supervisor_killed_in_its_purge_leaves_nothing(
    client: TrainerClient, config: LocalConfig
) -> None:
    paths = Paths(str(config.state_dir))
    _, _, uid = _deleted_job(client)
    # What a supervisor killed after its purge removed the job's rows leaves.
    mark_supervising(paths, uid)
    store = Store(paths.db)
    try:
        check_supervisors(paths, store, force=True)
    finally:
        store.close()
    assert not paths.run_dir(uid).exists()
    assert not paths.lock(uid).exists()


def test_a_delete_cut_short_leaves_the_job_to_delete_again(
    client: TrainerClient, config: LocalConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Ctrl-C in ``jobs delete`` while the job's workspace is being removed (a large
    one takes a while) leaves the job listed as deleting, and the next delete removes
    what is left. The rows went first: the job vanished from every list and its
    workspace (checkpoints, a model) stayed on disk for good."""
    name = client.train(trainer=CustomTrainer(trivial))
    job, _ = client.wait(name, timeout=60)
    paths = Paths(str(config.state_dir))
    workspace = paths.workspace(job.namespace, name, str(job.uid))
    assert workspace.is_dir()
    real_rmtree = shutil.rmtree

    def interrupted(path: Any, *args: Any, **kwargs: Any) -> None:
        if Path(path) == workspace:
            raise KeyboardInterrupt
        real_rmtree(path, *args, **kwargs)

    api = LocalApi(Path(str(config.state_dir)))
    try:
        monkeypatch.setattr(shutil, "rmtree", interrupted)
        with pytest.raises(KeyboardInterrupt):
            api.delete_trainjob(job.namespace, name, "Background")
        monkeypatch.setattr(shutil, "rmtree", real_rmtree)
        assert client.get_job(name).deleting
        api.delete_trainjob(job.namespace, name, "Background")
    finally:
        api.close()
    assert not workspace.exists()
    assert client.list_jobs() == []


def test_a_deleted_job_that_was_suspended_leaves_no_events(
    client: TrainerClient, config: LocalConfig
) -> None:
    """The events of the pods a suspension deleted (Scheduled, Created, Started,
    Killing) went neither with those pods nor with the job: no reader shows a gone pod's
    events, and the purge finds the events of the pods the job still has. They stayed
    in the state database for good, four more rows per pod at every suspension."""
    name = client.train(trainer=CustomTrainer(resumable, func_args={"marker": "/workspace/m"}))
    client.wait_for_job_status(name, "Running", timeout=60)
    wait_for(lambda: "first run: sleeping" in client.get_job_logs(name), 60, "the first run")
    client.suspend_job(name)
    client.wait_for_job_status(name, "Suspended", timeout=60)
    client.resume_job(name)
    assert client.wait(name, timeout=60)[1] == "second run"
    assert client.delete_job(name) is True
    store = Store(Paths(str(config.state_dir)).db)
    try:
        events, _ = store.select(EVENTS)
    finally:
        store.close()
    assert [e["involvedObject"]["name"] for e in events] == []
