"""core/v1 Events and status conditions, as the simulated controllers record them."""

from __future__ import annotations

import itertools
import time
from datetime import datetime, timezone

from kf_trainer_core.testing.controller.state import JobSim, PodSim, Sim, safe
from kf_trainer_core.testing.controller.vocab import (
    JOB_COMPONENT,
    JOBSET_API,
    JOBSET_COMPONENT,
    JSON,
    TRAINER_API,
    TRAINER_COMPONENT,
)
from kf_trainer_core.testing.store import EVENTS, Store, format_timestamp


def micro_now() -> str:
    """The current time as ``metav1.MicroTime`` (how ``Event.eventTime`` serialises)."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def set_condition(
    conditions: list[JSON],
    type_: str,
    status: str,
    reason: str,
    message: str,
    *,
    probe: bool = False,
) -> None:
    """``meta.SetStatusCondition``: the transition time moves only with the status.
    ``probe`` adds the ``lastProbeTime`` that batch/v1 Job conditions carry."""
    now = format_timestamp()
    for cond in conditions:
        if cond["type"] == type_:
            if cond["status"] != status:
                cond["status"] = status
                cond["lastTransitionTime"] = now
            cond["reason"], cond["message"] = reason, message
            if probe:
                cond["lastProbeTime"] = now
            return
    cond = {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": now,
    }
    if probe:
        cond["lastProbeTime"] = now
    conditions.append(cond)


def owner_ref(api_version: str, kind: str, name: str, uid: str) -> JSON:
    """A controller owner reference (what cascading deletion follows)."""
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _involved(api_version: str, kind: str, name: str, namespace: str, uid: str) -> JSON:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": name,
        "namespace": namespace,
        "uid": uid,
    }


class Recorder:
    """Writes the Events of the TrainJob, JobSet, Job controllers and the kubelet."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._seq = itertools.count()

    def emit(
        self,
        namespace: str,
        involved: JSON,
        type_: str,
        reason: str,
        message: str,
        component: str,
        *,
        host: str | None = None,
        action: str | None = None,
        aggregate: dict[tuple[str, str, str], str] | None = None,
    ) -> None:
        """Create a core/v1 Event (or bump ``count`` of an identical one in ``aggregate``,
        as the event recorder's correlator does)."""
        now, micro = format_timestamp(), micro_now()
        key = (str(involved.get("uid")), reason, message)
        if aggregate is not None and key in aggregate:

            def bump(obj: JSON) -> None:
                obj["count"] = int(obj.get("count") or 1) + 1
                obj["lastTimestamp"] = now

            if safe(self.store.mutate, EVENTS, namespace, aggregate[key], bump) is not None:
                return
        name = f"{involved.get('name')}.{time.time_ns() + next(self._seq):x}"
        source: JSON = {"component": component}
        if host:
            source["host"] = host
        event: JSON = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": involved,
            "reason": reason,
            "message": message,
            "type": type_,
            "count": 1,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "eventTime": micro,
            "source": source,
            "reportingComponent": component,
            "reportingInstance": host or component,
        }
        if action:
            event["action"] = action
        if safe(self.store.create, EVENTS, event) is not None and aggregate is not None:
            aggregate[key] = name

    def trainjob(
        self,
        sim: Sim,
        type_: str,
        reason: str,
        message: str,
        *,
        action: str | None = None,
        component: str = TRAINER_COMPONENT,
    ) -> None:
        involved = _involved(TRAINER_API, "TrainJob", sim.name, sim.namespace, sim.uid)
        self.emit(
            sim.namespace,
            involved,
            type_,
            reason,
            message,
            component,
            action=action,
            aggregate=sim.event_keys,
        )

    def jobset(self, sim: Sim, type_: str, reason: str, message: str) -> None:
        involved = _involved(JOBSET_API, "JobSet", sim.name, sim.namespace, sim.jobset_uid)
        self.emit(sim.namespace, involved, type_, reason, message, JOBSET_COMPONENT)

    def job(self, job: JobSim, type_: str, reason: str, message: str) -> None:
        ns = job.sim.namespace
        involved = _involved("batch/v1", "Job", job.name, ns, job.uid)
        self.emit(ns, involved, type_, reason, message, JOB_COMPONENT)

    def pod(
        self,
        pod: PodSim,
        type_: str,
        reason: str,
        message: str,
        *,
        container: JSON | None = None,
        component: str = "kubelet",
    ) -> None:
        involved = _involved("v1", "Pod", pod.name, pod.namespace, pod.uid)
        if container is not None:
            involved["fieldPath"] = f"spec.containers{{{container.get('name')}}}"
        host = pod.node if component == "kubelet" else None
        self.emit(pod.namespace, involved, type_, reason, message, component, host=host)
