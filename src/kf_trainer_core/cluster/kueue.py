"""Why a TrainJob waits: its Kueue Workload, read and told as data.

A TrainJob labelled ``kueue.x-k8s.io/queue-name`` is held ``spec.suspend: true`` by Kueue
until its Workload — owned by the TrainJob and labelled ``kueue.x-k8s.io/job-uid`` with
its UID — is admitted. The TrainJob alone then only says "Suspended"; the Workload says
which queue and cluster queue it waits in, why (``QuotaReserved=False`` with a reason and
a message such as "insufficient unused quota for nvidia.com/gpu ..., 4 more needed"),
whether it was evicted or preempted, and the visibility API
(``visibility.kueue.x-k8s.io``) gives its position in the queue.

Cost: nothing at all for a job without the queue label. For a labelled job one list of
Workloads by the job's UID (plus one visibility read while it is pending). Whether the
cluster serves Workloads (the CRD is installed, RBAC allows reading them) and the
visibility API is discovered on first use and remembered per cluster and namespace
(:class:`KueueProbe`): without Kueue nothing is asked again, nothing is reported and
nothing fails.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from kf_trainer_core.base import untrusted
from kf_trainer_core.base.timeutil import duration_text, now
from kf_trainer_core.cluster.multikueue import dispatched, worker_name
from kf_trainer_core.k8s.api import Api
from kf_trainer_core.k8s.calls import Get, GetPath, ListObjects
from kf_trainer_core.k8s.errors import ApiError
from kf_trainer_core.k8s.resources import Resource
from kf_trainer_core.k8s.trainjob import condition, condition_true, is_finished

#: The label that puts a job in a Kueue LocalQueue.
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
#: The label Kueue puts on a job's Workload: the job's UID.
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
#: Kueue's Workloads (v1beta2 is the stored version of Kueue v0.19).
WORKLOADS = Resource("kueue.x-k8s.io", "v1beta2", "workloads", "Workload")
LOCAL_QUEUES = Resource("kueue.x-k8s.io", "v1beta2", "localqueues", "LocalQueue")
#: The visibility API's view of LocalQueues (``.../localqueues/<q>/pendingworkloads``).
VISIBILITY_LOCAL_QUEUES = Resource(
    "visibility.kueue.x-k8s.io", "v1beta2", "localqueues", "LocalQueue"
)
#: A cluster found without Kueue (or without access to it) is asked again after this
#: long: an administrator may install it or grant access while a long wait runs.
REPROBE_SECONDS = 600.0
#: While a job is queued its Workload is read again at most this often (its position
#: and message change without the TrainJob changing).
QUEUE_REFRESH_SECONDS = 15.0
#: For this long after its Workload appears, a job Kueue has said nothing of is read
#: every second (Kueue evaluates a new Workload within moments): a job Kueue can never
#: admit is known at once, not a refresh later.
EVALUATION_SECONDS = 10.0


class _Out(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


class CapacityLimit(_Out):
    """One reason Kueue gives why a pod set of the job can never fit its ClusterQueue, as
    the ClusterQueue stands: the request is beyond its maximum capacity (its quota, with
    what it may borrow), it asks for a resource the ClusterQueue does not cover, or no
    flavor's taints and node labels allow it."""

    #: Kueue's words for it ("insufficient quota for nvidia.com/gpu in flavor …").
    text: str
    pod_set: str | None = None
    resource: str | None = None
    flavor: str | None = None
    #: The pod set's request and the maximum, as Kueue prints them ("16", "8", "64Gi").
    requested: str | None = None
    maximum: str | None = None
    #: What pod sets considered before this one ask for in the same flavor ("0").
    previous: str | None = None

    _lines = field_validator(
        "text", "pod_set", "resource", "flavor", "requested", "maximum", "previous", mode="before"
    )(untrusted.line_field)

    def describe(self) -> str:
        """``pod set node asks for 16 nvidia.com/gpu, more than the maximum capacity of
        8 in flavor default-flavor``; Kueue's words where it says something else."""
        if self.requested is None or self.maximum is None:
            return self.text
        who = f"pod set {self.pod_set}" if self.pod_set else "the job"
        also = (
            f" (with {self.previous} for the pod sets before it)"
            if self.previous not in (None, "", "0")
            else ""
        )
        flavor = f" in flavor {self.flavor}" if self.flavor else ""
        return (
            f"{who} asks for {self.requested} {self.resource}{also}, more than the maximum "
            f"capacity of {self.maximum}{flavor}"
        )


