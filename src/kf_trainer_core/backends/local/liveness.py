"""Noticing, from the waiting side, that a job's supervisor died — and making sure its
processes die with it.

A supervisor (:mod:`kf_trainer_core.backends.local.supervisor`) is the only process that writes
its job's state. Killed with SIGKILL (the OOM killer, ``kill -9``, a container runtime
tearing down) it writes nothing more, and the job would read ``Running`` forever in a
long-lived submitter (an Airflow worker, a Prefect worker, a notebook): ``run()``
without a timeout hung, and only a *new* process (whose :meth:`LocalApi.reconcile
<kf_trainer_core.backends.local.api.LocalApi.reconcile>` runs once) cleaned up.

How a death is detected, without trusting pids (which are reused):

* the supervisor writes a marker, ``run/<uid>/supervising``, right after taking its
  job's lock (:class:`~kf_trainer_core.backends.local.procs.JobLock`, an ``flock`` the kernel
  drops when the holder dies), and removes it before it lets go of the lock whenever it
  ends on its own terms (job finished, suspended, deleted; SIGTERM included);
* so a marker whose lock can be taken means a supervisor that died without cleaning up.
  :func:`~kf_trainer_core.backends.local.recovery.check_supervisors` looks for such
  markers — a directory listing and one non-blocking ``flock`` per running job — at most
  once a second per state directory, from the reads and watches every wait already makes
  (``LocalApi`` reads of TrainJobs and pods, and the TrainJob watch streams), so a
  waiting client sees the job ``Failed``, with the reason on its pods, within about a
  second, without a new process. Holding the lock while it repairs the job keeps a
  supervisor that starts meanwhile (a resume, another process's reconcile) waiting until
  the job says Failed; that supervisor then finds it finished and leaves it alone.

How its processes are kept from outliving it (the "orphan" problem): each pod process
runs in a session of its own (so a pod's whole group can be signalled), which also means
nothing kills it when the supervisor dies. Two layers, because neither is enough alone:

* Linux's ``PR_SET_PDEATHSIG`` (:func:`die_with_parent`), set in each pod process before
  it runs: the kernel SIGKILLs it the moment the supervisor dies, whoever is watching —
  no client needs to be running. It covers only the supervisor's direct children;
* the repair above then kills every process carrying the job's uid in its environment
  (``kill_tree([], uid)``: grandchildren, daemons that left their group), as a
  supervisor's own clean-up would.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import sys
from collections.abc import Callable
from pathlib import Path

from kf_trainer_core.backends.local._common import Paths

MARKER = "supervising"


def marker_path(paths: Paths, uid: str) -> Path:
    """The marker a running supervisor of job ``uid`` keeps."""
    return paths.run_dir(uid) / MARKER


def mark_supervising(paths: Paths, uid: str) -> None:
    """Called by the supervisor once it holds the job's lock."""
    path = marker_path(paths, uid)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{os.getpid()}\n")


def unmark_supervising(paths: Paths, uid: str) -> None:
    """Called by the supervisor before it releases the lock, however it ends (short of
    being killed)."""
    with contextlib.suppress(FileNotFoundError):
        marker_path(paths, uid).unlink()


def forget_run(paths: Paths, uid: str) -> None:
    """Remove the run directory of job ``uid``, which is gone (its marker, supervisor
    log, program): done by whoever finds it gone while holding its lock — a supervisor
    started for a job deleted before it took the lock (a reconcile or a resume that read
    the job before the delete), the repair of one killed in its purge — since nothing
    else looks there again."""
    shutil.rmtree(paths.run_dir(uid), ignore_errors=True)


def die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that has the kernel SIGKILL the child when the process that
    started it dies (Linux ``PR_SET_PDEATHSIG``); ``None`` elsewhere.

    Resolved before the fork, so that the child only makes one libc call between fork
    and exec (no imports, no locks: safe although the supervisor has threads). The
    signal fires when the *thread* that forked exits; the supervisor starts pods from
    its main thread, which lives as long as the process."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()
    pr_set_pdeathsig = 1
    sigkill = int(signal.SIGKILL)

    def preexec() -> None:
        prctl(pr_set_pdeathsig, sigkill, 0, 0, 0)
        if os.getppid() != parent:  # the supervisor died before the call: go too
            os._exit(137)

    return preexec


__all__ = [
    "MARKER",
    "die_with_parent",
    "forget_run",
    "mark_supervising",
    "marker_path",
    "unmark_supervising",
]
