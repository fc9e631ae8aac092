"""Progress as a user reads it (issue 26, item 8): ``track()`` counts on from a resumed
attempt's start, a suspended job has no time left, and the progress bar does not show
0 % before the job's first report."""

from __future__ import annotations

from typing import Any

import pytest

from kf_trainer_core import report as report_module
from kf_trainer_core.cluster.status import JobState, TrainJob, progress, to_trainjob


@pytest.fixture
def reports(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []
    monkeypatch.setattr(report_module, "report", lambda **kw: seen.append(kw))
    return seen


def test_track_counts_on_from_the_resumed_start(reports: list[dict[str, Any]]) -> None:
    items = list(report_module.track(range(6, 10), start=6))
    assert items == [6, 7, 8, 9]
    shown = [r["progress"] for r in reports]
    assert shown == [60.0, 70.0, 80.0, 90.0, 100.0]
    assert reports[-1]["eta_seconds"] == 0


def test_track_without_start_is_unchanged(reports: list[dict[str, Any]]) -> None:
    list(report_module.track(range(4)))
    assert [r["progress"] for r in reports] == [0.0, 25.0, 50.0, 75.0, 100.0]


def _obj(condition: str | None) -> dict[str, Any]:
    conditions = [{"type": condition, "status": "True"}] if condition else []
    return {
        "metadata": {"name": "j", "namespace": "ns"},
        "spec": {"runtimeRef": {"name": "torch-distributed"}, "suspend": condition == "Suspended"},
        "status": {
            "conditions": conditions,
            "jobsStatus": [{"name": "node", "active": 1}] if condition is None else [],
            "trainerStatus": {"progressPercentage": 58, "estimatedRemainingSeconds": 3},
        },
    }


def test_a_suspended_job_has_no_time_left() -> None:
    suspended = progress(_obj("Suspended"))
    assert suspended is not None
    assert suspended.percentage == 58
    assert suspended.estimated_remaining_seconds is None
    assert not any("left" in part for part in suspended.summary())


def test_the_bar_is_indeterminate_until_the_first_report() -> None:
    from kf_trainer_core.cli._follow import Tracker

    obj = _obj("Suspended")
    del obj["status"]["trainerStatus"]
    job: TrainJob = to_trainjob(obj)
    assert job.status is JobState.SUSPENDED
    with Tracker("j", live=True) as tracker:
        tracker.update(job)
        task = tracker._progress.tasks[0]
        assert task.total is None  # a pulse, not "0 %"
