"""A virtualenv build dies with the supervisor that runs it.

The supervisor builds a job's virtualenv (``use_venv=True``) itself, with ``uv`` (or
``python -m venv`` and pip) as its children. Killed (SIGKILL, the OOM killer), it left
the build running, orphaned: only the repair of a process that happened to read the
state directory stopped it, and meanwhile the next job asking for the same packages,
let in by the build's lock the kernel dropped, removed and rebuilt the virtualenv the
orphan was still installing into. Its pods' processes never outlived it (the kernel
kills them with it: ``local.liveness``); its build's now do not either."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from local_helpers import process_alive, wait_for
from local_jobs import trivial

from kf_trainer_core.backends.local._common import Paths
from kf_trainer_core.backends.local.procs import JobLock
from kf_trainer_core.client import TrainerClient
from kf_trainer_core.config import LocalConfig
from kf_trainer_core.spec import CustomTrainer

FAKE_UV = """#!/bin/sh
echo $$ > "$KF_TEST_UV_PID.tmp" && mv "$KF_TEST_UV_PID.tmp" "$KF_TEST_UV_PID"
exec sleep 600
"""


def test_a_killed_supervisor_takes_its_venv_build_with_it(
    state_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "uv").write_text(FAKE_UV)
    (bin_dir / "uv").chmod(0o755)
    pid_file = tmp_path / "uv.pid"
    # The supervisor starts with this process's environment: it finds this uv, which
    # builds for as long as a large install takes.
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("KF_TEST_UV_PID", str(pid_file))
    config = LocalConfig(state_dir=str(state_dir), use_venv=True)
    with TrainerClient(config) as client:
        name = client.train(trainer=CustomTrainer(trivial, packages_to_install=["kftiny"]))
        wait_for(pid_file.exists, 60, "the venv build")
        build = int(pid_file.read_text())
        uid = str(client.get_job(name).uid)
        supervisor = JobLock(Paths(str(state_dir)), uid).holder_pid()
        assert supervisor is not None
        assert process_alive(build)
        # No read of the state directory from here on: nothing repairs the job.
        os.kill(supervisor, signal.SIGKILL)
        wait_for(lambda: not process_alive(build), 20, "the build's end")
