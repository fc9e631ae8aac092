"""A job Kueue can never admit, told from Kueue's own words (pure: no server): what
"request > maximum capacity" and its kin say, what "insufficient unused quota" says
instead (wait: quota frees), and the verdict a wait reaches on it."""

from __future__ import annotations

import pickle
from typing import Any

import pytest
from scripted_api import play

from kf_trainer_core.cluster.kueue import QueueStatus, never_fits, queue_status
from kf_trainer_core.errors import (
    CapacityFailure,
    FailureClass,
    TrainJobCapacityError,
    TrainJobNotAdmissibleError,
)
from kf_trainer_core.programs.wait import WaitGoal
from kf_trainer_core.tasks.interruptions import disposition

PS = "couldn't assign flavors to pod set node: "
BEYOND = (
    "insufficient quota for nvidia.com/gpu in flavor default-flavor, previously considered "
    "podsets requests (0) + current podset request (16) > maximum capacity (8)"
)
UNUSED = "insufficient unused quota for nvidia.com/gpu in flavor default-flavor, 8 more needed"


@pytest.mark.parametrize(
    ("reason", "message", "limits"),
    [
        # Kueue v0.19: the pod set's request beyond the ClusterQueue's maximum.
        ("Pending", PS + BEYOND, [("nvidia.com/gpu", "default-flavor", "16", "8")]),
        # Older Kueue's words for the same.
        (
            "Pending",
            PS + "insufficient quota for cpu in flavor one in ClusterQueue, request > maximum "
            "capacity (24 > 10)",
            [("cpu", "one", "24", "10")],
        ),
        # The ClusterQueue does not cover the resource at all.
        (
            "Pending",
            PS + "resource nvidia.com/gpu unavailable in ClusterQueue",
            [("nvidia.com/gpu", None, None, None)],
        ),
        # No flavor's taints or node labels let it in.
        (
            "Pending",
            PS + "flavor a doesn't match node affinity, untolerated taint {gpu: NoSchedule} "
            "in flavor b",
            [(None, "a", None, None), (None, "b", None, None)],
        ),
        # One flavor beyond its maximum for one resource can never hold the pod set,
        # whatever it says of another resource.
        ("Pending", PS + BEYOND + ", " + UNUSED.replace("nvidia.com/gpu", "cpu"), ["gpu"]),
        # Another pod set waiting for quota does not rescue one that never fits.
        (
            "Pending",
            "couldn't assign flavors to pod set init: " + UNUSED + "; " + PS + BEYOND,
            ["gpu"],
        ),
        # Kueue's own reason (the UnadmittedWorkloadsObservability feature gate).
        ("ExceedsMaxQuota", PS + BEYOND, ["gpu"]),
        ("ExceedsMaxQuota", "words a newer Kueue may use", ["?"]),
        # Waiting: quota frees, or the message is not understood, or not Kueue's.
        ("Pending", PS + UNUSED, []),
        # Another flavor may hold it when its quota frees.
        ("Pending", PS + BEYOND.replace("default-flavor", "a") + ", " + UNUSED, []),
        ("Pending", PS + BEYOND + ", something Kueue has not said before", []),
        ("Inadmissible", "LocalQueue team-a doesn't exist", []),
        ("Inadmissible", "ClusterQueue gpus is inactive", []),
        ("Pending", "Preempted to accommodate a workload (UID: x) ...", []),
        (None, None, []),
    ],
)
def test_never_fits(reason: str | None, message: str | None, limits: list[Any]) -> None:
    found = never_fits(reason, message)
    assert len(found) == len(limits)
    for limit, want in zip(found, limits, strict=True):
        if isinstance(want, tuple):
            assert (limit.resource, limit.flavor, limit.requested, limit.maximum) == want
        assert limit.text


def workload(message: str, reason: str = "Pending") -> dict[str, Any]:
    return {
        "metadata": {"name": "trainjob-big-605eb", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"queueName": "gpu"},
        "status": {
            "conditions": [
                {
                    "type": "QuotaReserved",
                    "status": "False",
                    "reason": reason,
                    "message": message,
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                }
            ]
        },
    }


def suspended_job() -> dict[str, Any]:
    return {
        "metadata": {
            "name": "big",
            "namespace": "team-a",
            "labels": {"kueue.x-k8s.io/queue-name": "gpu"},
            "resourceVersion": "7",
        },
        "spec": {"suspend": True},
        "status": {"conditions": [{"type": "Suspended", "status": "True"}]},
    }


