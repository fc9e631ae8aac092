"""A virtualenv build (``use_venv=True``) ends with the life of the supervisor that runs
it: killed, the build dies too; asked to stop (a delete), it stops the build.

The supervisor builds the virtualenv itself, with ``uv`` (or ``python -m venv`` and pip)
as its children, before the nodes start. Killed (SIGKILL, the OOM killer), it left the
build running, orphaned: only the repair of a process that happened to read the state
directory stopped it, and meanwhile the next job asking for the same packages, let in
by the build's lock the kernel dropped, removed and rebuilt the virtualenv the orphan
was still installing into. And a delete's nudge (SIGTERM) was read only once the build
had ended: the delete waited for the whole install (30 s, then it killed the
supervisor). The tests put on ``PATH`` a ``uv`` that builds for ten minutes."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import pytest
from local_helpers import process_alive, slow_venv_build, wait_for
from local_jobs import trivial

from kf_trainer_core.backends.local import api as local_api
from kf_trainer_core.backends.local._common import Paths
from kf_trainer_core.backends.local.procs import JobLock
from kf_trainer_core.client import TrainerClient
from kf_trainer_core.config import LocalConfig
from kf_trainer_core.spec import CustomTrainer


def _building(client: TrainerClient, state_dir: Path, pid_file: Path) -> tuple[str, int, int]:
    """A job whose supervisor is building its virtualenv: its name, the build's pid and
    the supervisor's."""
    name = client.train(trainer=CustomTrainer(trivial, packages_to_install=["kftiny"]))
    wait_for(pid_file.exists, 60, "the venv build")
    build = int(pid_file.read_text())
    supervisor = JobLock(Paths(str(state_dir)), str(client.get_job(name).uid)).holder_pid()
    assert supervisor is not None
    assert process_alive(build)
    return name, build, supervisor


def _deleted_by_its_supervisor(client: TrainerClient, name: str, supervisor: int) -> bool:
    """Delete job ``name``, whose supervisor the delete never kills here (the test sets
    ``DELETE_WAIT_SECONDS`` to 600): whether the delete returned ``True``. Before the
    fix it still waited 30 s later; the supervisor is then killed to let it finish."""
    deleted: list[bool] = []
    deleter = threading.Thread(target=lambda: deleted.append(client.delete_job(name)))
    deleter.start()
    try:
        wait_for(lambda: bool(deleted), 30, "the delete")
    finally:
        if deleter.is_alive():
            os.kill(supervisor, signal.SIGKILL)
            deleter.join(60)
    return deleted == [True]


def test_a_killed_supervisor_takes_its_venv_build_with_it(
    state_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pid_file = slow_venv_build(tmp_path, monkeypatch)
    with TrainerClient(LocalConfig(state_dir=str(state_dir), use_venv=True)) as client:
        _, build, supervisor = _building(client, state_dir, pid_file)
        # No read of the state directory from here on: nothing repairs the job.
        os.kill(supervisor, signal.SIGKILL)
        wait_for(lambda: not process_alive(build), 20, "the build's end")


def test_a_delete_stops_a_venv_build(
    state_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pid_file = slow_venv_build(tmp_path, monkeypatch)
    monkeypatch.setattr(local_api, "DELETE_WAIT_SECONDS", 600.0)
    with TrainerClient(LocalConfig(state_dir=str(state_dir), use_venv=True)) as client:
        name, build, supervisor = _building(client, state_dir, pid_file)
        assert _deleted_by_its_supervisor(client, name, supervisor)
        assert not process_alive(build)
        assert client.list_jobs() == []


def test_a_delete_stops_the_wait_for_another_jobs_build(
    state_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job waits while another builds the same virtualenv (its lock): deleting it
    stops the wait, not the other job's build."""
    pid_file = slow_venv_build(tmp_path, monkeypatch)
    monkeypatch.setattr(local_api, "DELETE_WAIT_SECONDS", 600.0)
    with TrainerClient(LocalConfig(state_dir=str(state_dir), use_venv=True)) as client:
        builder, build, _ = _building(client, state_dir, pid_file)
        waiter = client.train(trainer=CustomTrainer(trivial, packages_to_install=["kftiny"]))
        lock = JobLock(Paths(str(state_dir)), str(client.get_job(waiter).uid))
        wait_for(lambda: lock.holder_pid() is not None, 60, "the waiter's supervisor")
        supervisor = lock.holder_pid()
        assert supervisor is not None
        assert _deleted_by_its_supervisor(client, waiter, supervisor)
        assert process_alive(build)  # the other job's build goes on
        assert client.delete_job(builder) is True
