"""Events about a job, as the cluster records them: when each was last seen (the two
Event APIs stamp them differently), which belong to a job (by ownership, never by a
name prefix), and what two of them say — the Trainer could not build the JobSet, the
API server refuses a step's pods."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from kf_trainer_core.base import untrusted
from kf_trainer_core.cluster.failures import POD_CREATE_REFUSED_REASON, classify
from kf_trainer_core.cluster.status import Event, Failure
from kf_trainer_core.k8s.resources import JOB_INDEX_LABEL, REPLICATED_JOB_LABEL
from kf_trainer_core.k8s.trainjob import STEPS


def event_last_seen(obj: Mapping[str, Any]) -> datetime | None:
    """When an Event was last seen, as a datetime (``None`` if it says nothing usable).

    Recorders of the ``events.k8s.io/v1`` API (the real Trainer controller's) leave
    ``lastTimestamp`` empty, write ``eventTime`` in microseconds and count repeats in
    ``series``; older ones write ``lastTimestamp`` to the second. The stamps are parsed,
    never compared as text: ``...:57.327434Z`` sorts before ``...:57Z`` as a string."""
    series = obj.get("series")
    stamp = (
        (series.get("lastObservedTime") if isinstance(series, Mapping) else None)
        or obj.get("lastTimestamp")
        or obj.get("eventTime")
        or obj.get("firstTimestamp")
        or ((obj.get("metadata") or {}).get("creationTimestamp"))
    )
    return untrusted.timestamp(stamp)


def to_event(obj: Mapping[str, Any]) -> Event:
    """A core/v1 Event object as :class:`Event` (``events.k8s.io/v1`` series included)."""
    inv = obj.get("involvedObject") or {}
    series = obj.get("series")
    count = obj.get("count") or (series.get("count") if isinstance(series, Mapping) else None)
    return Event(
        involved_object_kind=str(inv.get("kind", "")),
        involved_object_name=str(inv.get("name", "")),
        message=str(obj.get("message", "")),
        reason=str(obj.get("reason", "")),
        event_time=event_last_seen(obj),
        type=str(obj.get("type", "Normal")),
        count=untrusted.whole_number(count, 1) or 1,
    )


def _step_jobs(job: str, steps: Iterable[str]) -> re.Pattern[str]:
    """The names the JobSet controller gives the Jobs of ``job``'s replicated jobs
    ``steps``: ``<job>-<step>-<index>`` (the step is the regex's group 1)."""
    alternatives = sorted(set(steps) - {""}, key=len, reverse=True)
    return re.compile(rf"{re.escape(job)}-({'|'.join(map(re.escape, alternatives))})-\d+")


def job_events(
    job: str,
    events: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]] = (),
    steps: Iterable[str] = (),
) -> list[Event]:
    """The events about a job, oldest first: its TrainJob and JobSet (the JobSet has the
    job's name), its Jobs and its pods.

    Which Jobs and pods are the job's is read from what owns them, never from a name
    prefix (TrainJob ``a`` must not show the events of TrainJob ``a-b``'s pods): a pod
    is the job's when it is among ``pods`` (the job's pods, selected by the JobSet's
    label); a Job when one of those pods names it as its owner, or when its name is
    exactly what the JobSet controller calls the Jobs of one of the job's replicated
    jobs (``<job>-<replicated job>-<index>``; ``steps``, else the Trainer's): a Job
    whose pods the API server refuses has no pod to name it."""
    pod_list = [p for p in pods if isinstance(p, Mapping)]
    pod_names = {str((p.get("metadata") or {}).get("name", "")) for p in pod_list}
    job_names = {
        str(ref.get("name"))
        for p in pod_list
        for ref in (p.get("metadata") or {}).get("ownerReferences") or []
        if isinstance(ref, Mapping) and ref.get("kind") == "Job"
    }
    replicated = {
        str(((p.get("metadata") or {}).get("labels") or {}).get(REPLICATED_JOB_LABEL, ""))
        for p in pod_list
    }
    jobs_of_steps = _step_jobs(job, {*STEPS, *steps, *replicated})
    out = []
    for ev in events:
        inv = ev.get("involvedObject") or {}
        name, kind = str(inv.get("name", "")), inv.get("kind")
        ours = (
            (kind in ("TrainJob", "JobSet") and name == job)
            or (kind == "Job" and (name in job_names or jobs_of_steps.fullmatch(name) is not None))
            or (kind == "Pod" and name in pod_names)
        )
        if ours:
            out.append(to_event(ev))
    return sorted(out, key=lambda e: (e.event_time is None, e.event_time or datetime.min))


def steps_of(obj: Mapping[str, Any]) -> list[str]:
    """The names of a TrainJob's replicated jobs, as its status lists them."""
    return [
        str(j.get("name"))
        for j in (obj.get("status") or {}).get("jobsStatus") or []
        if isinstance(j, Mapping) and j.get("name")
    ]


def refused_pods(
    events: Iterable[Event], pods: Iterable[Mapping[str, Any]], job: str
) -> Failure | None:
    """Why a step of ``job`` has no pod, when the API server refuses to create them: the
    newest ``FailedCreate`` Warning on one of its Jobs (``<job>-<step>-<index>``, a step
    of the Trainer's: another job named ``<job>-...`` must not be taken for it) that has
    no pod yet. The Job controller retries for ever, so a wait would otherwise only see
    a job that never starts."""
    ours = _step_jobs(job, STEPS)
    with_pods = {
        f"{job}-{labels.get(REPLICATED_JOB_LABEL)}-{labels.get(JOB_INDEX_LABEL)}"
        for labels in ((p.get("metadata") or {}).get("labels") or {} for p in pods)
    }
    refused = [
        (e, found.group(1))
        for e in events
        if e.type == "Warning"
        and e.reason == POD_CREATE_REFUSED_REASON
        and e.involved_object_kind == "Job"
        and (found := ours.fullmatch(e.involved_object_name))
        and e.involved_object_name not in with_pods
    ]
    if not refused:
        return None
    newest, step = refused[-1]
    klass, evidence = classify(reason=newest.reason, message=newest.message)
    return Failure(
        reason=newest.reason,
        message=newest.message,
        step=step,
        events=[e.line() for e, _ in refused[-3:]],
        failure_class=klass,
        classified_by=evidence,
    )