def test_the_queue_status_says_never_and_why() -> None:
    q = queue_status("gpu", workload(PS + BEYOND))
    assert q.never_admissible
    text = q.never_admitted_text()
    assert "pod set node asks for 16 nvidia.com/gpu, more than the maximum capacity of 8" in text
    assert "Fix: ask for at most 8 nvidia.com/gpu in all" in text
    waiting = queue_status("gpu", workload(PS + UNUSED))
    assert not waiting.never_admissible
    assert waiting.never_fits == []


def test_a_wait_ends_at_once_on_a_job_that_can_never_be_admitted() -> None:
    goal = WaitGoal.of("big", "Complete")  # no admission or startup timeout
    never = queue_status("gpu", workload(PS + BEYOND))
    verdict = goal.judge(suspended_job(), elapsed=0.1, queue=never)
    assert verdict is not None
    assert verdict.kind == "never-admissible"
    assert "16 nvidia.com/gpu" in verdict.message
    # Waiting for quota to free: no verdict (the wait goes on to its timeouts).
    assert (
        goal.judge(suspended_job(), elapsed=1e6, queue=queue_status("gpu", workload(PS + UNUSED)))
        is None
    )
    # Admitted meanwhile (quota raised): the job's own state decides, not the old words.
    admitted = never.model_copy(update={"admitted": True})
    assert goal.judge(suspended_job(), elapsed=0.1, queue=admitted) is None


def test_the_error_is_a_capacity_failure_that_stops_the_task_s_job() -> None:
    from kf_trainer_core.cluster.status import Failure, to_trainjob

    q: QueueStatus = queue_status("gpu", workload(PS + BEYOND))
    failure = Failure(
        reason="ExceedsMaxQuota",
        message=q.never_admitted_text(),
        failure_class=FailureClass.CAPACITY,
        classified_by="Kueue: the request exceeds the queue's maximum capacity",
    )
    err = TrainJobNotAdmissibleError(to_trainjob(suspended_job(), queue=q), failure)
    assert isinstance(err, TrainJobCapacityError)
    assert isinstance(err, CapacityFailure)
    assert err.failure_class is FailureClass.CAPACITY
    assert str(err).startswith("team-a/big can never be admitted by Kueue: ExceedsMaxQuota: ")
    assert "a retry will not help" in str(err)
    assert err.queue is not None
    assert err.queue.never_admissible
    copy = pickle.loads(pickle.dumps(err))
    assert str(copy) == str(err)
    # A task that meets it gives up on the job (it would stay queued forever).
    kept = disposition(err, final_attempt=False, signalled=False, cancelling=lambda: False)
    assert kept == "cancel"


def test_a_new_workload_is_read_every_second_until_kueue_says_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import time

    from kf_trainer_core.cluster import kueue as kueue_module
    from kf_trainer_core.cluster.kueue import KueueProbe, QueueTracker

    job = suspended_job()
    job["metadata"]["uid"] = "u-1"
    unsaid = workload("")
    unsaid["status"] = {}  # Kueue has not evaluated it yet
    unsaid["metadata"]["ownerReferences"] = [{"uid": "u-1"}]

    def refresh(tracker: QueueTracker, wl: dict[str, Any]) -> None:
        answers = iter([{"items": [wl]}, {"spec": {"clusterQueue": "cq"}}, {"items": []}])
        play(lambda api: tracker.refresh(api, job), lambda call: next(answers))

    tracker = QueueTracker("team-a", KueueProbe())
    refresh(tracker, unsaid)
    assert tracker.status is not None
    assert tracker.status.workload is not None
    wake = tracker.wake_in(job)
    assert wake is not None
    assert wake <= 1.0
    # Still nothing said 10 s later (an equal job ahead does not fit): back to 15 s.
    later = time.monotonic() + kueue_module.EVALUATION_SECONDS + 1
    monkeypatch.setattr(kueue_module.time, "monotonic", lambda: later)
    refresh(tracker, unsaid)
    assert tracker.wake_in(job) == pytest.approx(kueue_module.QUEUE_REFRESH_SECONDS)
    # Once Kueue has said why, the usual 15 s.
    monkeypatch.undo()
    fresh = QueueTracker("team-a", KueueProbe())
    refresh(fresh, workload(PS + UNUSED) | {"metadata": unsaid["metadata"]})
    assert fresh.wake_in(job) == pytest.approx(kueue_module.QUEUE_REFRESH_SECONDS, abs=0.1)