class Eviction(_Out):
    """One eviction of the job's Workload (``Evicted`` / ``Preempted`` conditions)."""

    reason: str
    message: str = ""
    at: datetime | None = None
    #: ``InClusterQueue``, ``InCohortReclamation``… when Kueue preempted it.
    preemption_reason: str | None = None

    _at = field_validator("at", mode="before")(untrusted.timestamp)
    _lines = field_validator("reason", "preemption_reason", mode="before")(untrusted.line_field)
    _text = field_validator("message", mode="before")(untrusted.text_field)


class QueueStatus(_Out):
    """Where a TrainJob stands in Kueue. ``None`` on a job means "not queued by Kueue"
    (no queue label, or no Kueue on the cluster)."""

    #: The LocalQueue (the job's ``kueue.x-k8s.io/queue-name`` label).
    queue: str
    #: The ClusterQueue, once Kueue has assigned one (the Workload's admission) — or the
    #: one the visibility API names while pending.
    cluster_queue: str | None = None
    workload: str | None = None
    #: Quota is reserved and the Workload admitted: the job may run.
    admitted: bool = False
    #: False once the Workload was deactivated (``spec.active``: the suite's suspend of
    #: a job Kueue holds): Kueue neither admits nor queues it until it is resumed.
    active: bool = True
    quota_reserved: bool = False
    #: Why it is not admitted: ``QuotaReserved``'s reason and message ("Pending",
    #: "Inadmissible"; "couldn't assign flavors to pod set node: …").
    pending_reason: str | None = None
    pending_message: str | None = None
    #: 0-based positions while pending, where the visibility API answers.
    position: int | None = None
    cluster_queue_position: int | None = None
    priority: int | None = None
    evictions: list[Eviction] = Field(default_factory=list)
    #: How many times Kueue requeued the Workload after an eviction.
    requeue_count: int = 0
    #: Why Kueue can never admit the job as its ClusterQueue stands (empty: it may be
    #: admitted when quota frees, or Kueue has not said). See :func:`never_fits`.
    never_fits: list[CapacityLimit] = Field(default_factory=list)
    finished: bool = False
    queued_at: datetime | None = None
    admitted_at: datetime | None = None
    #: Seconds spent waiting for admission (so far, or until admitted).
    queued_seconds: float | None = None
    #: Seconds since admission (until the Workload finished).
    admitted_seconds: float | None = None
    #: MultiKueue: the worker cluster the Workload was admitted on
    #: (``status.clusterName``); ``None`` elsewhere.
    worker: str | None = None

    _times = field_validator("queued_at", "admitted_at", mode="before")(untrusted.timestamp)
    _line = field_validator("pending_reason", mode="before")(untrusted.line_field)
    _text = field_validator("pending_message", mode="before")(untrusted.text_field)

    @property
    def waiting(self) -> bool:
        """Still waiting for admission."""
        return not self.admitted and not self.finished

    @property
    def never_admissible(self) -> bool:
        """Kueue says the job can never be admitted as its ClusterQueue stands: it
        asks for more than the queue's maximum capacity, or no flavor can ever fit it
        (:attr:`never_fits` says which). Waiting for it only ends at a timeout."""
        return self.waiting and bool(self.never_fits)

    @property
    def _where(self) -> str:
        """``team-a (cluster queue gpus)``."""
        return self.queue + (f" (cluster queue {self.cluster_queue})" if self.cluster_queue else "")

    def never_admitted_text(self) -> str:
        """Why the job can never be admitted, with the numbers and the fix."""
        reasons = "; ".join(limit.describe() for limit in self.never_fits)
        fixes = []
        for limit in self.never_fits:
            if limit.maximum is not None and limit.resource:
                fixes.append(f"at most {limit.maximum} {limit.resource}")
        fix = (
            f"ask for {', '.join(dict.fromkeys(fixes))} in all (fewer nodes or less per node), "
            "or submit to a queue with more capacity"
            if fixes
            else "change the job's resources or tolerations, or submit to another queue"
        )
        return f"in queue {self._where}, {reasons}. Fix: {fix}."

    def summary(self) -> list[str]:
        """What a person reads: ``["queued in team-a (cluster queue gpus), position 3",
        "Pending: couldn't assign flavors …", "evicted 1x (Preempted: …)"]``."""
        if self.finished:
            head = f"finished in queue {self._where}"
        elif not self.active:
            head = f"suspended in queue {self._where} (its Workload deactivated until resumed)"
        elif self.admitted:
            head = f"admitted by queue {self._where}"
        else:
            head = f"queued in {self._where}"
            if self.position is not None:
                head += f", position {self.position + 1}"
                if self.cluster_queue_position is not None:
                    head += f" ({self.cluster_queue_position + 1} in the cluster queue)"
        if self.queued_seconds is not None:
            head += f", waited {duration_text(self.queued_seconds)}"
        if self.admitted_seconds is not None and self.admitted:
            head += f", admitted for {duration_text(self.admitted_seconds)}"
        parts = [head]
        if self.waiting and self.active:
            if self.workload is None:
                parts.append("waiting for Kueue to create the job's Workload")
            elif not (self.pending_reason or self.pending_message or self.quota_reserved):
                # Kueue v0.19 does not evaluate a Workload while an equal one ahead of it
                # in the ClusterQueue does not fit; it writes nothing on it meanwhile.
                parts.append("Kueue has not said why yet")
            elif self.pending_reason or self.pending_message:
                text = self.pending_message or ""
                parts.append(f"{self.pending_reason}: {text}" if self.pending_reason else text)
        if self.evictions:
            last = self.evictions[-1]
            detail = f"{last.reason}: {last.message}" if last.message else last.reason
            count = max(len(self.evictions), self.requeue_count)
            parts.append(f"evicted {count}x (last: {detail})")
        return parts

    def line(self) -> str:
        """:meth:`summary` as one line."""
        return "; ".join(self.summary())


