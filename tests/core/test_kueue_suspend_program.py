"""Suspend, resume and delete of jobs Kueue holds, played against scripted answers (no
server): what the suite does where Kueue does not answer as it should — Workloads it may
not read, a Kueue that does not act, a job with no Workload coming, a job another
controller keeps writing — and a delete that leaves such a job in place a while. The
behaviour on both Kueues: tests/conformance/test_kueue_jobs.py and the state matrix."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from scripted_api import Sleep, play

from kf_trainer_core.base.timeutil import now
from kf_trainer_core.cluster.kueue import QUEUE_NAME_LABEL, WORKLOADS
from kf_trainer_core.errors import DeleteConflictError
from kf_trainer_core.k8s.calls import Delete, Get, ListObjects, Patch
from kf_trainer_core.k8s.errors import ApiError
from kf_trainer_core.k8s.resources import JOBSETS, TRAINJOBS
from kf_trainer_core.programs import cancel


def job(
    name: str = "j", *, suspend: bool = False, age: float = 600, finalizers: Any = None
) -> dict[str, Any]:
    created = (now() - timedelta(seconds=age)).strftime("%Y-%m-%dT%H:%M:%SZ")
    meta: dict[str, Any] = {
        "name": name,
        "uid": f"uid-{name}",
        "resourceVersion": "5",
        "creationTimestamp": created,
        "labels": {QUEUE_NAME_LABEL: "team-a"},
    }
    if finalizers:
        meta["finalizers"] = finalizers
    return {"metadata": meta, "spec": {"suspend": suspend}}


def workload(active: bool = True, owner: str = "j") -> dict[str, Any]:
    return {
        "metadata": {"name": f"trainjob-{owner}", "ownerReferences": [{"uid": f"uid-{owner}"}]},
        "spec": {"active": active},
    }


def patches(calls: list[Any], resource: Any) -> list[dict[str, Any]]:
    return [c.body for c in calls if isinstance(c, Patch) and c.resource == resource]


@pytest.mark.parametrize("code", [401, 403])
def test_workloads_that_may_not_be_read_leave_spec_suspend_as_the_way(code: int) -> None:
    """As the queue status takes it: a 403 on Workloads is "no Kueue to be seen" (the
    API server refuses before it looks, so a cluster without Kueue answers it too)."""

    def answer(call: Any) -> Any:
        if isinstance(call, ListObjects):
            return ApiError(code, "Forbidden")
        if isinstance(call, Patch):
            return job(suspend=True)
        return job()

    out, calls = play(lambda api: cancel.set_suspended(api, "ns", "j", True), answer)
    assert out.name == "j"
    assert patches(calls, TRAINJOBS) == [{"spec": {"suspend": True}}]


def test_a_kueue_that_does_not_act_still_leaves_the_job_suspended() -> None:
    """Kueue's controller down: the Workload is deactivated, the job runs on; after the
    wait the suite sets spec.suspend itself (Kueue keeps an inactive Workload's job so)."""

    def answer(call: Any) -> Any:
        if isinstance(call, ListObjects):
            return {"items": [workload()]}
        if isinstance(call, Patch) and call.resource == TRAINJOBS:
            return job(suspend=True)
        if isinstance(call, Patch | Sleep):
            return None
        return job()

    out, calls = play(lambda api: cancel.set_suspended(api, "ns", "j", True), answer)
    assert patches(calls, WORKLOADS) == [{"spec": {"active": False}}]
    assert patches(calls, TRAINJOBS) == [{"spec": {"suspend": True}}]
    assert sum(c.seconds for c in calls if isinstance(c, Sleep)) >= cancel.WORKLOAD_WAIT_SECONDS
    assert isinstance(calls[-1], Patch)  # the job returned is the one suspended here
    assert calls[-1].resource == TRAINJOBS
    assert out.name == "j"


@pytest.mark.parametrize(("age", "lists"), [(600, 1), (1, 13)])
def test_only_a_new_job_waits_for_its_workload(age: float, lists: int) -> None:
    """A job Kueue's webhook suspended a moment ago gets its Workload within moments; an
    older one without a Workload has none coming (Kueue's controller not running, a
    namespace Kueue does not manage) and is suspended at once."""

    def answer(call: Any) -> Any:
        if isinstance(call, ListObjects):
            return {"items": []}
        if isinstance(call, Sleep):
            return None
        return job(suspend=True, age=age)

    _, calls = play(lambda api: cancel.set_suspended(api, "ns", "j", True), answer)
    assert len([c for c in calls if isinstance(c, ListObjects)]) == lists
    assert patches(calls, TRAINJOBS) == [{"spec": {"suspend": True}}]


def test_a_resume_right_after_the_submit_leaves_the_job_to_kueue() -> None:
    """Within moments of its creation a job Kueue's webhook suspended has no Workload
    yet: the resume waits for it, and leaves the job suspended for Kueue to admit (a
    spec.suspend: false would start its pods, and Kueue suspend it again)."""
    lists = iter([[], [], [workload()]])

    def answer(call: Any) -> Any:
        if isinstance(call, ListObjects):
            return {"items": next(lists)}
        if isinstance(call, Sleep):
            return None
        return job(suspend=True, age=1)

    out, calls = play(lambda api: cancel.resume(api, "ns", "j"), answer)
    assert patches(calls, TRAINJOBS) == []
    assert patches(calls, WORKLOADS) == []  # active already: Kueue admits it in turn
    assert out.name == "j"


def test_a_foreground_delete_deactivates_the_workload_of_a_job_kueue_holds() -> None:
    """The job outlives the request, and the Trainer reconciles it meanwhile: it is
    stopped the Kueue way (a spec.suspend would be undone)."""

    def answer(call: Any) -> Any:
        if isinstance(call, ListObjects):
            return {"items": [workload()]}
        if isinstance(call, Get) and call.resource == JOBSETS:
            return ApiError(404, "NotFound")
        if isinstance(call, Get):
            return job()
        return {"kind": "Status", "status": "Success"}

    for propagation, finalizers, deactivated in [
        ("Foreground", None, True),
        ("Background", ["example.com/hold"], True),
        ("Background", None, False),
    ]:

        def answers(call: Any, finalizers: Any = finalizers) -> Any:
            if isinstance(call, Get) and call.resource == TRAINJOBS:
                return job(finalizers=finalizers)
            return answer(call)

        done, calls = play(lambda api, p=propagation: cancel.delete(api, "ns", "j", p), answers)
        assert done is True
        assert patches(calls, TRAINJOBS) == []  # never a spec.suspend Kueue would undo
        wanted = [{"spec": {"active": False}}] if deactivated else []
        assert patches(calls, WORKLOADS) == wanted, (propagation, finalizers)


def test_stop_unfinished_goes_on_past_a_job_it_could_not_delete() -> None:
    """One job another controller keeps writing does not leave the others running; the
    error names it and what was stopped."""
    listed = [job("a"), job("b")]
    versions = iter(range(6, 1000))

    def answer(call: Any) -> Any:
        if isinstance(call, ListObjects):
            return {"items": [] if call.resource == WORKLOADS else listed}
        if isinstance(call, Get) and call.resource == JOBSETS:
            return ApiError(404, "NotFound")
        if isinstance(call, Get):
            obj = job(call.name)
            obj["metadata"]["labels"] = {}
            obj["metadata"]["resourceVersion"] = str(next(versions))
            return obj
        if isinstance(call, Delete) and not call.dry_run and call.name == "a":
            return ApiError(409, "Conflict")
        if isinstance(call, Patch):
            return job(call.name, suspend=True)
        return {"kind": "Status", "status": "Success"}

    with pytest.raises(DeleteConflictError, match=r"\ba\b.*not deleted.*1 other job.*: b"):
        play(lambda api: cancel.stop_unfinished(api, "ns", "delete", label_selector="x=y"), answer)
