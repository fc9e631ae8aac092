"""A pod's process group is signalled only while its id is still the pod's.

Every rank leads a process group of its own, and the kubelet stops a pod by signalling
its groups. Once a rank has ended and been reaped, the kernel may give its id to any new
process (``pid_max`` is 32768 on many machines): another job's rank, a user's shell.
Before, a stop (a suspend, a delete, a failed peer) signalled the groups of every rank
the pod had started, and a supervisor that crashed those of every pod that had ever
run: a process that had since got one of their ids was killed. The tests give a reaped
rank's id to a stranger (another process group leader), as the kernel may."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

from kf_trainer_core.backends.local._common import NODE, Paths
from kf_trainer_core.backends.local.kubelet import ProcessRunner
from kf_trainer_core.backends.local.pods import PodRun
from kf_trainer_core.backends.local.supervisor import JobSupervisor

SLEEP = [sys.executable, "-c", "import time; time.sleep(60)"]


def _leader(argv: list[str]) -> subprocess.Popen[bytes]:
    """A process leading a session (and group) of its own, as a rank does."""
    return subprocess.Popen(argv, start_new_session=True)


def _pod_with_a_reused_rank(stranger: subprocess.Popen[bytes]) -> PodRun:
    """A pod of two ranks: one running, one that ended and was reaped long ago and whose
    id the kernel has since given to ``stranger``."""
    ended = _leader([sys.executable, "-c", "pass"])
    ended.wait()
    ended.pid = stranger.pid
    pod = PodRun(NODE, {"metadata": {"name": "job-node-0-0-abcde"}, "spec": {"containers": []}})
    pod.procs = [_leader(SLEEP), ended]
    return pod


def test_a_stop_leaves_the_process_that_got_a_reaped_ranks_id_alone() -> None:
    stranger = _leader(SLEEP)
    try:
        pod = _pod_with_a_reused_rank(stranger)
        ProcessRunner({pod.name: pod}, str(uuid.uuid4())).stop([pod])
        assert pod.procs[0].poll() is not None  # the running rank was stopped
        assert stranger.poll() is None, "a stop killed a process that was not the pod's"
    finally:
        stranger.kill()
        stranger.wait()


def test_a_crashed_supervisor_leaves_the_process_that_got_a_reaped_ranks_id_alone(
    tmp_path: Path,
) -> None:
    stranger = _leader(SLEEP)
    supervisor = JobSupervisor(Paths(tmp_path / "state"), "ns", "job", str(uuid.uuid4()))
    try:
        pod = _pod_with_a_reused_rank(stranger)
        supervisor.record.pods[pod.name] = pod
        supervisor.crashed(RuntimeError("the disk is full"))
        assert pod.procs[0].poll() is not None
        assert stranger.poll() is None, "a crash killed a process that was not the job's"
    finally:
        supervisor.store.close()
        stranger.kill()
        stranger.wait()
