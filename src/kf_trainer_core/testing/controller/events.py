"""core/v1 Events as the simulated controllers record them (shapes from
:mod:`kf_trainer_core.k8s.objects`, which also holds ``set_condition`` and
``owner_reference``)."""

from __future__ import annotations

import itertools

from kf_trainer_core.k8s.objects import micro_now, new_event, object_reference
from kf_trainer_core.k8s.trainjob import (
    JOB_API,
    JOB_COMPONENT,
    JOBSET_API,
    JOBSET_COMPONENT,
    KUBELET,
    SCHEDULER,
    TRAINER_API,
    TRAINER_COMPONENT,
)
from kf_trainer_core.testing.controller.state import JobSim, PodSim, Sim, safe
from kf_trainer_core.testing.controller.vocab import JSON
from kf_trainer_core.testing.store import EVENTS, Store, format_timestamp


class Recorder:
    """Writes the Events of the TrainJob, JobSet, Job controllers and the kubelet."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._seq = itertools.count()

    def emit(self, event: JSON, aggregate: dict[tuple[str, str, str], str] | None = None) -> None:
        """Create ``event`` — or count a repeat of an identical one in ``aggregate``, as
        the event recorders do: core/v1's correlator bumps ``count`` each time;
        events.k8s.io/v1's writes its first repeat at once as ``series.count`` 2 and
        keeps later ones in its cache until its 6-minute heartbeat (not simulated)."""
        meta, involved = event["metadata"], event["involvedObject"]
        key = (str(involved.get("uid")), str(event["reason"]), str(event["message"]))
        if aggregate is not None and key in aggregate:
            name = aggregate[key]
            if not name:
                return  # a series already written
            now = format_timestamp()
            series = event.get("lastTimestamp") is None

            def bump(obj: JSON) -> None:
                if series:
                    obj["series"] = {"count": 2, "lastObservedTime": micro_now()}
                    return
                obj["count"] = int(obj.get("count") or 1) + 1
                obj["lastTimestamp"] = now

            if safe(self.store.mutate, EVENTS, meta["namespace"], name, bump) is not None:
                if series:
                    aggregate[key] = ""
                return
        if safe(self.store.create, EVENTS, event) is not None and aggregate is not None:
            aggregate[key] = str(meta["name"])

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
        involved = object_reference(TRAINER_API, "TrainJob", sim.name, sim.namespace, sim.uid)
        what = (type_, reason, message, component)
        self._about(involved, what, action=action, aggregate=sim.event_keys, series=True)

    def jobset(self, sim: Sim, type_: str, reason: str, message: str) -> None:
        involved = object_reference(JOBSET_API, "JobSet", sim.name, sim.namespace, sim.jobset_uid)
        self._about(involved, (type_, reason, message, JOBSET_COMPONENT))

    def job(self, job: JobSim, type_: str, reason: str, message: str) -> None:
        involved = object_reference(JOB_API, "Job", job.name, job.sim.namespace, job.uid)
        self._about(involved, (type_, reason, message, JOB_COMPONENT))

    def pod(
        self,
        pod: PodSim,
        type_: str,
        reason: str,
        message: str,
        *,
        container: JSON | None = None,
        component: str = KUBELET,
    ) -> None:
        """An Event about ``pod`` (from the kubelet unless ``component`` says otherwise);
        ``container`` points it at one of its containers."""
        involved = object_reference("v1", "Pod", pod.name, pod.namespace, pod.uid)
        if container is not None:
            involved["fieldPath"] = f"spec.containers{{{container.get('name')}}}"
        host = pod.node if component == KUBELET else None
        self._about(involved, (type_, reason, message, component), host=host)

    def _about(
        self,
        involved: JSON,
        what: tuple[str, str, str, str],
        *,
        action: str | None = None,
        host: str | None = None,
        aggregate: dict[tuple[str, str, str], str] | None = None,
        series: bool = False,
    ) -> None:
        """Emit an Event (type, reason, message, component) about ``involved``, in its
        namespace, as the component's recorder writes it (``series``: through the
        events.k8s.io/v1 API whatever the component)."""
        component = what[3]
        if component in _EVENTS_V1_ACTIONS:
            series = True
            action = action or _EVENTS_V1_ACTIONS[component].get(what[1], "Reconciling")
        event = new_event(
            involved["namespace"], involved, *what, action=action, host=host, seq=next(self._seq)
        )
        if series:
            # Recorded through the events.k8s.io/v1 API (the Trainer, JobSet and the
            # scheduler), as read back from core/v1: eventTime in microseconds, an
            # action, no source, first/lastTimestamp nor count, repeats counted in
            # `series` (seen on the real control plane).
            event.update(firstTimestamp=None, lastTimestamp=None, source={})
            del event["count"]
        else:
            # core/v1's recorder (the Job controller, the kubelet): no eventTime, and the
            # reporting instance is the source's host (none but the kubelet's).
            event.update(eventTime=None, reportingInstance=host or "")
        self.emit(event, aggregate=aggregate)


#: The components whose events are recorded through the events.k8s.io/v1 API, with the
#: action of each reason (controller-runtime's recorder says ``Reconciling``).
_EVENTS_V1_ACTIONS: dict[str, dict[str, str]] = {
    TRAINER_COMPONENT: {},
    JOBSET_COMPONENT: {},
    SCHEDULER: {"Scheduled": "Binding", "FailedScheduling": "Scheduling"},
}