# ------------------------------------------------------------------------ derivation


def queue_name(obj: Mapping[str, Any]) -> str | None:
    """The LocalQueue a TrainJob object is labelled for, if any."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    value = labels.get(QUEUE_NAME_LABEL)
    return str(value) if value else None


def holds_suspend(obj: Mapping[str, Any]) -> bool:
    """Whether Kueue decides the TrainJob's ``spec.suspend``: it is labelled for a
    queue, or MultiKueue dispatches it. While such a job's Workload is admitted Kueue
    unsuspends it — undoing a suspend set by anyone else, after the Trainer had begun to
    remove its pods — and it keeps it suspended otherwise. Such a job is stopped and
    started through its Workload's ``spec.active``."""
    return queue_name(obj) is not None or dispatched(obj)


def _is_true(cond: Mapping[str, Any] | None) -> bool:
    return bool(cond and cond.get("status") == "True")


#: Kueue's reasons (``QuotaReserved``'s, with the UnadmittedWorkloadsObservability feature
#: gate) that mean "never, as the ClusterQueue stands": the most severe of each pod
#: set's alternatives.
NEVER_REASONS = frozenset({"ExceedsMaxQuota", "NoMatchingFlavor"})
_POD_SET = re.compile(r"couldn't assign flavors to pod set (?P<pod_set>[^:;,\s]+): ")
_FLAVOR = r"(?P<flavor>[^\s,;]+)"
# What one flavor says of a resource that can never fit in it (Kueue v0.19's words, and
# the older "request > maximum capacity (a > b)"), or of one that does not fit now.
_NEVER_IN_FLAVOR = (
    re.compile(
        rf"insufficient quota for (?P<resource>\S+) in flavor {_FLAVOR}(?: in ClusterQueue)?, "
        r"previously considered podsets requests \((?P<previous>[^()]*)\) \+ current podset "
        r"request \((?P<requested>[^()]*)\) > maximum capacity \((?P<maximum>[^()]*)\)"
    ),
    re.compile(
        rf"insufficient quota for (?P<resource>\S+) in flavor {_FLAVOR}(?: in ClusterQueue)?, "
        r"request > maximum capacity \((?P<requested>[^\s()]+) > (?P<maximum>[^\s()]+)\)"
    ),
    re.compile(rf"untolerated taint .+? in flavor {_FLAVOR}"),
    re.compile(rf"flavor {_FLAVOR} doesn't match node affinity"),
)
_NOT_NOW_IN_FLAVOR = re.compile(
    rf"insufficient unused quota for \S+ in flavor {_FLAVOR}, \S+ more needed"
)
# What no flavor can change: the ClusterQueue does not cover the resource at all.
_NEVER_ANYWHERE = re.compile(r"resource (?P<resource>\S+) unavailable in ClusterQueue")


