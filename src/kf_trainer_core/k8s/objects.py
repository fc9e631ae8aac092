"""Kubernetes objects as the apiserver, the kubelet and the controllers write them: pod
conditions, container statuses, Events, status conditions, owner references, generated
names and timestamps.

Whatever plays a part of Kubernetes here — the local backend on this machine, the test
server's controller in the test bed — builds its objects with these, so both write the
same shapes. Standard library only (the local supervisor imports it at start-up).
"""

from __future__ import annotations

import random
import time
from datetime import datetime, timezone
from typing import Any

JSON = dict[str, Any]

#: The apiserver's alphabet for ``generateName`` suffixes (no vowels, no look-alikes).
GENERATE_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"

#: The waiting reason of a container that is being created (image pulled, started).
CONTAINER_CREATING = "ContainerCreating"
#: ``Ready=False`` reasons of a pod: still starting, or done for good.
CONTAINERS_NOT_READY = "ContainersNotReady"
POD_COMPLETED = "PodCompleted"
POD_FAILED = "PodFailed"


def generate_suffix(length: int = 5) -> str:
    """A random suffix for a generated name (``generateName``, a Job's pods)."""
    return "".join(random.choices(GENERATE_NAME_CHARS, k=length))


def now_iso(when: datetime | None = None) -> str:
    """RFC 3339 to the second, as ``metav1.Time`` serialises (now, or ``when``)."""
    when = when or datetime.now(timezone.utc)
    return when.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def micro_now() -> str:
    """``metav1.MicroTime``, as ``Event.eventTime`` serialises."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def container_status(
    name: str,
    image: str,
    *,
    waiting: JSON | None = None,
    running_since: str | None = None,
    terminated: JSON | None = None,
    container_id: str = "",
    image_id: str = "",
) -> JSON:
    """One ``status.containerStatuses`` entry: waiting, running since a time, or
    terminated (exactly one of the three; running when neither of the others)."""
    status: JSON = {
        "name": name,
        "image": image,
        "imageID": image_id,
        "ready": running_since is not None,
        "restartCount": 0,
        "started": running_since is not None,
    }
    if container_id:
        status["containerID"] = container_id
    if waiting is not None:
        status["state"] = {"waiting": waiting}
    elif terminated is not None:
        status["state"] = {"terminated": terminated}
    else:
        status["state"] = {"running": {"startedAt": running_since}}
    return status


def pod_conditions(
    now: str,
    *,
    ready: bool,
    reason: str | None = None,
    scheduled: bool = True,
    initialized: bool = True,
    not_ready: list[str] | None = None,
) -> list[JSON]:
    """A pod's five conditions as the kubelet writes them. ``reason`` says why it is
    not ready (:data:`CONTAINERS_NOT_READY`, :data:`POD_COMPLETED`,
    :data:`POD_FAILED`); ``not_ready`` names the containers for the message."""

    def cond(kind: str, ok: bool, why: str | None = None, message: str | None = None) -> JSON:
        c: JSON = {
            "type": kind,
            "status": "True" if ok else "False",
            "lastProbeTime": None,
            "lastTransitionTime": now,
        }
        if not ok and why:
            c["reason"] = why
            if message:
                c["message"] = message
        return c

    msg = f"containers with unready status: [{' '.join(not_ready)}]" if not_ready else None
    return [
        cond("PodReadyToStartContainers", ready or reason in (POD_COMPLETED, POD_FAILED)),
        cond("Initialized", initialized),
        cond("Ready", ready, reason, msg),
        cond("ContainersReady", ready, reason, msg),
        cond("PodScheduled", scheduled),
    ]


def set_condition(
    conditions: list[JSON],
    kind: str,
    status: str,
    reason: str,
    message: str,
    *,
    probe: bool = False,
) -> None:
    """``meta.SetStatusCondition`` on ``conditions``: the transition time moves only
    with the status. ``probe`` adds the ``lastProbeTime`` batch/v1 Job conditions carry."""
    now = now_iso()
    for cond in conditions:
        if cond.get("type") == kind:
            if cond.get("status") != status:
                cond["status"] = status
                cond["lastTransitionTime"] = now
            cond["reason"], cond["message"] = reason, message
            if probe:
                cond["lastProbeTime"] = now
            return
    new: JSON = {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": now,
    }
    if probe:
        new["lastProbeTime"] = now
    conditions.append(new)


def object_reference(api_version: str, kind: str, name: str, namespace: str, uid: str) -> JSON:
    """An Event's ``involvedObject`` (a ``fieldPath`` may point into it:
    ``spec.containers{node}``)."""
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": name,
        "namespace": namespace,
        "uid": uid,
    }


def new_event(
    namespace: str,
    involved: JSON,
    type_: str,
    reason: str,
    message: str,
    component: str,
    *,
    host: str | None = None,
    action: str | None = None,
    seq: int = 0,
) -> JSON:
    """A core/v1 Event about ``involved``, named ``<involved name>.<hex>`` as the event
    recorder names them; ``host`` is the kubelet's node; ``seq`` keeps the names of
    events made in the same nanosecond apart."""
    now = now_iso()
    source: JSON = {"component": component}
    if host:
        source["host"] = host
    event: JSON = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": f"{involved.get('name')}.{time.time_ns() + seq:x}",
            "namespace": namespace,
        },
        "involvedObject": involved,
        "reason": reason,
        "message": message,
        "type": type_,
        "count": 1,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "eventTime": micro_now(),
        "source": source,
        "reportingComponent": component,
        "reportingInstance": host or component,
    }
    if action:
        event["action"] = action
    return event


def owner_reference(api_version: str, kind: str, name: str, uid: str) -> JSON:
    """A controller owner reference (the garbage collector deletes with the owner)."""
    ref = object_reference(api_version, kind, name, "", uid)
    del ref["namespace"]  # owners are in the object's namespace
    return {**ref, "controller": True, "blockOwnerDeletion": True}
