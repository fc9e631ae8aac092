"""What the real controllers do while a TrainJob is deleted.

In the background (the suite's default): the TrainJob is gone at once and the garbage
collector removes its JobSet (and, through it, Jobs and pods) in a pass of its own,
0.3-0.4 s later on a real control plane; the test bed's store waits
:data:`GC_PASS_SECONDS` (:attr:`Store.background_gc_delays`). Meanwhile the JobSet is
still there, owned by a uid that is gone.

In the foreground:
Trainer v2.3 reconciles a TrainJob that carries a ``deletionTimestamp`` like any other:
while the TrainJob waits (``foregroundDeletion`` finalizer) for the garbage collector,
it applies the JobSet again whenever the collector has deleted it, unless the job is
Complete. A Failed job is rebuilt too (measured on Trainer v2.3: its ``Failed``
condition disappears — only ``Suspended`` stays, when it is suspended — and a job of one
failing pod had 16 new pods in 20 s). The JobSet controller then creates its Jobs again,
and the Job controller their pods, unless the JobSet is suspended (the TrainJob's
``spec.suspend``). On a real control plane this goes on for a few rounds (seconds to
minutes) until the collector wins; the test bed's store plays one round of it,
synchronously, through :attr:`Store.foreground_hooks`: new objects (new uids) appear
and are collected, as a watch on the real server shows them.
"""

from __future__ import annotations

from typing import Any

from kf_trainer_core.k8s.trainjob import COMPLETE, FAILED, SUSPENDED, condition_true
from kf_trainer_core.testing.controller.vocab import JOBS, JSON
from kf_trainer_core.testing.store import (
    JOBSETS,
    PODS,
    TRAINJOBS,
    Resource,
    StoreError,
    json_copy,
)

#: How long after a TrainJob's background delete its dependents are collected.
GC_PASS_SECONDS = 0.3

#: Metadata the API server sets: a re-created object gets its own.
_SERVER_SET = (
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "finalizers",
    "generation",
    "managedFields",
)


def reapply_while_deleting(
    store: Any, trainjob: JSON, removed: list[tuple[Resource, JSON]]
) -> None:
    """Re-create what the collector just removed from an unfinished ``trainjob`` being
    deleted in the foreground: its JobSet (and other objects it owned) as the Trainer
    applies them, the Jobs as the JobSet controller does, and the pods as the Job
    controller does unless the job is suspended. A Failed job loses its condition first,
    as on the real Trainer. ``removed`` lists the removed objects, owners before
    dependents."""
    if condition_true(trainjob, COMPLETE):
        return
    suspended = bool((trainjob.get("spec") or {}).get("suspend"))
    if condition_true(trainjob, FAILED):
        meta = trainjob["metadata"]
        kept = [
            c
            for c in (trainjob.get("status") or {}).get("conditions") or []
            if c.get("type") == SUSPENDED and suspended
        ]
        store.patch(
            TRAINJOBS,
            meta.get("namespace"),
            meta["name"],
            {"status": {"conditions": kept}},
            subresource="status",
        )
    own = str(trainjob["metadata"]["uid"])
    renamed = {own: own}  # old owner uid -> the uid of its re-created object
    for res, obj in removed:
        meta = obj.get("metadata") or {}
        refs = [r for r in meta.get("ownerReferences") or [] if isinstance(r, dict)]
        if not any(r.get("uid") in renamed for r in refs):
            continue  # its owner was not re-created
        if res == PODS and suspended:
            continue  # a suspended Job has no pods
        fresh = json_copy(obj)
        fm = fresh["metadata"]
        for key in _SERVER_SET:
            fm.pop(key, None)
        fm["ownerReferences"] = [
            {**r, "uid": renamed.get(str(r.get("uid")), r.get("uid"))} for r in refs
        ]
        fresh.pop("status", None)
        if res in (JOBSETS, JOBS):
            fresh.setdefault("spec", {})["suspend"] = suspended
        if res == PODS:
            fresh["status"] = {"phase": "Pending"}
            fresh.get("spec", {}).pop("nodeName", None)
        try:
            created = store.create(res, fresh)
        except StoreError:  # e.g. a name still taken: the real controller retries later
            continue
        renamed[str(meta.get("uid"))] = str(created["metadata"]["uid"])