def never_fits(reason: str | None, message: str | None) -> list[CapacityLimit]:
    """Why a Workload can never be admitted, from ``QuotaReserved=False``'s reason and
    message; empty when it may be (or when Kueue's words are not understood).

    Kueue lists, per pod set, what each flavor it tried says of each resource. A flavor
    that says "request > maximum capacity", "untolerated taint" or "doesn't match node
    affinity" of any resource can never hold the pod set; one that only says
    "insufficient unused quota …, N more needed" may, when quota frees. A pod set every
    flavor of which can never hold it — or whose resource the ClusterQueue does not
    cover at all — makes the job never admissible. Anything else in the message keeps
    the job waiting: only Kueue's known words end a wait. Kueue's own reason
    ``ExceedsMaxQuota`` / ``NoMatchingFlavor`` (a feature gate) says the same."""
    text = message or ""
    marks = list(_POD_SET.finditer(text))
    limits: list[CapacityLimit] = []
    sure = reason in NEVER_REASONS
    for i, mark in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        body = text[mark.end() : end]
        rest = body
        found: list[CapacityLimit] = []
        for pattern in (_NEVER_ANYWHERE, *_NEVER_IN_FLAVOR):
            for hit in pattern.finditer(body):
                found.append(CapacityLimit(text=hit[0], pod_set=mark["pod_set"], **hit.groupdict()))
                rest = rest.replace(hit[0], "")
        # flavor -> it can never hold the pod set (a limit without one: no flavor can)
        flavors = {limit.flavor: True for limit in found if limit.flavor is not None}
        for hit in _NOT_NOW_IN_FLAVOR.finditer(body):
            flavors.setdefault(hit["flavor"], False)
            rest = rest.replace(hit[0], "")
        understood = not rest.strip(" ,;")
        anywhere = any(limit.flavor is None for limit in found)
        never = anywhere or (bool(flavors) and all(flavors.values()))
        if found and (sure or (understood and never)):
            limits += sorted(found, key=lambda limit: body.find(limit.text))  # as Kueue said
    if sure and not limits and text:
        limits.append(CapacityLimit(text=text))
    return limits


def owned_workload(items: list[Mapping[str, Any]], uid: str | None) -> Mapping[str, Any] | None:
    """The Workload that belongs to the job of ``uid``: owned by it (a Workload
    carrying the label but owned by another object is not ours), newest first."""
    mine = [
        w
        for w in items
        if uid is None
        or any(r.get("uid") == uid for r in (w.get("metadata") or {}).get("ownerReferences") or [])
    ]
    if not mine:
        return None
    return max(mine, key=lambda w: str((w.get("metadata") or {}).get("creationTimestamp") or ""))


