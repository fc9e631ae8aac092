"""What the simulated Kueue decides, as pure functions over plain objects.

:mod:`kf_trainer_core.testing.kueue` owns the store, the thread and the order of events;
this module holds the rules it applies — quantities, queue order, quota shortfall and its
messages, preemption victims, and the Workload status each decision writes — so each can
be read (and tested) without a server.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from kf_trainer_core.cluster.kueue import JOB_UID_LABEL, QUEUE_NAME_LABEL, WORKLOADS
from kf_trainer_core.k8s.objects import set_condition
from kf_trainer_core.k8s.quantity import parse_quantity
from kf_trainer_core.k8s.resources import CLUSTER_TRAINING_RUNTIMES, TRAINING_RUNTIMES, TRAINJOBS
from kf_trainer_core.k8s.trainjob import condition_true

JSON = dict[str, Any]
#: Writes a decision into a Workload's ``status``.
StatusChange = Callable[[JSON], None]

#: The label that names a WorkloadPriorityClass for a job.
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
#: The one pod set a TrainJob's Workload has in the simulation.
POD_SET = "node"
#: The manager of the RuntimePatch Kueue's webhook adds to every TrainJob.
RUNTIME_PATCH_MANAGER = "kueue.x-k8s.io/manager"
_NO_RESERVATION = ("NoReservation", "The workload has no reservation")
#: The binary units Kueue prints memory in, largest first.
_BINARY_UNITS = (
    ("Ti", Decimal(1024) ** 4),
    ("Gi", Decimal(1024) ** 3),
    ("Mi", Decimal(1024) ** 2),
    ("Ki", Decimal(1024)),
)


def format_quantity(value: Decimal, resource: str) -> str:
    """A quantity as Kueue prints it in messages: whole numbers plain, fractions in
    milli-units, memory in the largest binary unit that divides it."""
    if resource in ("memory", "ephemeral-storage"):
        for suffix, unit in _BINARY_UNITS:
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

    def fits(self, request: dict[str, Decimal], usage: dict[str, Decimal]) -> bool:
        """Whether ``request`` fits in the quota on top of ``usage``."""
        return all(
            usage.get(k, Decimal(0)) + v <= self.quota.get(k, Decimal(-1))
            for k, v in request.items()
        )

    def shortfall(self, request: dict[str, Decimal]) -> str | None:
        """Kueue's message for why ``request`` does not fit now, or None when it does.

        As Kueue v0.19's flavor assigner words it: a resource the ClusterQueue does not
        cover ends the pod set's evaluation with only that ("resource … unavailable in
        ClusterQueue"); otherwise the flavor's reasons for every resource, sorted — a
        request beyond the nominal quota ("… current podset request (16) > maximum
        capacity (8)", never to fit) or beyond what is unused now ("… N more
        needed")."""
        needed = sorted((k, v) for k, v in request.items() if v != 0)
        for res_name, _ in needed:
            if res_name not in self.quota:
                return f"couldn't assign flavors to pod set {POD_SET}: " + (
                    f"resource {res_name} unavailable in ClusterQueue"
                )
        problems = []
        for res_name, amount in needed:
            nominal = self.quota[res_name]
            if amount > nominal:
                problems.append(
                    f"insufficient quota for {res_name} in flavor {self.flavor}, previously "
                    f"considered podsets requests (0) + current podset request "
                    f"({format_quantity(amount, res_name)}) > maximum capacity "
                    f"({format_quantity(nominal, res_name)})"
                )
                continue
            free = nominal - self.usage.get(res_name, Decimal(0))
            if amount > free:
                problems.append(
                    f"insufficient unused quota for {res_name} in flavor {self.flavor}, "
                    f"{format_quantity(amount - free, res_name)} more needed"
                )
        if not problems:
            return None
        return f"couldn't assign flavors to pod set {POD_SET}: " + ", ".join(sorted(problems))


# --------------------------------------------------------------------- reading objects


def priority(wl: JSON) -> int:
    return int((wl.get("spec") or {}).get("priority") or 0)


def queue_order(wl: JSON) -> tuple[int, str, str]:
    """Kueue's best-effort FIFO: higher priority first, then older, then by name."""
    meta = wl["metadata"]
    return (-priority(wl), str(meta.get("creationTimestamp") or ""), meta["name"])


def local_queue_of(wl: JSON) -> tuple[str, str]:
    """The ``(namespace, LocalQueue)`` a Workload was submitted to."""
    return wl["metadata"]["namespace"], str((wl.get("spec") or {}).get("queueName") or "")


def admitted_to(wl: JSON) -> str | None:
    """The ClusterQueue holding quota for ``wl``, if it holds any."""
    if not condition_true(wl, "QuotaReserved"):
        return None
    return ((wl.get("status") or {}).get("admission") or {}).get("clusterQueue")


def request_of(wl: JSON) -> dict[str, Decimal]:
    """The total resources a Workload asks for, over its pod sets."""
    total: dict[str, Decimal] = {}
    for ps in (wl.get("spec") or {}).get("podSets") or []:
        count = int(ps.get("count") or 1)
        for c in ((ps.get("template") or {}).get("spec") or {}).get("containers") or []:
            for k, v in ((c.get("resources") or {}).get("requests") or {}).items():
                total[k] = total.get(k, Decimal(0)) + parse_quantity(v) * count
    return total


def shape(wl: JSON) -> tuple[Any, ...]:
    """What makes two Workloads equal to Kueue's scheduler (its scheduling equivalence
    hash): the priority and each pod set's name, count and requests."""
    sets = []
    for ps in (wl.get("spec") or {}).get("podSets") or []:
        requests = request_of({"spec": {"podSets": [{**ps, "count": 1}]}})
        sets.append((ps.get("name"), int(ps.get("count") or 1), tuple(sorted(requests.items()))))
    return (priority(wl), tuple(sets))


def finished_condition(job: JSON) -> JSON | None:
    """The TrainJob's True ``Complete`` or ``Failed`` condition, if it has finished."""
    conds = (job.get("status") or {}).get("conditions") or []
    return next(
        (c for c in conds if c.get("type") in ("Complete", "Failed") and c.get("status") == "True"),
        None,
    )


# --------------------------------------------------------------------- making objects


def workload_name(job: str, uid: str) -> str:
    """Kueue's name for a TrainJob's Workload: ``trainjob-<name>`` (cut at 247
    characters) and the first 5 hex digits of the SHA-1 of the owner's kind, group,
    name and UID, one a line (Kueue v0.19, ``jobframework.GetWorkloadNameForOwnerWithGVK``)."""
    owner = "\n".join(("TrainJob", TRAINJOBS.group, job, uid))
    digest = hashlib.sha1(owner.encode(), usedforsecurity=False).hexdigest()[:5]
    return f"trainjob-{job}"[:247] + f"-{digest}"


def workload_for(job: JSON, priority_classes: dict[str, int]) -> JSON:
    """The Workload Kueue's TrainJob integration makes for a labelled ``job``: one pod set
    of ``numNodes`` pods requesting ``resourcesPerNode``, owned by the job."""
    meta = job["metadata"]
    labels = meta.get("labels") or {}
    trainer = (job.get("spec") or {}).get("trainer") or {}
    res = trainer.get("resourcesPerNode") or {}
    per_pod = {**(res.get("limits") or {}), **(res.get("requests") or {})}
    requests = {k: format_quantity(parse_quantity(v), k) for k, v in per_pod.items()}
    pclass = labels.get(PRIORITY_CLASS_LABEL)
    container = {"name": "node", "resources": {"requests": requests}}
    spec: JSON = {
        "queueName": labels[QUEUE_NAME_LABEL],
        "active": True,
        "priority": priority_classes.get(pclass, 0) if pclass else 0,
        "podSets": [
            {
                "name": POD_SET,
                "count": int(trainer.get("numNodes") or 1),
                "template": {"spec": {"containers": [container]}},
            }
        ],
    }
    if pclass:
        spec["priorityClassRef"] = {
            "group": "kueue.x-k8s.io",
            "kind": "WorkloadPriorityClass",
            "name": pclass,
        }
    owner = {
        "apiVersion": TRAINJOBS.api_version,
        "kind": "TrainJob",
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    return {
        "apiVersion": WORKLOADS.api_version,
        "kind": "Workload",
        "metadata": {
            "name": workload_name(meta["name"], str(meta["uid"])),
            "labels": {JOB_UID_LABEL: str(meta["uid"])},
            "ownerReferences": [owner],
        },
        "spec": spec,
    }


#: Where Kueue's webhooks do not act (upstream's namespaceSelector).
WEBHOOK_EXEMPT_NAMESPACES = frozenset({"kube-system", "kueue-system"})


def webhooks_apply(obj: JSON) -> bool:
    """Whether Kueue's job webhooks see a write of ``obj`` (its namespace)."""
    return (obj.get("metadata") or {}).get("namespace") not in WEBHOOK_EXEMPT_NAMESPACES


def kueue_runtime_patch() -> JSON:
    """The (empty) RuntimePatch Kueue's TrainJob webhook appends, where Kueue writes
    what admission decides (node selectors, tolerations of the flavor)."""
    return {
        "manager": RUNTIME_PATCH_MANAGER,
        "trainingRuntimeSpec": {"template": {"spec": {}}},
    }


def runtime_of(store: Any, ref: JSON, namespace: str) -> JSON | None:
    """The runtime a TrainJob's ``runtimeRef`` names (a ClusterTrainingRuntime unless
    its kind says TrainingRuntime), or None when there is none."""
    namespaced = ref.get("kind") == "TrainingRuntime"
    res = TRAINING_RUNTIMES if namespaced else CLUSTER_TRAINING_RUNTIMES
    found: JSON | None = store.try_get(
        res, namespace if namespaced else None, str(ref.get("name") or "")
    )
    return found


def pending_item(wl: JSON, position_in_cq: int, position_in_lq: int) -> JSON:
    """One ``PendingWorkload`` of the visibility API's summary."""
    meta = wl["metadata"]
    return {
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "creationTimestamp": meta.get("creationTimestamp"),
            "ownerReferences": meta.get("ownerReferences") or [],
        },
        "priority": priority(wl),
        "localQueueName": str((wl.get("spec") or {}).get("queueName") or ""),
        "positionInClusterQueue": position_in_cq,
        "positionInLocalQueue": position_in_lq,
    }


# --------------------------------------------------------------------- decisions


def choose_victims(
    wl: JSON, cq: ClusterQueue, request: dict[str, Decimal], everyone: Iterable[JSON]
) -> tuple[list[JSON], dict[str, Decimal]] | None:
    """The lower-priority Workloads of ``cq`` (lowest, oldest first) whose eviction makes
    room for ``wl``, and the usage after it; None when even all of them would not."""
    mine = priority(wl)
    victims = sorted(
        (
            w
            for w in everyone
            if admitted_to(w) == cq.name
            and not condition_true(w, "Finished")
            and priority(w) < mine
        ),
        key=lambda w: (priority(w), str(w["metadata"].get("creationTimestamp") or "")),
    )
    usage = dict(cq.usage)
    chosen = []
    for victim in victims:
        if cq.fits(request, usage):
            break
        chosen.append(victim)
        for k, v in request_of(victim).items():
            usage[k] = usage.get(k, Decimal(0)) - v
    return (chosen, usage) if cq.fits(request, usage) else None


def is_pending_with(wl: JSON, reason: str, message: str) -> bool:
    """Whether ``wl`` already says it is pending for exactly this reason."""
    return any(
        c.get("type") == "QuotaReserved"
        and c.get("status") == "False"
        and c.get("reason") == reason
        and c.get("message") == message
        for c in (wl.get("status") or {}).get("conditions") or []
    )


def pending(reason: str, message: str) -> StatusChange:
    """Not admitted: ``QuotaReserved=False`` with Kueue's reason and message (Kueue
    writes no ``Admitted`` condition before a first admission)."""

    def change(st: JSON) -> None:
        conditions = st.setdefault("conditions", [])
        set_condition(conditions, "QuotaReserved", "False", reason, message)
        for c in conditions:
            if c.get("type") == "Admitted" and c.get("status") == "True":
                set_condition(conditions, "Admitted", "False", *_NO_RESERVATION)

    return change


def admitted(cq: ClusterQueue, request: dict[str, Decimal], count: int) -> StatusChange:
    """Admitted into ``cq``: the admission, ``QuotaReserved`` and ``Admitted``, and any
    earlier eviction or preemption no longer current."""

    def change(st: JSON) -> None:
        st["admission"] = {
            "clusterQueue": cq.name,
            "podSetAssignments": [
                {
                    "name": POD_SET,
                    "flavors": dict.fromkeys(request, cq.flavor),
                    "resourceUsage": {k: format_quantity(v, k) for k, v in request.items()},
                    "count": count,
                }
            ],
        }
        reserved = f"Quota reserved in ClusterQueue {cq.name}"
        conditions = st.setdefault("conditions", [])
        set_condition(conditions, "QuotaReserved", "True", "QuotaReserved", reserved)
        set_condition(conditions, "Admitted", "True", "Admitted", "The workload is admitted")
        for c in conditions:
            if c.get("type") in ("Evicted", "Preempted") and c.get("status") == "True":
                previously = f"Previously: {c.get('message', '')}"
                set_condition(conditions, c["type"], "False", "QuotaReserved", previously)

    return change


#: What Kueue says of a Workload whose ``spec.active`` is false.
DEACTIVATED = "The workload is deactivated"


def is_active(wl: JSON) -> bool:
    """Whether the Workload may be admitted (``spec.active``, true when unset)."""
    return (wl.get("spec") or {}).get("active") is not False


def deactivation_due(wl: JSON) -> bool:
    """An inactive Workload Kueue has not evicted for it yet."""
    return not is_active(wl) and not any(
        (c.get("type"), c.get("status"), c.get("reason")) == ("Evicted", "True", "Deactivated")
        for c in (wl.get("status") or {}).get("conditions") or []
    )


def deactivated(wl: JSON) -> StatusChange:
    """Deactivated (Kueue v0.19.2, measured): evicted with reason ``Deactivated`` and
    counted; an admitted one also loses its admission (``QuotaReserved`` and
    ``Admitted`` false, ``Requeued`` false: it is not requeued while inactive), a
    pending one keeps what it said of its quota."""
    admitted_now = condition_true(wl, "QuotaReserved")

    def change(st: JSON) -> None:
        conditions = st.setdefault("conditions", [])
        set_condition(conditions, "Evicted", "True", "Deactivated", DEACTIVATED)
        _count_eviction(st, "Deactivated")
        if admitted_now:
            st.pop("admission", None)
            set_condition(conditions, "QuotaReserved", "False", "Pending", DEACTIVATED)
            set_condition(conditions, "Admitted", "False", *_NO_RESERVATION)
            set_condition(conditions, "Requeued", "False", "Deactivated", DEACTIVATED)

    return change


def reactivation_due(wl: JSON) -> bool:
    """An active Workload whose ``Requeued`` still says it was deactivated."""
    return is_active(wl) and any(
        (c.get("type"), c.get("status"), c.get("reason")) == ("Requeued", "False", "Deactivated")
        for c in (wl.get("status") or {}).get("conditions") or []
    )


def reactivated(st: JSON) -> None:
    """Active again: requeued (``Reactivated``), admitted like any pending Workload."""
    conditions = st.setdefault("conditions", [])
    set_condition(conditions, "Requeued", "True", "Reactivated", "The workload was reactivated")


def _count_eviction(st: JSON, reason: str) -> None:
    """Count an eviction in ``schedulingStats.evictions``, per reason."""
    stats = st.setdefault("schedulingStats", {}).setdefault("evictions", [])
    entry = next((e for e in stats if e.get("reason") == reason), None)
    if entry is None:
        stats.append({"reason": reason, "underlyingCause": "", "count": 1})
    else:
        entry["count"] = int(entry.get("count") or 0) + 1


def evicted(reason: str, message: str, preemption_reason: str | None = None) -> StatusChange:
    """Evicted (and, with ``preemption_reason``, preempted): quota released, requeued.
    Kueue counts it in ``schedulingStats.evictions``; only an eviction by the PodsReady
    timeout (whose requeueing backs off) also counts in ``requeueState``."""

    def change(st: JSON) -> None:
        st.pop("admission", None)
        conditions = st.setdefault("conditions", [])
        set_condition(conditions, "Evicted", "True", reason, message)
        if preemption_reason is not None:
            set_condition(conditions, "Preempted", "True", preemption_reason, message)
        set_condition(conditions, "QuotaReserved", "False", "Pending", message)
        set_condition(conditions, "Admitted", "False", *_NO_RESERVATION)
        set_condition(conditions, "Requeued", "True", reason, message)
        _count_eviction(st, reason)
        if reason == "PodsReadyTimeout":
            state = st.setdefault("requeueState", {})
            state["count"] = int(state.get("count") or 0) + 1

    return change


def finished(done: JSON) -> StatusChange:
    """The TrainJob finished with condition ``done``: the Workload is Finished."""
    reason = "Succeeded" if done["type"] == "Complete" else "Failed"
    message = str(done.get("message") or f"Job {done['type'].lower()}")

    def change(st: JSON) -> None:
        set_condition(st.setdefault("conditions", []), "Finished", "True", reason, message)

    return change
