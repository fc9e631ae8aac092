"""The delete program's steps, played against scripted answers (no server): suspend,
a background delete, then reads of the JobSet until the deleted job's is gone, bounded;
and a submit that meets a job held in deletion gives up with a clear error. The same
behaviour on real servers: tests/conformance/test_delete.py."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from train_functions import train_linear

from kf_trainer_core.errors import SubmitError
from kf_trainer_core.k8s.calls import Create, Delete, Get, Patch, Program, Sleep
from kf_trainer_core.k8s.errors import ApiError
from kf_trainer_core.k8s.resources import JOBSETS, TRAINJOBS
from kf_trainer_core.manifest.builder import build_trainjob
from kf_trainer_core.programs import cancel, submit
from kf_trainer_core.spec import CustomTrainer, TrainJobSpec

UID = "old-uid"


def play(program: Program[Any], answer: Callable[[Any], Any]) -> tuple[Any, list[Any]]:
    """Run ``program``, answering each call with ``answer(call)`` (an exception it
    returns is thrown in); return the result and the calls made."""
    calls: list[Any] = []
    value: Any = None
    error: BaseException | None = None
    while True:
        try:
            call = program.throw(error) if error is not None else program.send(value)
        except StopIteration as stop:
            return stop.value, calls
        calls.append(call)
        out = answer(call)
        value, error = (None, out) if isinstance(out, BaseException) else (out, None)


def jobset(owner: str) -> dict[str, Any]:
    return {"metadata": {"name": "j", "ownerReferences": [{"uid": owner, "controller": True}]}}


def answers(jobsets: list[Any]) -> Callable[[Any], Any]:
    """The job ``j`` (uid UID) is patched and deleted; JobSet reads answer ``jobsets``
    in turn (the last one for ever)."""
    reads = iter(jobsets)
    last: list[Any] = [None]

    def answer(call: Any) -> Any:
        if isinstance(call, Patch):
            return {"metadata": {"name": "j", "uid": UID}}
        if isinstance(call, Delete):
            return {"kind": "Status", "status": "Success"}
        if isinstance(call, Get) and call.resource == JOBSETS:
            last[0] = next(reads, last[0])
            return last[0]
        if isinstance(call, Sleep):
            return None
        raise AssertionError(call)

    return answer


def kinds(calls: list[Any]) -> list[str]:
    return [type(c).__name__ for c in calls]


def test_background_delete_returns_once_the_old_jobset_is_gone() -> None:
    done, calls = play(
        cancel.delete("ns", "j"), answers([jobset(UID), jobset(UID), ApiError(404, "NotFound")])
    )
    assert done is True
    # The 404 is confirmed by one more read a moment later.
    assert kinds(calls) == [
        "Patch", "Delete", "Get", "Sleep", "Get", "Sleep", "Get", "Sleep", "Get"
    ]  # fmt: skip
    delete = calls[1]
    assert delete.resource == TRAINJOBS
    assert delete.propagation == "Background"
    assert calls[0].body == {"spec": {"suspend": True}}  # suspended first
    sleeps = [c.seconds for c in calls if isinstance(c, Sleep)]
    assert sleeps == [0.05, 0.1, cancel.CONFIRM_SECONDS]


def test_a_jobset_applied_again_after_the_first_404_is_waited_for() -> None:
    """A reconcile of the Trainer under way when the job went may apply its JobSet once
    more, just after the collector removed it: the second look sees it, and the wait
    goes on until two reads in a row find none."""
    gone = ApiError(404, "NotFound")
    done, calls = play(cancel.delete("ns", "j"), answers([gone, jobset(UID), gone, gone]))
    assert done is True
    assert [type(c).__name__ for c in calls if not isinstance(c, Sleep)].count("Get") == 4


def test_a_jobset_owned_by_another_job_ends_the_wait() -> None:
    done, calls = play(cancel.delete("ns", "j"), answers([jobset("new-uid")]))
    assert done is True
    assert kinds(calls) == ["Patch", "Delete", "Get"]


def test_the_wait_is_bounded() -> None:
    done, calls = play(cancel.delete("ns", "j"), answers([jobset(UID)]))
    assert done is True
    slept = sum(c.seconds for c in calls if isinstance(c, Sleep))
    assert cancel.COLLECT_WAIT_SECONDS <= slept <= cancel.COLLECT_WAIT_SECONDS + 0.5
    assert max(c.seconds for c in calls if isinstance(c, Sleep)) == 0.5


@pytest.mark.parametrize("code", [401, 403])
def test_without_read_access_to_jobsets_it_pauses_once(code: int) -> None:
    done, calls = play(cancel.delete("ns", "j"), answers([ApiError(code, "Forbidden")]))
    assert done is True
    assert kinds(calls) == ["Patch", "Delete", "Get", "Sleep"]
    assert calls[-1].seconds == cancel.UNREADABLE_PAUSE_SECONDS


def test_another_failure_of_the_read_does_not_fail_the_delete() -> None:
    done, calls = play(cancel.delete("ns", "j"), answers([ApiError(500, "InternalError")]))
    assert done is True
    assert kinds(calls) == ["Patch", "Delete", "Get"]


def test_refused_suspend_still_deletes_and_takes_the_uid_from_the_answer() -> None:
    def answer(call: Any) -> Any:
        if isinstance(call, Patch):
            return ApiError(403, "Forbidden")
        if isinstance(call, Delete):
            return {"metadata": {"name": "j", "uid": UID}}
        if isinstance(call, Get):
            return jobset("new-uid")
        return None

    done, calls = play(cancel.delete("ns", "j"), answer)
    assert done is True
    assert kinds(calls) == ["Patch", "Delete", "Get"]


@pytest.mark.parametrize("propagation", ["Foreground", "Orphan"])
def test_other_propagations(propagation: str) -> None:
    done, calls = play(cancel.delete("ns", "j", propagation), answers([jobset(UID)]))
    assert done is True
    assert calls[1].propagation == propagation
    # Foreground: the TrainJob outlives its JobSet. Orphan: the JobSet is left to run.
    assert kinds(calls) == ["Patch", "Delete"]


def test_a_job_already_gone_is_not_deleted() -> None:
    done, calls = play(cancel.delete("ns", "j"), lambda call: ApiError(404, "NotFound"))
    assert done is False
    assert kinds(calls) == ["Patch"]


def test_submit_gives_up_on_a_job_held_in_deletion_with_a_fix() -> None:
    built = build_trainjob(
        TrainJobSpec(trainer=CustomTrainer(train_linear)), namespace="ns", name="j"
    )
    held = {"metadata": {"name": "j", "deletionTimestamp": "2026-01-01T00:00:00Z"}}

    def answer(call: Any) -> Any:
        if isinstance(call, Create):
            return ApiError(409, "AlreadyExists")
        if isinstance(call, Get):
            return held
        return None

    with pytest.raises(SubmitError, match=r"still being deleted after 60 s.*Fix: delete it again"):
        play(submit.submit("ns", built), answer)
    assert submit.DELETION_WAIT_ROUNDS == 60