def queue_status(
    queue: str,
    workload: Mapping[str, Any] | None,
    *,
    position: Mapping[str, Any] | None = None,
    at: datetime | None = None,
) -> QueueStatus:
    """A :class:`QueueStatus` from a Workload object (``None``: not created yet) and
    its entry in the visibility API's pending list. Pure."""
    if workload is None:
        return QueueStatus(queue=queue)
    at = at or now()
    meta = workload.get("metadata") or {}
    spec = workload.get("spec") or {}
    status = workload.get("status") or {}
    reserved = condition(workload, "QuotaReserved")
    admitted = condition(workload, "Admitted")
    finished = condition(workload, "Finished")
    is_admitted = _is_true(admitted)
    cluster_queue = (status.get("admission") or {}).get("clusterQueue")
    queued_at = untrusted.timestamp(meta.get("creationTimestamp"))
    admitted_at = (
        untrusted.timestamp(admitted.get("lastTransitionTime"))
        if is_admitted and admitted
        else None
    )
    finished_at = (
        untrusted.timestamp(finished.get("lastTransitionTime"))
        if finished and _is_true(finished)
        else None
    )
    evictions = []
    evicted = condition(workload, "Evicted")
    # Kueue counts evictions in schedulingStats (v0.19; requeueState only with the
    # PodsReady back-off).
    requeues = max(
        untrusted.whole_number((status.get("requeueState") or {}).get("count")) or 0,
        sum(
            untrusted.whole_number(e.get("count")) or 0
            for e in (status.get("schedulingStats") or {}).get("evictions") or []
            if isinstance(e, Mapping)
        ),
    )
    if evicted and (_is_true(evicted) or requeues):
        preempted = condition(workload, "Preempted")
        reason, message = str(evicted.get("reason") or "Evicted"), str(evicted.get("message") or "")
        if not _is_true(evicted):
            # Admitted again since: Kueue keeps the condition as reason QuotaReserved,
            # "Previously: <message>"; the eviction's own reason is in the counts.
            message = message.removeprefix("Previously: ")
            counted = {
                str(e.get("reason"))
                for e in (status.get("schedulingStats") or {}).get("evictions") or []
                if isinstance(e, Mapping) and e.get("reason")
            }
            reason = counted.pop() if len(counted) == 1 else "Evicted"
        evictions.append(
            Eviction(
                reason=reason,
                message=message,
                at=untrusted.timestamp(evicted.get("lastTransitionTime")),
                preemption_reason=str(preempted.get("reason"))
                if _is_true(preempted) and preempted
                else None,
            )
        )
    # Why it is not admitted: QuotaReserved=False says; with quota reserved and admission
    # checks outstanding, the Admitted condition says.
    says: Mapping[str, Any] = {}
    if not is_admitted:
        says = (reserved if reserved is not None and not _is_true(reserved) else admitted) or {}
    pending_reason = str(says.get("reason") or "") or None
    pending_message = str(says.get("message") or "") or None
    end = admitted_at if is_admitted else (finished_at or at)
    queued = (end - queued_at).total_seconds() if queued_at and end else None
    running = ((finished_at or at) - admitted_at).total_seconds() if admitted_at else None
    pos = position or {}
    return QueueStatus(
        queue=str(spec.get("queueName") or queue),
        cluster_queue=cluster_queue or pos.get("clusterQueueName"),
        workload=str(meta.get("name") or "") or None,
        admitted=is_admitted,
        active=spec.get("active") is not False,
        quota_reserved=_is_true(reserved),
        pending_reason=pending_reason,
        pending_message=pending_message,
        position=untrusted.whole_number(pos.get("positionInLocalQueue")),
        cluster_queue_position=untrusted.whole_number(pos.get("positionInClusterQueue")),
        priority=untrusted.whole_number(spec.get("priority"), low=-(2**31)),
        evictions=evictions,
        requeue_count=requeues,
        never_fits=never_fits(pending_reason, pending_message),
        finished=_is_true(finished),
        queued_at=queued_at,
        admitted_at=admitted_at,
        queued_seconds=max(0.0, queued) if queued is not None else None,
        admitted_seconds=max(0.0, running) if running is not None else None,
        worker=worker_name(workload),
    )


# --------------------------------------------------------------------------- probing


@dataclass
class KueueProbe:
    """What one cluster (and namespace: RBAC is per namespace) has shown of Kueue: when
    its Workloads, and the visibility API's positions, were last found absent or
    forbidden (``None``: never, or read since). Each is asked again
    :data:`REPROBE_SECONDS` after it was found so."""

    workloads_denied_at: float | None = None
    visibility_denied_at: float | None = None
    #: LocalQueue -> ClusterQueue, read once per queue (``None``: not readable).
    cluster_queues: dict[str, str | None] = field(default_factory=dict)

    def can_read_workloads(self) -> bool:
        return _may_ask(self.workloads_denied_at)

    def can_read_positions(self) -> bool:
        return _may_ask(self.visibility_denied_at)

    def deny_workloads(self) -> None:
        self.workloads_denied_at = time.monotonic()

    def deny_positions(self) -> None:
        self.visibility_denied_at = time.monotonic()


