"""A simulated Kueue for the Kubernetes-API test server.

Kueue v0.19 admits a TrainJob labelled ``kueue.x-k8s.io/queue-name`` by unsuspending it.
This module does the same over the test server's store, with the upstream Workload CRD
(``shared/upstream/kueue/crds``) validating what is written through the API:

* a mutating webhook creates labelled TrainJobs ``spec.suspend: true``;
* each labelled TrainJob gets a Workload (``trainjob-<name>-<hash>``), owned by it and
  labelled ``kueue.x-k8s.io/job-uid``, with one pod set ``node`` of ``numNodes`` pods
  requesting ``resourcesPerNode``;
* ClusterQueues have a nominal quota per resource (one flavor); pending Workloads are
  admitted best-effort FIFO by priority then age, admission sets ``QuotaReserved`` and
  ``Admitted`` and unsuspends the TrainJob; one that does not fit gets
  ``QuotaReserved=False``, reason ``Pending``, with Kueue's messages ("couldn't assign
  flavors to pod set node: insufficient unused quota for nvidia.com/gpu in flavor
  default-flavor, 4 more needed"); a missing LocalQueue or ClusterQueue is
  ``Inadmissible``;
* a higher-priority Workload preempts lower ones in a ClusterQueue that allows it, and
  :meth:`KueueSimulator.evict` evicts on demand: ``Evicted``/``Preempted`` conditions,
  ``requeueState.count``, the TrainJob suspended again;
* a finished TrainJob finishes its Workload and frees its quota;
* the visibility API's ``.../localqueues/<q>/pendingworkloads`` lists positions.

Install it with :meth:`KubeTestServer.install_kueue
<kf_trainer_core.testing.server.KubeTestServer.install_kueue>`; without it the server
answers 404 for every Kueue path, as a cluster without Kueue does.
"""

from __future__ import annotations

import hashlib
import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from kf_trainer_core.k8s.resources import TRAINJOBS
from kf_trainer_core.kueue import JOB_UID_LABEL, LOCAL_QUEUES, QUEUE_NAME_LABEL, WORKLOADS
from kf_trainer_core.testing.store import Store, StoreError, WatchEvent, format_timestamp

__all__ = [
    "PRIORITY_CLASS_LABEL",
    "ClusterQueue",
    "KueueSimulator",
    "load_workload_crd",
    "parse_quantity",
]

_log = logging.getLogger(__name__)
JSON = dict[str, Any]

#: The label that names a WorkloadPriorityClass for a job.
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
_POD_SET = "node"
_SUFFIX = {
    "m": Decimal("0.001"),
    "k": Decimal(1000),
    "M": Decimal(1000) ** 2,
    "G": Decimal(1000) ** 3,
    "T": Decimal(1000) ** 4,
    "Ki": Decimal(1024),
    "Mi": Decimal(1024) ** 2,
    "Gi": Decimal(1024) ** 3,
    "Ti": Decimal(1024) ** 4,
}


def parse_quantity(text: Any) -> Decimal:
    """A Kubernetes quantity (``"4"``, ``"500m"``, ``"8Gi"``) as a number."""
    raw = str(text).strip()
    for suffix in sorted(_SUFFIX, key=len, reverse=True):
        if raw.endswith(suffix) and raw[: -len(suffix)]:
            return Decimal(raw[: -len(suffix)]) * _SUFFIX[suffix]
    return Decimal(raw)


def format_quantity(value: Decimal, resource: str) -> str:
    """A quantity as Kueue prints it in messages: whole numbers plain, fractions in
    milli-units, memory in the largest binary unit that divides it."""
    if resource in ("memory", "ephemeral-storage"):
        for suffix in ("Ti", "Gi", "Mi", "Ki"):
            unit = _SUFFIX[suffix]
            if value >= unit and value % unit == 0:
                return f"{value / unit:f}".rstrip("0").rstrip(".") + suffix
    if value == value.to_integral_value():
        return str(int(value))
    return f"{int(value * 1000)}m"


@dataclass
class ClusterQueue:
    """A ClusterQueue of the simulation: one flavor with a nominal quota per resource."""

    name: str
    quota: dict[str, Decimal]
    flavor: str = "default-flavor"
    #: Preempt lower-priority admitted Workloads of this queue to admit a higher one
    #: (Kueue's ``preemption.withinClusterQueue: LowerPriority``).
    preempt_lower_priority: bool = False
    #: ``stopPolicy: Hold``: admits nothing (pending Workloads are Inadmissible).
    stopped: bool = False
    usage: dict[str, Decimal] = field(default_factory=dict)


