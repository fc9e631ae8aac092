"""Event timestamps as the real Trainer controller writes them (``events.k8s.io/v1``:
``eventTime`` in microseconds, ``lastTimestamp`` empty, repeats in ``series``), found on
the real control plane: compared as text, ``...:57.327434Z`` sorted before the job's
``...:57Z`` and a creation failure was never noticed (the wait ran to its timeout)."""

from __future__ import annotations

from datetime import datetime, timezone

from kf_trainer_core.cluster.events import event_last_seen, to_event
from kf_trainer_core.cluster.status import CREATION_FAILED_REASON
from kf_trainer_core.programs.wait import CREATION_GRACE, WaitGoal

JOB = {
    "metadata": {"name": "j", "creationTimestamp": "2026-11-25T11:39:57Z"},
    "spec": {},
}
EVENT = {
    "reason": CREATION_FAILED_REASON,
    "message": "TrainJob resources reconciliation failed: not found ClusterTrainingRuntime",
    "eventTime": "2026-11-25T11:39:57.327434Z",
    "firstTimestamp": None,
    "lastTimestamp": None,
    "series": {"count": 14, "lastObservedTime": "2026-11-25T11:40:38.305447Z"},
    "involvedObject": {"kind": "TrainJob", "name": "j"},
    "type": "Warning",
}


def test_a_creation_failure_in_the_same_second_as_the_job_is_noticed() -> None:
    verdict = WaitGoal.of("j", "Complete", None, None).judge(JOB, [EVENT])
    assert verdict is not None
    assert verdict.kind == "creation-failed"


def test_an_older_event_of_a_previous_job_of_that_name_is_not() -> None:
    old = {**EVENT, "eventTime": "2026-11-25T11:39:56.9Z", "series": None}
    assert WaitGoal.of("j", "Complete", None, None).judge(JOB, [old]) is None


def test_series_gives_last_seen_and_count() -> None:
    assert event_last_seen(EVENT) == datetime(2026, 11, 25, 11, 40, 38, 305447, timezone.utc)
    event = to_event(EVENT)
    assert event.count == 14
    assert event.event_time == datetime(2026, 11, 25, 11, 40, 38, 305447, timezone.utc)


def test_unusable_stamps_are_none() -> None:
    assert event_last_seen({"eventTime": "yesterday"}) is None
    assert to_event({"count": "many", "reason": "x"}).count == 1


def test_a_build_failure_that_passes_is_not_final() -> None:
    # One failure in the job's first second (a same-name job meeting its predecessor's
    # runtime snapshot while the garbage collector removes it), not repeated since.
    once = {**EVENT, "eventTime": "2026-11-25T11:39:57.4Z", "series": None}
    goal = WaitGoal.of("j", "Complete", None, None)
    assert goal.judge(JOB, [once]) is None
    assert goal.judge(JOB, [once], failing_for=CREATION_GRACE - 1) is None


def test_a_build_failure_that_lasts_the_grace_is_final() -> None:
    once = {**EVENT, "eventTime": "2026-11-25T11:39:57.4Z", "series": None}
    verdict = WaitGoal.of("j", "Complete", None, None).judge(
        JOB, [once], failing_for=CREATION_GRACE
    )
    assert verdict is not None
    assert verdict.kind == "creation-failed"
