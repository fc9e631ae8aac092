"""What the local controllers say about a job: the TrainJob as the supervisor last read
it, its ``Suspended``/``Complete``/``Failed`` conditions, ``status.jobsStatus`` and
``status.trainerStatus``, and the Events the Trainer, JobSet, Job controller, scheduler
and kubelet would emit — written with the shapes and words of
:mod:`kf_trainer_core.k8s.objects` and :mod:`kf_trainer_core.k8s.trainjob`.

Standard library only, like the supervisor that imports it.
"""

from __future__ import annotations

from typing import Any

from kf_trainer_core.backends.local._common import JOBSET_NAME_LABEL
from kf_trainer_core.backends.local.pods import JobPlace, PodRun, sub_uid
from kf_trainer_core.backends.local.store import EVENTS, PODS, TRAINJOBS, Selector, Store, Tx
from kf_trainer_core.emulation.jobs import JobCounts, replicated_job_status, trainjob_jobs_status
from kf_trainer_core.k8s.objects import new_event, object_reference, set_condition
from kf_trainer_core.k8s.trainjob import (
    JOB_API,
    JOB_COMPONENT,
    JOBSET_API,
    JOBSET_COMPONENT,
    KUBELET,
    SCHEDULER,
    SUSPENDED,
    TRAINER_API,
    condition_true,
    is_finished,
)

JSON = dict[str, Any]