def _condition(type_: str, status: bool, reason: str, message: str, now: str) -> JSON:
    return {
        "type": type_,
        "status": "True" if status else "False",
        "reason": reason,
        "message": message,
        "lastTransitionTime": now,
    }


def _set_condition(status: JSON, cond: JSON) -> None:
    """Replace the condition of that type, keeping its transition time when its
    status does not change (as ``meta.SetStatusCondition`` does)."""
    conds = status.setdefault("conditions", [])
    for i, old in enumerate(conds):
        if old.get("type") == cond["type"]:
            if old.get("status") == cond["status"]:
                cond = {**cond, "lastTransitionTime": old.get("lastTransitionTime")}
            conds[i] = cond
            return
    conds.append(cond)


def _true(wl: JSON, kind: str) -> bool:
    return any(
        c.get("type") == kind and c.get("status") == "True"
        for c in (wl.get("status") or {}).get("conditions") or []
    )


def workload_name(job: str, uid: str) -> str:
    """Kueue's name for a TrainJob's Workload: kind, name and a hash of the UID."""
    digest = hashlib.sha256(uid.encode()).hexdigest()[:5]
    return f"trainjob-{job}-{digest}"[:253]


class KueueSimulator:
    """Kueue's admission over a :class:`Store`. Configure queues, then let labelled
    TrainJobs arrive; :meth:`wait_idle` waits until every change is handled."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.cluster_queues: dict[str, ClusterQueue] = {}
        #: (namespace, LocalQueue) -> ClusterQueue name.
        self.local_queues: dict[tuple[str, str], str] = {}
        self.priority_classes: dict[str, int] = {}
        self._lock = threading.RLock()
        self._events: queue.Queue[Callable[[], None] | None] = queue.Queue()
        self._pending = 0
        self._idle = threading.Condition()
        self._unsubscribe: Callable[[], None] | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ configuration

    def add_cluster_queue(
        self,
        name: str,
        quota: dict[str, str | int],
        *,
        flavor: str = "default-flavor",
        preempt_lower_priority: bool = False,
    ) -> ClusterQueue:
        """A ClusterQueue with nominal ``quota`` (``{"nvidia.com/gpu": 8, "cpu": "64"}``)."""
        with self._lock:
            cq = ClusterQueue(
                name,
                {k: parse_quantity(v) for k, v in quota.items()},
                flavor,
                preempt_lower_priority,
            )
            self.cluster_queues[name] = cq
        self.kick()
        return cq

    def add_local_queue(self, namespace: str, name: str, cluster_queue: str) -> None:
        """A LocalQueue ``name`` in ``namespace`` pointing at ``cluster_queue`` (also
        stored as a LocalQueue object, as a client reads it)."""
        with self._lock:
            self.local_queues[(namespace, name)] = cluster_queue
        body = {
            "apiVersion": LOCAL_QUEUES.api_version,
            "kind": "LocalQueue",
            "metadata": {"name": name},
            "spec": {"clusterQueue": cluster_queue},
        }
        try:
            self.store.create(LOCAL_QUEUES, body, namespace=namespace)
        except StoreError as err:
            if err.code != 409:
                raise
            self.store.patch(LOCAL_QUEUES, namespace, name, {"spec": body["spec"]})
        self.kick()

    def add_priority_class(self, name: str, value: int) -> None:
        """A WorkloadPriorityClass (jobs name it with ``kueue.x-k8s.io/priority-class``)."""
        with self._lock:
            self.priority_classes[name] = value

    def set_quota(self, cluster_queue: str, quota: dict[str, str | int]) -> None:
        """Change a ClusterQueue's quota (more capacity admits what waits)."""
        with self._lock:
            self.cluster_queues[cluster_queue].quota = {
                k: parse_quantity(v) for k, v in quota.items()
            }
        self.kick()

    def stop_queue(self, cluster_queue: str, stopped: bool = True) -> None:
        """Hold (or release) a ClusterQueue: nothing more is admitted from it."""
        with self._lock:
            self.cluster_queues[cluster_queue].stopped = stopped
        self.kick()

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Follow the store and admit in a worker thread."""
        if self._thread is not None:
            return
        self._unsubscribe = self.store.subscribe(self._on_event)
        self._thread = threading.Thread(target=self._loop, name="kf-sim-kueue", daemon=True)
        self._thread.start()
        self.kick()

    def stop(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        if self._thread is not None:
            self._events.put(None)
            self._thread.join(timeout=10)
            self._thread = None

    def kick(self) -> None:
        """Run an admission pass soon."""
        self._post(self._reconcile)

    def wait_idle(self, timeout: float = 10) -> bool:
        """Wait until every queued change has been handled."""
        with self._idle:
            return self._idle.wait_for(lambda: self._pending == 0, timeout)

    def _post(self, fn: Callable[[], None]) -> None:
        with self._idle:
            self._pending += 1
        self._events.put(fn)

    def _loop(self) -> None:
        while True:
            fn = self._events.get()
            if fn is None:
                return
            try:
                with self._lock:
                    fn()
            except Exception:  # a simulator bug must not stop admission
                _log.exception("simulated Kueue: internal error (ignored)")
            finally:
                with self._idle:
                    self._pending -= 1
                    self._idle.notify_all()

    def _on_event(self, ev: WatchEvent) -> None:
        # The writer's thread: only queue work.
        if ev.resource in (TRAINJOBS, WORKLOADS):
            self._post(self._reconcile)

    # ------------------------------------------------------------------ webhook

    def mutate(self, resource: Any, new: JSON, old: JSON | None) -> JSON:
        """Kueue's job webhook: a labelled TrainJob is created suspended."""
        if resource == TRAINJOBS and old is None:
            labels = (new.get("metadata") or {}).get("labels") or {}
            if labels.get(QUEUE_NAME_LABEL):
                new = dict(new)
                new["spec"] = {**(new.get("spec") or {}), "suspend": True}
        return new

    # ------------------------------------------------------------------ admission

    def _reconcile(self) -> None:
        jobs, _ = self.store.list(TRAINJOBS)
        workloads, _ = self.store.list(WORKLOADS)
        by_owner: dict[str, JSON] = {}
        for wl in workloads:
            for ref in wl["metadata"].get("ownerReferences") or []:
                by_owner[str(ref.get("uid"))] = wl
        for job in jobs:
            meta = job["metadata"]
            if not (meta.get("labels") or {}).get(QUEUE_NAME_LABEL) or meta.get(
                "deletionTimestamp"
            ):
                continue
            found = by_owner.get(str(meta["uid"]))
            if found is None:
                self._create_workload(job)
            elif not _true(found, "Finished"):
                self._finish_if_done(job, found)
        self._schedule()

    def _requests(self, job: JSON) -> tuple[int, dict[str, Decimal]]:
        trainer = (job.get("spec") or {}).get("trainer") or {}
        count = int(trainer.get("numNodes") or 1)
        res = trainer.get("resourcesPerNode") or {}
        per_pod = {**(res.get("limits") or {}), **(res.get("requests") or {})}
        return count, {k: parse_quantity(v) for k, v in per_pod.items()}

    def _create_workload(self, job: JSON) -> None:
        meta = job["metadata"]
        labels = meta.get("labels") or {}
        count, per_pod = self._requests(job)
        pclass = labels.get(PRIORITY_CLASS_LABEL)
        spec: JSON = {
            "queueName": labels[QUEUE_NAME_LABEL],
            "active": True,
            "priority": self.priority_classes.get(pclass, 0) if pclass else 0,
            "podSets": [
                {
                    "name": _POD_SET,
                    "count": count,
                    "template": {
                        "spec": {
                            "containers": [
                                {
                                    "name": "node",
                                    "resources": {
                                        "requests": {
                                            k: format_quantity(v, k) for k, v in per_pod.items()
                                        }
                                    },
                                }
                            ]
                        }
                    },
                }
            ],
        }
        if pclass:
            spec["priorityClassRef"] = {
                "group": "kueue.x-k8s.io",
                "kind": "WorkloadPriorityClass",
                "name": pclass,
            }
        body = {
            "apiVersion": WORKLOADS.api_version,
            "kind": "Workload",
            "metadata": {
                "name": workload_name(meta["name"], str(meta["uid"])),
                "labels": {JOB_UID_LABEL: str(meta["uid"])},
                "ownerReferences": [
                    {
                        "apiVersion": TRAINJOBS.api_version,
                        "kind": "TrainJob",
                        "name": meta["name"],
                        "uid": meta["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": spec,
        }
        try:
            self.store.create(WORKLOADS, body, namespace=meta["namespace"])
        except StoreError as err:
            if err.code != 409:
                raise

    def _finish_if_done(self, job: JSON, wl: JSON) -> None:
        conds = (job.get("status") or {}).get("conditions") or []
        done = next(
            (
                c
                for c in conds
                if c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
            ),
            None,
        )
        if done is None:
            return
        reason = "Succeeded" if done["type"] == "Complete" else "Failed"
        message = str(done.get("message") or f"Job {done['type'].lower()}")
        self._write_status(
            wl,
            lambda st, now: _set_condition(st, _condition("Finished", True, reason, message, now)),
        )

    def _write_status(self, wl: JSON, fn: Callable[[JSON, str], None]) -> JSON | None:
        now = format_timestamp()

        def mutate(obj: JSON) -> None:
            fn(obj.setdefault("status", {}), now)

        meta = wl["metadata"]
        try:
            return self.store.mutate(
                WORKLOADS, meta["namespace"], meta["name"], mutate, subresource="status"
            )
        except StoreError as err:
            if err.code != 404:
                raise
            return None

    def _request_of(self, wl: JSON) -> dict[str, Decimal]:
        total: dict[str, Decimal] = {}
        for ps in (wl.get("spec") or {}).get("podSets") or []:
            count = int(ps.get("count") or 1)
            for c in ((ps.get("template") or {}).get("spec") or {}).get("containers") or []:
                for k, v in ((c.get("resources") or {}).get("requests") or {}).items():
                    total[k] = total.get(k, Decimal(0)) + parse_quantity(v) * count
        return total

    def _schedule(self) -> None:
        workloads, _ = self.store.list(WORKLOADS)
        for cq in self.cluster_queues.values():
            cq.usage = {}
        pending: list[JSON] = []
        for wl in workloads:
            if _true(wl, "Finished"):
                continue
            admission = (wl.get("status") or {}).get("admission") or {}
            if _true(wl, "QuotaReserved") and admission.get("clusterQueue"):
                holder = self.cluster_queues.get(admission["clusterQueue"])
                if holder is not None:
                    for k, v in self._request_of(wl).items():
                        holder.usage[k] = holder.usage.get(k, Decimal(0)) + v
            else:
                pending.append(wl)
        pending.sort(
            key=lambda w: (
                -int((w.get("spec") or {}).get("priority") or 0),
                str(w["metadata"].get("creationTimestamp") or ""),
                w["metadata"]["name"],
            )
        )
        for wl in pending:
            self._try_admit(wl, workloads)

    def _cluster_queue_of(self, wl: JSON) -> tuple[ClusterQueue | None, str | None]:
        ns = wl["metadata"]["namespace"]
        lq = str((wl.get("spec") or {}).get("queueName") or "")
        cq_name = self.local_queues.get((ns, lq))
        if cq_name is None:
            return None, f"LocalQueue {lq} doesn't exist"
        cq = self.cluster_queues.get(cq_name)
        if cq is None:
            return None, f"ClusterQueue {cq_name} doesn't exist"
        if cq.stopped:
            return None, f"ClusterQueue {cq_name} is inactive"
        return cq, None

    def _shortfall(self, cq: ClusterQueue, request: dict[str, Decimal]) -> str | None:
        problems = []
        for res_name, amount in sorted(request.items()):
            if amount == 0:
                continue
            nominal = cq.quota.get(res_name)
            if nominal is None:
                problems.append(f"resource {res_name} unavailable in ClusterQueue")
                continue
            if amount > nominal:
                problems.append(
                    f"insufficient quota for {res_name} in flavor {cq.flavor}, request > "
                    f"maximum capacity ({format_quantity(amount, res_name)} > "
                    f"{format_quantity(nominal, res_name)})"
                )
                continue
            free = nominal - cq.usage.get(res_name, Decimal(0))
            if amount > free:
                problems.append(
                    f"insufficient unused quota for {res_name} in flavor {cq.flavor}, "
                    f"{format_quantity(amount - free, res_name)} more needed"
                )
        if not problems:
            return None
        return f"couldn't assign flavors to pod set {_POD_SET}: " + ", ".join(problems)

    def _try_admit(self, wl: JSON, everyone: list[JSON]) -> None:
        cq, inadmissible = self._cluster_queue_of(wl)
        if cq is None:
            self._set_pending(wl, "Inadmissible", str(inadmissible))
            return
        request = self._request_of(wl)
        shortfall = self._shortfall(cq, request)
        if (
            shortfall is not None
            and cq.preempt_lower_priority
            and self._preempt_for(wl, cq, request, everyone)
        ):
            shortfall = self._shortfall(cq, request)
        if shortfall is not None:
            self._set_pending(wl, "Pending", shortfall)
            return
        for k, v in request.items():
            cq.usage[k] = cq.usage.get(k, Decimal(0)) + v
        self._admit(wl, cq, request)

    def _set_pending(self, wl: JSON, reason: str, message: str) -> None:
        for c in (wl.get("status") or {}).get("conditions") or []:
            if (
                c.get("type") == "QuotaReserved"
                and c.get("status") == "False"
                and c.get("reason") == reason
                and c.get("message") == message
            ):
                return  # unchanged: no write, no watch event

        def fn(st: JSON, now: str) -> None:
            _set_condition(st, _condition("QuotaReserved", False, reason, message, now))
            _set_condition(
                st,
                _condition(
                    "Admitted", False, "NoReservation", "The workload has no reservation", now
                ),
            )

        self._write_status(wl, fn)

    def _admit(self, wl: JSON, cq: ClusterQueue, request: dict[str, Decimal]) -> None:
        count = sum(int(ps.get("count") or 1) for ps in (wl.get("spec") or {}).get("podSets") or [])

        def fn(st: JSON, now: str) -> None:
            st["admission"] = {
                "clusterQueue": cq.name,
                "podSetAssignments": [
                    {
                        "name": _POD_SET,
                        "flavors": dict.fromkeys(request, cq.flavor),
                        "resourceUsage": {k: format_quantity(v, k) for k, v in request.items()},
                        "count": count,
                    }
                ],
            }
            _set_condition(
                st,
                _condition(
                    "QuotaReserved",
                    True,
                    "QuotaReserved",
                    f"Quota reserved in ClusterQueue {cq.name}",
                    now,
                ),
            )
            _set_condition(
                st,
                _condition("Admitted", True, "Admitted", "The workload is admitted", now),
            )
            for c in st.get("conditions") or []:
                if c.get("type") in ("Evicted", "Preempted") and c.get("status") == "True":
                    c.update(status="False", lastTransitionTime=now)

        if self._write_status(wl, fn) is not None:
            self._set_suspend(wl, False)

    def _set_suspend(self, wl: JSON, value: bool) -> None:
        for ref in wl["metadata"].get("ownerReferences") or []:
            if ref.get("kind") != "TrainJob":
                continue
            try:
                self.store.patch(
                    TRAINJOBS,
                    wl["metadata"]["namespace"],
                    ref["name"],
                    {"spec": {"suspend": value}},
                )
            except StoreError as err:
                if err.code != 404:
                    raise

    def _preempt_for(
        self, wl: JSON, cq: ClusterQueue, request: dict[str, Decimal], everyone: list[JSON]
    ) -> bool:
        """Evict lower-priority Workloads of ``cq`` (lowest, newest first) until ``wl``
        fits; nothing when even all of them would not make room."""
        mine = int((wl.get("spec") or {}).get("priority") or 0)
        victims = [
            w
            for w in everyone
            if _true(w, "QuotaReserved")
            and not _true(w, "Finished")
            and ((w.get("status") or {}).get("admission") or {}).get("clusterQueue") == cq.name
            and int((w.get("spec") or {}).get("priority") or 0) < mine
        ]
        victims.sort(
            key=lambda w: (
                int((w.get("spec") or {}).get("priority") or 0),
                str(w["metadata"].get("creationTimestamp") or ""),
            ),
            reverse=False,
        )
        freed = dict(cq.usage)
        chosen = []
        for victim in victims:
            if all(
                freed.get(k, Decimal(0)) + v <= cq.quota.get(k, Decimal(-1))
                for k, v in request.items()
            ):
                break
            chosen.append(victim)
            for k, v in self._request_of(victim).items():
                freed[k] = freed.get(k, Decimal(0)) - v
        if not all(
            freed.get(k, Decimal(0)) + v <= cq.quota.get(k, Decimal(-1)) for k, v in request.items()
        ):
            return False
        uid = wl["metadata"].get("uid")
        job_uid = (wl["metadata"].get("labels") or {}).get(JOB_UID_LABEL)
        for victim in chosen:
            self._evict(
                victim,
                "Preempted",
                f"Preempted to accommodate a workload (UID: {uid}, JobUID: {job_uid}) due to "
                "prioritization in the ClusterQueue",
                preemption_reason="InClusterQueue",
            )
        cq.usage = freed
        return True

    def evict(
        self,
        namespace: str,
        trainjob: str,
        reason: str = "PodsReadyTimeout",
        message: str = "Exceeded the PodsReady timeout",
    ) -> None:
        """Evict the Workload of ``trainjob`` now (Kueue does this on a PodsReady
        timeout, an admission check, a deactivation); it is requeued."""

        def run() -> None:
            workloads, _ = self.store.list(WORKLOADS, namespace)
            for wl in workloads:
                if any(
                    r.get("name") == trainjob for r in wl["metadata"].get("ownerReferences") or []
                ):
                    self._evict(wl, reason, message)
            self._schedule()

        self._post(run)

    def _evict(
        self, wl: JSON, reason: str, message: str, preemption_reason: str | None = None
    ) -> None:
        def fn(st: JSON, now: str) -> None:
            st.pop("admission", None)
            _set_condition(st, _condition("Evicted", True, reason, message, now))
            if preemption_reason is not None:
                _set_condition(st, _condition("Preempted", True, preemption_reason, message, now))
            _set_condition(st, _condition("QuotaReserved", False, "Pending", message, now))
            _set_condition(
                st,
                _condition(
                    "Admitted", False, "NoReservation", "The workload has no reservation", now
                ),
            )
            _set_condition(st, _condition("Requeued", True, reason, message, now))
            state = st.setdefault("requeueState", {})
            state["count"] = int(state.get("count") or 0) + 1

        if self._write_status(wl, fn) is not None:
            self._set_suspend(wl, True)

    # ------------------------------------------------------------------ visibility

    def pending_workloads(self, namespace: str, local_queue: str) -> JSON:
        """The visibility API's ``PendingWorkloadsSummary`` of a LocalQueue."""
        with self._lock:
            cq_name = self.local_queues.get((namespace, local_queue))
            if cq_name is None:
                raise StoreError(
                    404,
                    "NotFound",
                    f'localqueues.visibility.kueue.x-k8s.io "{local_queue}" not found',
                )
            workloads, _ = self.store.list(WORKLOADS)
            in_cq = []
            for wl in workloads:
                if _true(wl, "QuotaReserved") or _true(wl, "Finished"):
                    continue
                lq = str((wl.get("spec") or {}).get("queueName") or "")
                if self.local_queues.get((wl["metadata"]["namespace"], lq)) == cq_name:
                    in_cq.append(wl)
        in_cq.sort(
            key=lambda w: (
                -int((w.get("spec") or {}).get("priority") or 0),
                str(w["metadata"].get("creationTimestamp") or ""),
                w["metadata"]["name"],
            )
        )
        items = []
        in_lq = 0
        for position, wl in enumerate(in_cq):
            meta = wl["metadata"]
            lq = str((wl.get("spec") or {}).get("queueName") or "")
            if meta["namespace"] != namespace or lq != local_queue:
                continue
            items.append(
                {
                    "metadata": {
                        "name": meta["name"],
                        "namespace": meta["namespace"],
                        "creationTimestamp": meta.get("creationTimestamp"),
                        "ownerReferences": meta.get("ownerReferences") or [],
                    },
                    "priority": int((wl.get("spec") or {}).get("priority") or 0),
                    "localQueueName": lq,
                    "positionInClusterQueue": position,
                    "positionInLocalQueue": in_lq,
                }
            )
            in_lq += 1
        return {
            "kind": "PendingWorkloadsSummary",
            "apiVersion": "visibility.kueue.x-k8s.io/v1beta2",
            "metadata": {"creationTimestamp": None},
            "items": items,
        }


def load_workload_crd(upstream: Path) -> Any:
    """The upstream Workload CRD (``kueue/crds``), as the server validates with it."""
    from kf_trainer_core.testing import crd

    file = upstream / "kueue" / "crds" / "kueue.x-k8s.io_workloads.yaml"
    return crd._load_cached(str(file.resolve()), file.stat().st_mtime_ns)