def _may_ask(denied_at: float | None) -> bool:
    return denied_at is None or time.monotonic() - denied_at >= REPROBE_SECONDS


_PROBES: dict[Hashable, KueueProbe] = {}
_PROBES_LOCK = threading.Lock()


def probe_for(key: Hashable) -> KueueProbe:
    """The process-wide probe of one cluster and namespace (every client shares it)."""
    with _PROBES_LOCK:
        probe = _PROBES.get(key)
        if probe is None:
            probe = _PROBES[key] = KueueProbe()
        return probe


def _absent(err: ApiError) -> bool:
    # 404: the CRD (or the aggregated visibility API) is not served; 403: RBAC denies
    # it; 503: an aggregated API registered but not answering.
    return err.not_found or err.forbidden or err.code == 503


def _names_the_queue(err: ApiError, queue: str) -> bool:
    """A 404 about the LocalQueue itself (``localqueues… "q" not found``), not about a
    path nobody serves."""
    details = err.status.get("details") if isinstance(err.status, Mapping) else None
    if isinstance(details, Mapping) and details.get("name") == queue:
        return True
    return f'"{queue}" not found' in str(err.message or "")


def pending_path(namespace: str, queue: str) -> str:
    """The visibility API's pending list of a LocalQueue."""
    res = VISIBILITY_LOCAL_QUEUES
    base = f"/apis/{res.group}/{res.version}/namespaces/{namespace}/{res.plural}"
    return f"{base}/{queue}/pendingworkloads"


async def lookup(
    api: Api, namespace: str, obj: Mapping[str, Any], probe: KueueProbe, *, positions: bool = True
) -> QueueStatus | None:
    """The job's :class:`QueueStatus`, or ``None`` when it is not queued by Kueue.

    No request at all for a job without the queue label, or on a cluster already
    found without Kueue. API trouble never fails the caller: the status is then
    unknown (``None``) this time."""
    queue = queue_name(obj)
    if queue is None or not probe.can_read_workloads():
        return None
    meta = obj.get("metadata") or {}
    uid = meta.get("uid")
    selector = f"{JOB_UID_LABEL}={uid}" if uid else None
    try:
        listing = await api(ListObjects(WORKLOADS, namespace, label_selector=selector))
    except ApiError as err:
        if _absent(err):
            probe.deny_workloads()
        return None
    probe.workloads_denied_at = None
    workload = owned_workload(listing.get("items") or [], uid)
    if workload is None and not (obj.get("spec") or {}).get("suspend"):
        # Not held and no Workload: Kueue does not manage this job (its TrainJob
        # integration is off, or the label came after creation). Nothing to report.
        return None
    if queue not in probe.cluster_queues and workload is not None:
        probe.cluster_queues[queue] = await _cluster_queue(api, namespace, queue)
    entry: Mapping[str, Any] | None = None
    if (
        positions
        and workload is not None
        and not condition_true(workload, "Admitted")
        and not condition_true(workload, "Finished")
        and probe.can_read_positions()
    ):
        entry = await _position(api, namespace, queue, workload, probe)
    status = queue_status(queue, workload, position=entry)
    if status.cluster_queue is None and probe.cluster_queues.get(queue):
        # Pending: the Workload names no ClusterQueue yet; its LocalQueue does.
        status = status.model_copy(update={"cluster_queue": probe.cluster_queues[queue]})
    return status


async def _cluster_queue(api: Api, namespace: str, queue: str) -> str | None:
    """The ClusterQueue a LocalQueue feeds (``None`` when it cannot be read)."""
    try:
        obj = await api(Get(LOCAL_QUEUES, namespace, queue))
    except ApiError:
        return None
    value = (obj.get("spec") or {}).get("clusterQueue")
    return str(value) if value else None


