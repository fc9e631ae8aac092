"""Processes: the per-job lock that says a supervisor is alive, starting a detached
supervisor, and killing a job's process trees without leaving strays.

A job's processes are found two ways, so that none escapes: by process group (each
rank starts a session of its own, and its children stay in its group) and — on Linux —
by the ``KF_TRAINER_LOCAL_JOB_UID`` variable every one of them inherits, which also
finds a grandchild that left the group with ``setsid``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from kf_trainer_core.backends.local._common import JOB_UID_ENV, ORIGINAL_PYTHONPATH_ENV, Paths

#: How long a process gets between SIGTERM and SIGKILL (the pod's grace period).
GRACE_SECONDS = 5.0


class JobLock:
    """An exclusive ``flock`` on ``locks/<uid>.lock``: held by the job's supervisor
    for as long as it runs, so "can I take it?" answers "is a supervisor alive?"
    without trusting pids (the kernel drops the lock when the holder dies)."""

    def __init__(self, paths: Paths, uid: str) -> None:
        self.path = paths.lock(uid)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd: int | None = None

    def acquire(self, blocking: bool = True) -> bool:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            os.close(fd)
            return False
        self._fd = fd
        return True

    def write_pid(self) -> None:
        """Record the holder's pid (read by cancellers to signal it)."""
        assert self._fd is not None
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, str(os.getpid()).encode(), 0)

    def holder_pid(self) -> int | None:
        try:
            text = self.path.read_text().strip()
        except OSError:
            return None
        return int(text) if text.isdigit() else None

    def release(self, remove: bool = False) -> None:
        if self._fd is None:
            return
        if remove:
            # Unlink while still holding it: a supervisor that opens the path later
            # gets a fresh file (and finds the job gone).
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)
        self._fd = None


def package_root() -> str:
    """The directory holding ``kf_trainer_core`` (site-packages, or ``src`` in a
    checkout), so that a supervisor starts even where only sys.path knew it."""
    import kf_trainer_core

    # From the package itself, not from this file's depth: a module that moves within
    # the package must not mount the wrong folder into a container.
    return str(Path(kf_trainer_core.__file__).resolve().parents[1])


def spawn_supervisor(paths: Paths, namespace: str, name: str, uid: str, cwd: str | None) -> None:
    """Start the job's supervisor in a session of its own: it outlives the process
    that submitted (an Airflow worker, a Prefect task), and a Ctrl-C there does not
    reach it."""
    run_dir = paths.run_dir(uid)
    run_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    original = env.get("PYTHONPATH", "")
    env[ORIGINAL_PYTHONPATH_ENV] = original
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root(), original) if p)
    env.pop(JOB_UID_ENV, None)
    workdir = cwd if cwd and os.path.isdir(cwd) else str(paths.root)
    with (run_dir / "supervisor.log").open("ab") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "kf_trainer_core.backends.local.supervisor",
                str(paths.root),
                namespace,
                name,
                uid,
            ],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=workdir,
            env=env,
            start_new_session=True,
            close_fds=True,
        )
    # Reap it when it ends, so no zombie lingers under a long-lived submitter.
    threading.Thread(target=proc.wait, name=f"kf-local-reap-{proc.pid}", daemon=True).start()


# ------------------------------------------------------------------ killing trees


def _answers(kill: Callable[[int, int], None], target: int, *, if_denied: bool) -> bool:
    """Whether a process (``os.kill``) or group (``os.killpg``) exists: signal 0."""
    try:
        kill(target, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return if_denied
    return True


def _alive(pid: int) -> bool:
    return _answers(os.kill, pid, if_denied=True)


def _group_alive(pgid: int) -> bool:
    return _answers(os.killpg, pgid, if_denied=False)


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return False
    return stat.rpartition(b")")[2].split()[0:1] == [b"Z"]


def processes_of_job(uid: str) -> list[int]:
    """Live processes whose environment carries the job's uid (Linux; elsewhere an
    empty list, and process groups do the work)."""
    marker = f"{JOB_UID_ENV}={uid}".encode() + b"\0"
    me = os.getpid()
    found: list[int] = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for entry in entries:
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as fh:
                env = fh.read()
        except OSError:  # gone, or not ours to read
            continue
        if (env.startswith(marker) or b"\0" + marker in env) and not _zombie(int(entry)):
            found.append(int(entry))
    return found


def signal_all(pgids: Iterable[int], pids: Iterable[int], sig: int) -> None:
    for pgid in pgids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def kill_tree(
    pgids: Iterable[int],
    uid: str | None = None,
    grace: float = GRACE_SECONDS,
    reap: Callable[[], None] | None = None,
) -> None:
    """SIGTERM the process groups (and every process of job ``uid``), wait up to
    ``grace`` seconds, then SIGKILL what is left — as the kubelet stops a pod.
    ``reap`` collects the caller's own exited children: until then they are zombies,
    and a group of zombies still answers signals."""
    groups = [g for g in set(pgids) if g > 1]
    pids = processes_of_job(uid) if uid else []
    if not groups and not pids:
        return
    signal_all(groups, pids, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if reap is not None:
            reap()
        groups = [g for g in groups if _group_alive(g)]
        pids = [p for p in pids if _alive(p) and not _zombie(p)]
        if uid:
            pids = sorted(set(pids) | set(processes_of_job(uid)))
        if not groups and not pids:
            return
        time.sleep(0.02)
    signal_all(groups, pids, signal.SIGKILL)
    if uid:
        # A process forked between the scan and the kill: one more sweep.
        time.sleep(0.02)
        signal_all([], processes_of_job(uid), signal.SIGKILL)