class JobRecord:
    """The job's object and its status, read and written through the local store; the
    pods it runs (:attr:`pods`) and the replicated jobs it has, for ``jobsStatus``."""

    def __init__(self, store: Store, place: JobPlace) -> None:
        self.store = store
        self.place = place
        #: The TrainJob as last read or written, and its version ({} and None: none).
        self.job: JSON = {}
        self.job_rv: int | None = None
        #: The job's pods by name.
        self.pods: dict[str, PodRun] = {}
        #: The replicated jobs in JobSet order, each with the pods its Job runs (its
        #: completions; 0 until the job's layout is known).
        self.expected: dict[str, int] = {}
        #: Per pod: how many of its progress reports are in the job's status.
        self.progress_published: dict[str, int] = {}
        self._event_seq = 0

    # ------------------------------------------------------------------ reading

    @property
    def spec(self) -> JSON:
        return dict(self.job.get("spec") or {})

    def load(self) -> bool:
        """Read the job again if its version moved (one indexed SELECT when it did
        not); whether it is still this job (its uid)."""
        place = self.place
        rv = self.store.get_rv(TRAINJOBS, place.namespace, place.name)
        if rv != self.job_rv:
            obj = None if rv is None else self.store.get(TRAINJOBS, place.namespace, place.name)
            self.job, self.job_rv = ({}, None) if obj is None else (obj, rv)
        return (self.job.get("metadata") or {}).get("uid") == place.uid

    @property
    def rjobs(self) -> list[str]:
        return list(self.expected)

    @property
    def deleting(self) -> bool:
        return bool((self.job.get("metadata") or {}).get("deletionTimestamp"))

    def terminal(self) -> bool:
        return is_finished(self.job)

    def suspended(self) -> bool:
        """Whether the job says ``Suspended=True`` (not: whether its spec asks for it)."""
        return condition_true(self.job, SUSPENDED)

    def existing_pods(self) -> list[JSON]:
        """The job's pod objects in the store (from this or an earlier supervisor)."""
        with self.store.read() as tx:
            return [
                p
                for p in tx.select(PODS, Selector(self.place.namespace), f"{self.place.name}-")
                if ((p.get("metadata") or {}).get("labels") or {}).get(JOBSET_NAME_LABEL)
                == self.place.name
            ]

    def unfinished_pods(self) -> list[JSON]:
        """The stored pods that are still pending or running."""
        return [
            p
            for p in self.existing_pods()
            if (p.get("status") or {}).get("phase") in ("Pending", "Running", None)
        ]

    # ------------------------------------------------------------------ events

    def event(
        self,
        tx: Tx,
        kind: str,
        name: str,
        type_: str,
        reason: str,
        message: str,
        component: str,
        *,
        uid: str = "",
        field_path: str | None = None,
    ) -> None:
        """An Event about the job's ``kind`` object ``name`` (TrainJob, JobSet, Job or
        Pod) from ``component``, created in ``tx``."""
        place = self.place
        api = {"TrainJob": TRAINER_API, "JobSet": JOBSET_API, "Job": JOB_API}.get(kind, "v1")
        uid = uid or {
            "TrainJob": place.uid,
            "JobSet": sub_uid(place.uid, "jobset"),
            "Job": sub_uid(place.uid, name),
        }.get(kind, "")
        involved = object_reference(api, kind, name, place.namespace, uid)
        if field_path:
            involved["fieldPath"] = field_path
        self._event_seq += 1
        host = place.host if component == KUBELET else None
        what = (type_, reason, message, component)
        event = new_event(place.namespace, involved, *what, host=host, seq=self._event_seq)
        tx.create(EVENTS, event)

    def job_event(self, tx: Tx, rjob: str, type_: str, reason: str, message: str) -> None:
        name = self.place.job_name(rjob)
        self.event(tx, "Job", name, type_, reason, message, JOB_COMPONENT)

    def jobset_event(self, tx: Tx, type_: str, reason: str, message: str) -> None:
        self.event(tx, "JobSet", self.place.name, type_, reason, message, JOBSET_COMPONENT)

    def pod_event(self, tx: Tx, pod: PodRun, type_: str, reason: str, message: str) -> None:
        field_path = f"spec.containers{{{pod.container}}}"
        self.event(
            tx, "Pod", pod.name, type_, reason, message, KUBELET, uid=pod.uid, field_path=field_path
        )

    def pod_scheduled(self, tx: Tx, pod: PodRun) -> None:
        where = f"{self.place.namespace}/{pod.name} to {self.place.host}"
        message = f"Successfully assigned {where}"
        self.event(tx, "Pod", pod.name, "Normal", "Scheduled", message, SCHEDULER, uid=pod.uid)

    # ------------------------------------------------------------------ status

    def update_status(
        self, tx: Tx, condition: tuple[str, str, str, str] | None = None, **fields: Any
    ) -> None:
        """Set ``fields`` of the job's status in ``tx`` and, with ``condition`` (type,
        status, reason, message), that condition — if it is still this job."""
        place = self.place
        obj = tx.get(TRAINJOBS, place.namespace, place.name)
        if obj is None or (obj.get("metadata") or {}).get("uid") != place.uid:
            return
        status = {**(obj.get("status") or {}), **fields}
        if condition is not None:
            conditions = list(status.get("conditions") or [])
            set_condition(conditions, *condition)
            status["conditions"] = conditions
        obj["status"] = status
        tx.put(TRAINJOBS, obj)
        self.job, self.job_rv = obj, tx.rv

    def set_condition(self, tx: Tx, kind: str, value: str, reason: str, message: str) -> None:
        """Set the job's ``kind`` condition in ``tx``."""
        self.update_status(tx, (kind, value, reason, message))

    def write_jobs_status(self, tx: Tx, suspended: bool = False) -> None:
        """``status.jobsStatus``: per replicated job, what its (one) Job's pods say, read
        as the JobSet controller reads a Job."""
        jobs = (replicated_job_status(rjob, self._job(rjob, suspended)) for rjob in self.rjobs)
        self.update_status(tx, jobsStatus=trainjob_jobs_status(jobs))

    def _job(self, rjob: str, suspended: bool) -> list[JobCounts]:
        """The Job of ``rjob`` (none before its pods are made): finished when a pod failed
        (the local backend retries no pod) or every pod succeeded; suspended with its
        pods deleted."""
        pods = [p for p in self.pods.values() if p.rjob == rjob]
        expected = max(self.expected.get(rjob, 0), 1)
        succeeded = sum(1 for p in pods if p.finished and p.exit_code == 0)
        if suspended and not (pods and succeeded == len(pods)):
            return [JobCounts(succeeded=succeeded, pods=expected, suspended=True)]
        if not pods:
            return []
        if any(p.finished and p.exit_code != 0 for p in pods):
            return [JobCounts(finished="Failed")]
        if len(pods) >= expected and succeeded == len(pods):
            return [JobCounts(finished="Complete")]
        return [
            JobCounts(
                active=sum(1 for p in pods if not p.finished),
                ready=sum(1 for p in pods if p.running),
                succeeded=succeeded,
                pods=expected,
            )
        ]

    def publish_progress(self, pods: list[PodRun]) -> None:
        """Write the newest trainer status a pod printed as ``status.trainerStatus``,
        as the Trainer's status server would: here the log is the channel."""
        fresh = [p for p in pods if p.progress_seq > self.progress_published.get(p.name, 0)]
        if not fresh:
            return
        for pod in fresh:
            self.progress_published[pod.name] = pod.progress_seq
        status = fresh[0].progress
        if status is None:
            return
        with self.store.write() as tx:
            self.update_status(tx, trainerStatus=dict(status))
