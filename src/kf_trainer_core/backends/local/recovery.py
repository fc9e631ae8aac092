"""Repairing, from the waiting side, a job whose supervisor died: how the death is told
(a marker whose lock can be taken) and why the pod processes die too is
:mod:`kf_trainer_core.backends.local.liveness`; this module is the half that needs a
:class:`~kf_trainer_core.backends.local.supervisor.JobSupervisor` to bring the job to an
honest state, so it sits above the supervisor (which itself only marks and unmarks)."""

from __future__ import annotations

import threading
import time

from kf_trainer_core.backends.local._common import Paths
from kf_trainer_core.backends.local.liveness import MARKER, forget_run, unmark_supervising
from kf_trainer_core.backends.local.procs import JobLock, kill_tree
from kf_trainer_core.backends.local.store import Store

#: How often (at most) one process looks for dead supervisors in one state directory.
CHECK_SECONDS = 1.0

#: What a pod that was running says when its supervisor was killed.
KILLED = (
    "the local supervisor of this job was killed while the pod ran (SIGKILL, the OOM "
    "killer, or the machine stopped); its processes were stopped"
)

_last_check: dict[str, float] = {}
_check_lock = threading.Lock()


def check_supervisors(paths: Paths, store: Store, *, force: bool = False) -> list[str]:
    """Repair the jobs of ``paths`` whose supervisor died (see the module's docstring);
    return their uids. Cheap, and throttled to once per :data:`CHECK_SECONDS` per state
    directory and process unless ``force``."""
    key = str(paths.root)
    now = time.monotonic()
    with _check_lock:
        if not force and now - _last_check.get(key, -CHECK_SECONDS) < CHECK_SECONDS:
            return []
        _last_check[key] = now
    try:
        markers = list((paths.root / "run").glob(f"*/{MARKER}"))
    except OSError:
        return []
    repaired = []
    for marker in markers:
        uid = marker.parent.name
        lock = JobLock(paths, uid)
        try:
            if not lock.acquire(blocking=False):
                continue  # alive
        except OSError:
            continue
        gone = False
        try:
            # Under the lock: a supervisor that ended normally removed its marker first.
            if marker.exists() and _repair(paths, store, uid):
                repaired.append(uid)
            unmark_supervising(paths, uid)
            gone = store.get_run(uid) is None  # deleted (its plan goes with it)
            if gone:
                forget_run(paths, uid)
        except Exception:  # a damaged entry must not break every read; retried later
            continue
        finally:
            lock.release(remove=gone)
    return repaired


def _repair(paths: Paths, store: Store, uid: str) -> bool:
    """Bring job ``uid``, whose supervisor died, to an honest state (the caller holds
    its lock): its processes stopped, and the job Failed with the reason on its pods —
    or purged if it was being deleted, Complete if its pods had all succeeded, or
    Suspended if it was being suspended."""
    # Lazy, downward: the supervisor (its kubelet, launcher, pod runners) loads only in
    # the rare process that finds a dead one, not in every LocalConfig client.
    from kf_trainer_core.backends.local.supervisor import JobSupervisor

    run = store.get_run(uid)
    if run is None:
        kill_tree([], uid, grace=1.0)  # the job is gone: only stray processes to stop
        return False
    namespace, name, plan = run
    supervisor = JobSupervisor(paths, namespace, name, uid)
    record = supervisor.record
    try:
        if not record.load():
            kill_tree([], uid, grace=1.0)
            return False
        supervisor.load_plan(plan)
        if record.deleting:
            supervisor.purge()
            return True
        kill_tree([], uid, grace=1.0)
        if record.terminal():
            return False
        if supervisor.complete_if_ended():
            return True
        if record.spec.get("suspend"):
            supervisor.drop_suspended(record.existing_pods())
            supervisor.ensure_suspended()
            return True
        stale = record.unfinished_pods()
        supervisor.recover(stale, KILLED)
        return True
    finally:
        supervisor.store.close()


__all__ = ["CHECK_SECONDS", "KILLED", "check_supervisors"]
