"""A Workload made inactive (``spec.active: false``, the suite's suspend of a job Kueue
holds), as Kueue v0.19.2 writes it — the conditions below were read off the real Kueue
(tests/conformance/test_kueue_jobs.py drives the same on both Kueues) — read into a
:class:`QueueStatus`, and written so by the simulated Kueue's rules."""

from __future__ import annotations

from datetime import datetime, timezone
from decimal import Decimal
from typing import Any

from kf_trainer_core.cluster.kueue import queue_status
from kf_trainer_core.testing.kueue import rules

DEACTIVATED = "The workload is deactivated"
ADMISSION = {"clusterQueue": "gpus", "podSetAssignments": []}


def workload(conditions: list[tuple[str, str, str, str]], *, active: bool, **status: Any) -> Any:
    return {
        "metadata": {"name": "trainjob-j-1", "creationTimestamp": "2026-11-28T10:00:00Z"},
        "spec": {"queueName": "team-a", "active": active},
        "status": {
            "conditions": [
                {"type": t, "status": s, "reason": r, "message": m} for t, s, r, m in conditions
            ],
            "schedulingStats": {
                "evictions": [{"reason": "Deactivated", "underlyingCause": "", "count": 1}]
            },
            **status,
        },
    }


#: An admitted Workload deactivated (after Kueue's eviction).
EVICTED = workload(
    [
        ("QuotaReserved", "False", "Pending", DEACTIVATED),
        ("Evicted", "True", "Deactivated", DEACTIVATED),
        ("Admitted", "False", "NoReservation", "The workload has no reservation"),
        ("Requeued", "False", "Deactivated", DEACTIVATED),
    ],
    active=False,
)
#: The same, active again and admitted.
READMITTED_CONDITIONS = [
    ("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue gpus"),
    ("Evicted", "False", "QuotaReserved", f"Previously: {DEACTIVATED}"),
    ("Admitted", "True", "Admitted", "The workload is admitted"),
    ("Requeued", "True", "Reactivated", "The workload was reactivated"),
]
READMITTED = workload(READMITTED_CONDITIONS, active=True, admission=ADMISSION)


def shape(wl: Any) -> set[tuple[str, str, str, str]]:
    return {(c["type"], c["status"], c["reason"], c["message"]) for c in wl["status"]["conditions"]}


def test_a_deactivated_workload_reads_suspended_until_resumed() -> None:
    q = queue_status("team-a", EVICTED, at=datetime(2026, 11, 28, 10, 5, tzinfo=timezone.utc))
    assert not q.active
    assert not q.admitted
    assert q.waiting
    assert [(e.reason, e.message) for e in q.evictions] == [("Deactivated", DEACTIVATED)]
    assert q.line() == (
        "suspended in queue team-a (its Workload deactivated until resumed), waited 5m 00s; "
        f"evicted 1x (last: Deactivated: {DEACTIVATED})"
    )


def test_an_eviction_admitted_again_since_keeps_its_own_reason() -> None:
    """Kueue rewrites the condition on admission (reason QuotaReserved, "Previously:
    …"): the eviction's reason is the one Kueue counted."""
    q = queue_status("team-a", READMITTED)
    assert q.active
    assert q.admitted
    assert [(e.reason, e.message) for e in q.evictions] == [("Deactivated", DEACTIVATED)]


def test_the_simulator_writes_what_kueue_writes() -> None:
    admitted = workload([], active=True)
    admitted["status"]["schedulingStats"] = {}
    cq = rules.ClusterQueue("gpus", {"nvidia.com/gpu": Decimal(4)})
    rules.admitted(cq, {"nvidia.com/gpu": Decimal(4)}, 1)(admitted["status"])
    admitted["spec"]["active"] = False
    assert rules.deactivation_due(admitted)
    rules.deactivated(admitted)(admitted["status"])
    assert not rules.deactivation_due(admitted)
    assert shape(admitted) == shape(EVICTED)
    assert "admission" not in admitted["status"]
    assert admitted["status"]["schedulingStats"] == EVICTED["status"]["schedulingStats"]

    admitted["spec"]["active"] = True
    assert rules.reactivation_due(admitted)
    rules.reactivated(admitted["status"])
    assert not rules.reactivation_due(admitted)
    rules.admitted(cq, {"nvidia.com/gpu": Decimal(4)}, 1)(admitted["status"])
    assert shape(admitted) == shape(READMITTED)


def test_an_eviction_of_several_reasons_admitted_again_is_not_named_quota_reserved() -> None:
    both = workload(READMITTED_CONDITIONS, active=True, admission=ADMISSION)
    both["status"]["schedulingStats"]["evictions"].append(
        {"reason": "Preempted", "underlyingCause": "", "count": 1}
    )
    q = queue_status("team-a", both)
    assert [e.reason for e in q.evictions] == ["Evicted"]
