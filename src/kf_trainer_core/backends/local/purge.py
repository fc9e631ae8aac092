"""Deleting a local job: its processes, containers, pods, logs, events, workspace, run
files and the TrainJob itself — what the garbage collector removes with a TrainJob.

Standard library only (the supervisor purges a job it finds deleted).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from typing import Any

from kf_trainer_core.backends.local._common import JOBSET_NAME_LABEL, Paths
from kf_trainer_core.backends.local.pods import sub_uid
from kf_trainer_core.backends.local.procs import kill_tree
from kf_trainer_core.backends.local.store import EVENTS, PODS, TRAINJOBS, Selector, Store


def purge_job(
    store: Store,
    paths: Paths,
    namespace: str,
    name: str,
    uid: str,
    reap: Callable[[], None] | None = None,
) -> None:
    """Kill the job's processes, then remove its logs and workspace, its pods, events
    and the TrainJob itself, and its run files. The caller holds the job's lock. Only
    what belongs to this job (by uid) goes: a new job of the same name is left alone.

    The files go before the rows that lead to them: a purge cut short (a Ctrl-C in
    ``jobs delete`` while a large workspace is removed, a supervisor killed) leaves the
    job ``deleting``, and the next delete, reconcile or repair purges it again. Removed
    after, they stayed on disk for good, the job gone from every list. The run
    directory (the supervisor's marker) goes last: the repair of a supervisor killed
    after the rows removes it (:func:`~kf_trainer_core.backends.local.liveness.forget_run`)."""
    kill_tree([], uid, reap=reap)
    plan = store.get_plan(uid) or {}
    if plan.get("container"):
        from kf_trainer_core.backends.local.container.runner import purge_containers

        purge_containers(dict(plan["container"]), uid)
    with store.read() as rtx:
        pods = [
            pod
            for pod in rtx.select(PODS, Selector(namespace), f"{name}-")
            if _owned(pod, name, uid)
        ]
    for pod in pods:
        shutil.rmtree(paths.log_dir(namespace, str(pod["metadata"]["name"])), ignore_errors=True)
    shutil.rmtree(paths.workspace(namespace, name, uid), ignore_errors=True)
    with store.write() as tx:
        for pod in pods:
            tx.delete(PODS, namespace, str(pod["metadata"]["name"]))
        pod_uids = {str(p["metadata"].get("uid")) for p in pods}
        owned = {uid, sub_uid(uid, "jobset"), *pod_uids}
        # Events are named "<involved object>.<suffix>": the job's start with its name.
        for event in tx.select(EVENTS, Selector(namespace), name):
            inv = event.get("involvedObject") or {}
            meta = event.get("metadata") or {}
            inv_uid = str(inv.get("uid", ""))
            if inv_uid in owned or (
                inv.get("kind") == "Job" and inv_uid == sub_uid(uid, str(inv.get("name")))
            ):
                tx.delete(EVENTS, namespace, str(meta["name"]))
        job = tx.get(TRAINJOBS, namespace, name)
        if job is not None and (job.get("metadata") or {}).get("uid") == uid:
            tx.delete(TRAINJOBS, namespace, name)
        tx.delete_plan(uid)
    shutil.rmtree(paths.run_dir(uid), ignore_errors=True)


def _owned(pod: dict[str, Any], name: str, uid: str) -> bool:
    """Whether ``pod`` is one of job ``name``'s of uid ``uid`` (its JobSet's label and its
    Job's owner reference)."""
    meta = pod.get("metadata") or {}
    owner = (meta.get("ownerReferences") or [{}])[0]
    return (meta.get("labels") or {}).get(JOBSET_NAME_LABEL) == name and owner.get(
        "uid"
    ) == sub_uid(uid, str(owner.get("name", "")))
