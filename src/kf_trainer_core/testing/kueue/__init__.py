"""A simulated Kueue for the Kubernetes-API test server.

Kueue v0.19 admits a TrainJob labelled ``kueue.x-k8s.io/queue-name`` by unsuspending it.
This module does the same over the test server's store, with the upstream Workload CRD
(``shared/upstream/kueue/crds``) validating what is written through the API. What it
does is checked against the real Kueue v0.19.2 by the conformance tests
(``tests/conformance/test_kueue_queues.py``, ``test_kueue_jobs.py``; docs/kueue.md lists
what that comparison found):

* Kueue's TrainJob webhooks act on every TrainJob outside ``kube-system`` and
  ``kueue-system``, labelled or not: on create a labelled one is made
  ``spec.suspend: true`` and each gets Kueue's empty RuntimePatch (manager
  ``kueue.x-k8s.io/manager``); a create or update naming a runtime that does not exist
  is refused (403, ``runtime '<name>' not found``);
* each labelled TrainJob gets a Workload (``trainjob-<name>-<hash>``, Kueue's hash),
  owned by it and labelled ``kueue.x-k8s.io/job-uid``, with one pod set ``node`` of
  ``numNodes`` pods requesting ``resourcesPerNode``;
* ClusterQueues have a nominal quota per resource (one flavor); pending Workloads are
  admitted best-effort FIFO by priority then age, admission sets ``QuotaReserved`` and
  ``Admitted`` and unsuspends the TrainJob; one that does not fit gets
  ``QuotaReserved=False``, reason ``Pending``, with Kueue's messages ("couldn't assign
  flavors to pod set node: insufficient unused quota for nvidia.com/gpu in flavor
  default-flavor, 4 more needed"; beyond the quota "… current podset request (8) >
  maximum capacity (4)"; an uncovered resource "resource … unavailable in
  ClusterQueue"), and the Workloads equal to it after it in its ClusterQueue are not
  evaluated (nothing written on them), as Kueue's scheduling equivalence does; a
  missing LocalQueue or ClusterQueue is ``Inadmissible``;
* a labelled TrainJob unsuspended by someone else before admission is suspended again;
* a higher-priority Workload preempts lower ones in a ClusterQueue that allows it, and
  :meth:`KueueSimulator.evict` evicts on demand: ``Evicted``/``Preempted`` conditions,
  ``schedulingStats.evictions`` (and ``requeueState.count`` for a PodsReady timeout),
  the TrainJob suspended again;
* a Workload made inactive (``spec.active: false``) is evicted (``Deactivated``), its
  TrainJob suspended and its quota freed, and is not admitted until active again; a
  labelled TrainJob suspended by someone else while admitted is unsuspended again;
* a finished TrainJob finishes its Workload and frees its quota;
* the visibility API's ``.../localqueues/<q>/pendingworkloads`` lists positions.

Layout: this module owns the store, the thread and the order of events;
:mod:`.rules` holds what it decides, as pure functions over plain objects.

Install it with :meth:`KubeTestServer.install_kueue
<kf_trainer_core.testing.server.KubeTestServer.install_kueue>`; without it the server
answers 404 for every Kueue path, as a cluster without Kueue does.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

from kf_trainer_core.cluster.kueue import JOB_UID_LABEL, LOCAL_QUEUES, QUEUE_NAME_LABEL, WORKLOADS
from kf_trainer_core.k8s.quantity import parse_quantity
from kf_trainer_core.k8s.resources import TRAINJOBS
from kf_trainer_core.k8s.trainjob import condition_true
from kf_trainer_core.testing.kueue import rules
from kf_trainer_core.testing.kueue.rules import (
    PRIORITY_CLASS_LABEL,
    ClusterQueue,
    format_quantity,
    workload_name,
)
from kf_trainer_core.testing.store import Store, StoreError, WatchEvent

__all__ = [
    "PRIORITY_CLASS_LABEL",
    "ClusterQueue",
    "KueueSimulator",
    "format_quantity",
    "load_workload_crd",
    "parse_quantity",
    "workload_name",
]

_log = logging.getLogger(__name__)
JSON = dict[str, Any]


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
        """Kueue's TrainJob mutating webhook, on create, on every TrainJob outside
        ``kube-system`` and ``kueue-system``, labelled or not: a labelled one is created
        suspended, and each gets Kueue's own empty RuntimePatch (manager
        ``kueue.x-k8s.io/manager``), where Kueue writes what admission decides."""
        if resource != TRAINJOBS or old is not None or not rules.webhooks_apply(new):
            return new
        new = dict(new)
        spec = dict(new.get("spec") or {})
        if ((new.get("metadata") or {}).get("labels") or {}).get(QUEUE_NAME_LABEL):
            spec["suspend"] = True
        spec["runtimePatches"] = [
            *(spec.get("runtimePatches") or []),
            rules.kueue_runtime_patch(),
        ]
        new["spec"] = spec
        return new

    def validate(self, resource: Any, new: JSON, old: JSON | None) -> None:
        """Kueue's TrainJob validating webhook (after the CRD's own checks), on create and
        update: every TrainJob, labelled or not, must name a runtime that exists —
        Kueue reads it to work out the job's pod sets — or the write is refused (403
        Forbidden)."""
        if resource != TRAINJOBS or not rules.webhooks_apply(new):
            return
        ref = (new.get("spec") or {}).get("runtimeRef") or {}
        namespace = str((new.get("metadata") or {}).get("namespace") or "")
        if rules.runtime_of(self.store, ref, namespace) is None:
            name = str(ref.get("name") or "")
            raise StoreError(
                403,
                "Forbidden",
                f'admission webhook "vtrainjob.kb.io" denied the request: '
                f"runtime '{name}' not found",
            )

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
            elif not condition_true(found, "Finished"):
                self._follow(job, found)
        self._schedule()

    def _follow(self, job: JSON, wl: JSON) -> None:
        """Keep an unfinished TrainJob and its Workload in step."""
        suspended = bool((job.get("spec") or {}).get("suspend"))
        admitted = condition_true(wl, "Admitted")
        done = rules.finished_condition(job)
        if done is not None:
            self._write_status(wl, rules.finished(done))
        elif rules.deactivation_due(wl):
            # spec.active false (the suite's suspend of a job Kueue holds): evicted.
            if self._write_status(wl, rules.deactivated(wl)) is not None:
                self._set_suspend(wl, True)
        elif rules.reactivation_due(wl):
            self._write_status(wl, rules.reactivated)
        elif not suspended and not admitted:
            # Unsuspended by someone else (a resume by hand): Kueue stops a job its
            # queue has not admitted ("Not admitted by cluster queue").
            self._set_suspend(wl, True)
        elif suspended and admitted and rules.is_active(wl):
            # Suspended by someone else while admitted: Kueue starts it again ("Job
            # admitted, unsuspending"); a job Kueue holds is stopped through its
            # Workload's spec.active.
            self._set_suspend(wl, False)

    def _create_workload(self, job: JSON) -> None:
        body = rules.workload_for(job, self.priority_classes)
        try:
            self.store.create(WORKLOADS, body, namespace=job["metadata"]["namespace"])
        except StoreError as err:
            if err.code != 409:
                raise

    def _write_status(self, wl: JSON, change: rules.StatusChange) -> JSON | None:
        def mutate(obj: JSON) -> None:
            change(obj.setdefault("status", {}))

        meta = wl["metadata"]
        try:
            return self.store.mutate(
                WORKLOADS, meta["namespace"], meta["name"], mutate, subresource="status"
            )
        except StoreError as err:
            if err.code != 404:
                raise
            return None

    def _schedule(self) -> None:
        workloads, _ = self.store.list(WORKLOADS)
        for cq in self.cluster_queues.values():
            cq.usage = {}
        waiting: list[JSON] = []
        for wl in workloads:
            if condition_true(wl, "Finished") or not rules.is_active(wl):
                continue
            holder_name = rules.admitted_to(wl)
            if holder_name:
                holder = self.cluster_queues.get(holder_name)
                if holder is not None:
                    for k, v in rules.request_of(wl).items():
                        holder.usage[k] = holder.usage.get(k, Decimal(0)) + v
            else:
                waiting.append(wl)
        # Kueue v0.19 (BestEffortFIFO, scheduling equivalence): once a Workload does not
        # fit for quota, the equal ones after it in its ClusterQueue are set aside
        # without being evaluated, and nothing is written on them.
        unfit: set[tuple[str, Any]] = set()
        for wl in sorted(waiting, key=rules.queue_order):
            key = (str(self.local_queues.get(rules.local_queue_of(wl))), rules.shape(wl))
            if key in unfit:
                continue
            if self._try_admit(wl, workloads) == "unfit":
                unfit.add(key)

    def _cluster_queue_of(self, wl: JSON) -> tuple[ClusterQueue | None, str | None]:
        namespace, lq = rules.local_queue_of(wl)
        cq_name = self.local_queues.get((namespace, lq))
        if cq_name is None:
            return None, f"LocalQueue {lq} doesn't exist"
        cq = self.cluster_queues.get(cq_name)
        if cq is None:
            return None, f"ClusterQueue {cq_name} doesn't exist"
        if cq.stopped:
            return None, f"ClusterQueue {cq_name} is inactive"
        return cq, None

    def _try_admit(self, wl: JSON, everyone: list[JSON]) -> str:
        """Admit ``wl`` if it fits; ``admitted``, ``unfit`` (quota) or ``inadmissible``."""
        cq, inadmissible = self._cluster_queue_of(wl)
        if cq is None:
            self._set_pending(wl, "Inadmissible", str(inadmissible))
            return "inadmissible"
        request = rules.request_of(wl)
        shortfall = cq.shortfall(request)
        if (
            shortfall is not None
            and cq.preempt_lower_priority
            and self._preempt_for(wl, cq, request, everyone)
        ):
            shortfall = cq.shortfall(request)
        if shortfall is not None:
            self._set_pending(wl, "Pending", shortfall)
            return "unfit"
        for k, v in request.items():
            cq.usage[k] = cq.usage.get(k, Decimal(0)) + v
        count = sum(int(ps.get("count") or 1) for ps in (wl.get("spec") or {}).get("podSets") or [])
        if self._write_status(wl, rules.admitted(cq, request, count)) is not None:
            self._set_suspend(wl, False)
        return "admitted"

    def _set_pending(self, wl: JSON, reason: str, message: str) -> None:
        if not rules.is_pending_with(wl, reason, message):  # unchanged: no write, no event
            self._write_status(wl, rules.pending(reason, message))

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
        """Evict lower-priority Workloads of ``cq`` until ``wl`` fits; nothing when even
        all of them would not make room."""
        choice = rules.choose_victims(wl, cq, request, everyone)
        if choice is None:
            return False
        victims, usage = choice
        uid = wl["metadata"].get("uid")
        job_uid = (wl["metadata"].get("labels") or {}).get(JOB_UID_LABEL)
        message = (
            f"Preempted to accommodate a workload (UID: {uid}, JobUID: {job_uid}) due to "
            f"prioritization in the ClusterQueue; preemptor path: /{cq.name}; "
            f"preemptee path: /{cq.name}"
        )
        for victim in victims:
            self._evict(victim, "Preempted", message, preemption_reason="InClusterQueue")
        cq.usage = usage
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
        if self._write_status(wl, rules.evicted(reason, message, preemption_reason)) is not None:
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
            in_cq = [
                wl
                for wl in workloads
                if not condition_true(wl, "QuotaReserved")
                and not condition_true(wl, "Finished")
                and rules.is_active(wl)
                and self.local_queues.get(rules.local_queue_of(wl)) == cq_name
            ]
        in_cq.sort(key=rules.queue_order)
        mine = [
            (position, wl)
            for position, wl in enumerate(in_cq)
            if rules.local_queue_of(wl) == (namespace, local_queue)
        ]
        return {
            "kind": "PendingWorkloadsSummary",
            "apiVersion": "visibility.kueue.x-k8s.io/v1beta2",
            "metadata": {},
            "items": [rules.pending_item(wl, pos, i) for i, (pos, wl) in enumerate(mine)],
        }


def load_workload_crd(upstream: Path) -> Any:
    """The upstream Workload CRD (``kueue/crds``), as the server validates with it."""
    from kf_trainer_core.testing import crd

    file = upstream / "kueue" / "crds" / "kueue.x-k8s.io_workloads.yaml"
    return crd._load_cached(str(file.resolve()), file.stat().st_mtime_ns)
