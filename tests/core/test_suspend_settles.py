"""A settled suspend (``suspend_job``), played against scripted answers: the API
server's answer to ``spec.suspend: true`` still reads Running — the Trainer marks the
job ``Suspended`` a moment later (30-100 ms on a real control plane) — so the suspend
reads the job again until it does, and never waits longer than it must. On a real
server: tests/conformance/test_lifecycle.py."""

from __future__ import annotations

from typing import Any

import pytest
from scripted_api import Sleep, play

from kf_trainer_core.cluster.status import JobState
from kf_trainer_core.k8s.calls import Get, ListObjects, Patch
from kf_trainer_core.programs import cancel

RUNNING_STEPS = [{"name": "node", "ready": 1, "active": 1}]


def job(*, suspend: bool, marked: bool = False, finished: bool = False) -> dict[str, Any]:
    conditions = []
    if marked:
        conditions.append({"type": "Suspended", "status": "True", "reason": "Suspended"})
    if finished:
        conditions.append({"type": "Complete", "status": "True", "reason": "Done"})
    return {
        "metadata": {"name": "j", "uid": "uid-j", "resourceVersion": "5"},
        "spec": {"suspend": suspend},
        "status": {"conditions": conditions, "jobsStatus": RUNNING_STEPS},
    }


def scripted(after_patch: list[dict[str, Any]]) -> Any:
    """A job running until the patch; then each read answers the next of
    ``after_patch`` (the last one for good)."""
    patched = False
    reads = iter(after_patch)
    last = after_patch[-1]

    def answer(call: Any) -> Any:
        nonlocal patched, last
        if isinstance(call, Sleep):
            return None
        if isinstance(call, ListObjects):
            return {"items": []}
        if isinstance(call, Patch):
            patched = True
            return job(suspend=True)  # as the API server answers: not marked yet
        assert isinstance(call, Get)
        if not patched:
            return job(suspend=False)
        last = next(reads, last)
        return last

    return answer


def suspend(answer: Any, *, settle: bool) -> tuple[Any, list[Any]]:
    return play(lambda api: cancel.set_suspended(api, "ns", "j", True, settle=settle), answer)


def test_a_settled_suspend_returns_the_job_once_the_trainer_marked_it() -> None:
    unmarked, marked = job(suspend=True), job(suspend=True, marked=True)
    out, calls = suspend(scripted([unmarked, unmarked, marked]), settle=True)
    assert out.status is JobState.SUSPENDED
    assert [c for c in calls if isinstance(c, Get)][-1].name == "j"
    assert len([c for c in calls if isinstance(c, Sleep)]) == 3


def test_without_settling_the_job_is_the_api_servers_answer() -> None:
    """cancel_job and stop_unfinished only need the change made."""
    out, calls = suspend(scripted([job(suspend=True, marked=True)]), settle=False)
    assert out.status is JobState.RUNNING
    assert not [c for c in calls if isinstance(c, Sleep)]


@pytest.mark.parametrize(
    "then",
    [
        pytest.param(job(suspend=False), id="suspend undone by another controller"),
        pytest.param(job(suspend=True, finished=True), id="finished meanwhile"),
    ],
)
def test_nothing_to_wait_for_ends_the_wait_at_once(then: dict[str, Any]) -> None:
    out, calls = suspend(scripted([then]), settle=True)
    assert len([c for c in calls if isinstance(c, Sleep)]) == 1
    assert out.status is not JobState.SUSPENDED


def test_a_trainer_that_does_not_mark_it_ends_the_wait_after_the_bound() -> None:
    """The Trainer's controller down: the job comes back as it is, honestly Running."""
    out, calls = suspend(scripted([job(suspend=True)]), settle=True)
    assert out.status is JobState.RUNNING
    slept = sum(c.seconds for c in calls if isinstance(c, Sleep))
    assert cancel.TRAINER_WAIT_SECONDS <= slept < cancel.TRAINER_WAIT_SECONDS + 1