async def _position(
    api: Api, namespace: str, queue: str, workload: Mapping[str, Any], probe: KueueProbe
) -> Mapping[str, Any] | None:
    name = (workload.get("metadata") or {}).get("name")
    try:
        summary = await api(GetPath(pending_path(namespace, queue)))
    except ApiError as err:
        if err.not_found and _names_the_queue(err, queue):
            # The LocalQueue does not exist (Kueue says so on the Workload): the API is
            # there and answers for the other queues.
            probe.visibility_denied_at = None
        elif _absent(err):
            probe.deny_positions()
        return None
    probe.visibility_denied_at = None
    for item in (summary or {}).get("items") or []:
        if (item.get("metadata") or {}).get("name") == name:
            return dict(item)
    return None


def _shown(status: QueueStatus | None) -> tuple[Any, ...] | None:
    """What a person reads of a queue status: its summary after the head line, and
    what the head says (admitted, position, cluster queue, worker cluster)."""
    if status is None:
        return None
    head = (status.admitted, status.position, status.cluster_queue, status.worker)
    return (*head, status.summary()[1:])


class QueueTracker:
    """Keeps one wait's view of its job's Workload fresh at a bounded cost: read when
    the job changes while queued, and every :data:`QUEUE_REFRESH_SECONDS` while it
    waits for admission; never for a job without the queue label."""

    def __init__(self, namespace: str, probe: KueueProbe) -> None:
        self.namespace = namespace
        self.probe = probe
        self.status: QueueStatus | None = None
        self._version: str | None = None
        self._fetched_at: float | None = None
        # Since when the Workload has been seen without a word from Kueue (no pending
        # reason or message): set by refresh with the status, None whenever it has one.
        self._unexplained_since: float | None = None

    @property
    def _every(self) -> float:
        # Kueue creates the Workload moments after the job, and tries to admit it
        # moments after that: look again soon until it has said why the job waits (a
        # job that can never be admitted is then known at once) — for a while only:
        # Kueue does not evaluate a job while an equal one ahead of it does not fit,
        # and says nothing of it meanwhile.
        status, since = self.status, self._unexplained_since
        if status is not None and (
            status.workload is None
            or (
                status.waiting
                and not status.quota_reserved
                and since is not None
                and time.monotonic() - since < EVALUATION_SECONDS
            )
        ):
            return min(1.0, QUEUE_REFRESH_SECONDS)
        return QUEUE_REFRESH_SECONDS

    def _queued(self, obj: Mapping[str, Any]) -> bool:
        return bool((obj.get("spec") or {}).get("suspend")) and not is_finished(obj)

    def due(self, obj: Mapping[str, Any]) -> bool:
        """Whether to read the Workload now."""
        if queue_name(obj) is None or not self.probe.can_read_workloads():
            return False
        version = str((obj.get("metadata") or {}).get("resourceVersion"))
        if version != self._version:
            # A change of the job: read once when it is (or was) queued, so admission
            # and eviction are seen, not on every progress update of a running job.
            return self._queued(obj) or self.status is None or self.status.waiting
        return self.wake_in(obj) == 0.0

    async def refresh(self, api: Api, obj: Mapping[str, Any]) -> bool:
        """Read the Workload; ``True`` when what a person reads of it changed."""
        self._version = str((obj.get("metadata") or {}).get("resourceVersion"))
        self._fetched_at = time.monotonic()
        found = await lookup(api, self.namespace, obj, self.probe)
        if found is None:
            return False
        before, self.status = self.status, found
        if found.workload is None or found.pending_reason or found.pending_message:
            self._unexplained_since = None
        elif self._unexplained_since is None:
            self._unexplained_since = time.monotonic()
        return _shown(before) != _shown(found)

    def wake_in(self, obj: Mapping[str, Any] | None) -> float | None:
        """Seconds until the next refresh is due (``None``: none needed)."""
        if (
            obj is None
            or queue_name(obj) is None
            or not self._queued(obj)
            or not self.probe.can_read_workloads()
        ):
            return None
        if self._fetched_at is None:
            return 0.0
        return max(0.0, self._every - (time.monotonic() - self._fetched_at))
