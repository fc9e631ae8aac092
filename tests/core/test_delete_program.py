"""The delete's steps, played against scripted answers (no server): read, the
right to delete asked for without deleting (dryRun), suspend, a background delete under
preconditions, then reads of the JobSet until the deleted job's is gone, bounded; a
refusal before or after the suspend; and a submit that meets a job held in deletion gives
up with a clear error. The same behaviour on real servers: tests/conformance/test_delete.py
and tests/conformance/test_state_matrix.py."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from scripted_api import Sleep, play
from train_functions import train_linear

from kf_trainer_core.cluster.kueue import QUEUE_NAME_LABEL
from kf_trainer_core.errors import (
    DeleteConflictError,
    DeleteRefusedError,
    FailureClass,
    SubmitError,
    failure_class_of,
)
from kf_trainer_core.k8s.calls import Create, Delete, Get, Patch
from kf_trainer_core.k8s.errors import ApiError
from kf_trainer_core.k8s.resources import JOBSETS, TRAINJOBS
from kf_trainer_core.manifest.builder import build_trainjob
from kf_trainer_core.programs import cancel, submit
from kf_trainer_core.spec import CustomTrainer, TrainJobSpec

UID = "old-uid"


def jobset(owner: str) -> dict[str, Any]:
    return {"metadata": {"name": "j", "ownerReferences": [{"uid": owner, "controller": True}]}}


def trainjob(version: str = "5", suspend: bool = False) -> dict[str, Any]:
    return {
        "metadata": {"name": "j", "uid": UID, "resourceVersion": version},
        "spec": {"suspend": suspend},
    }


def answers(jobsets: list[Any]) -> Callable[[Any], Any]:
    """The job ``j`` (uid UID) is read, patched and deleted; JobSet reads answer
    ``jobsets`` in turn (the last one for ever); pauses pass."""
    reads = iter(jobsets)
    last: list[Any] = [None]

    def answer(call: Any) -> Any:
        if isinstance(call, Get) and call.resource == TRAINJOBS:
            return trainjob()
        if isinstance(call, Patch):
            return trainjob("6", suspend=True)
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
        lambda api: cancel.delete(api, "ns", "j"),
        answers([jobset(UID), jobset(UID), ApiError(404, "NotFound")]),
    )
    assert done is True
    # Read, asked (dry run), suspended, deleted; the 404 is confirmed by one more read
    # a moment later.
    assert kinds(calls) == [
        "Get", "Delete", "Patch", "Delete", "Get", "Sleep", "Get", "Sleep", "Get", "Sleep", "Get"
    ]  # fmt: skip
    asked, patch, delete = calls[1:4]
    assert asked.dry_run
    assert (asked.uid, asked.resource_version) == (UID, "5")
    assert asked.options()["dryRun"] == ["All"]  # in the body: the server ignores the query
    # Suspended first, only if the job is still the version read.
    assert patch.body == {"metadata": {"resourceVersion": "5"}, "spec": {"suspend": True}}
    assert delete.resource == TRAINJOBS
    assert delete.propagation == "Background"
    assert not delete.dry_run
    assert (delete.uid, delete.resource_version) == (UID, "6")  # the suspended version
    sleeps = [c.seconds for c in calls if isinstance(c, Sleep)]
    assert sleeps == [0.05, 0.1, cancel.CONFIRM_SECONDS]


def test_a_jobset_applied_again_after_the_first_404_is_waited_for() -> None:
    """A reconcile of the Trainer under way when the job went may apply its JobSet once
    more, just after the collector removed it: the second look sees it, and the wait
    goes on until two reads in a row find none."""
    gone = ApiError(404, "NotFound")
    done, calls = play(
        lambda api: cancel.delete(api, "ns", "j"), answers([gone, jobset(UID), gone, gone])
    )
    assert done is True
    reads = [c for c in calls if isinstance(c, Get) and c.resource == JOBSETS]
    assert len(reads) == 4


def test_a_jobset_owned_by_another_job_ends_the_wait() -> None:
    done, calls = play(lambda api: cancel.delete(api, "ns", "j"), answers([jobset("new-uid")]))
    assert done is True
    assert kinds(calls) == ["Get", "Delete", "Patch", "Delete", "Get"]


def test_the_wait_is_bounded() -> None:
    done, calls = play(lambda api: cancel.delete(api, "ns", "j"), answers([jobset(UID)]))
    assert done is True
    slept = sum(c.seconds for c in calls if isinstance(c, Sleep))
    assert cancel.COLLECT_WAIT_SECONDS <= slept <= cancel.COLLECT_WAIT_SECONDS + 0.5
    assert max(c.seconds for c in calls if isinstance(c, Sleep)) == 0.5


@pytest.mark.parametrize("code", [401, 403])
def test_without_read_access_to_jobsets_it_pauses_once(code: int) -> None:
    done, calls = play(
        lambda api: cancel.delete(api, "ns", "j"), answers([ApiError(code, "Forbidden")])
    )
    assert done is True
    assert kinds(calls) == ["Get", "Delete", "Patch", "Delete", "Get", "Sleep"]
    assert calls[-1].seconds == cancel.UNREADABLE_PAUSE_SECONDS


def test_another_failure_of_the_read_does_not_fail_the_delete() -> None:
    done, calls = play(
        lambda api: cancel.delete(api, "ns", "j"), answers([ApiError(500, "InternalError")])
    )
    assert done is True
    assert kinds(calls) == ["Get", "Delete", "Patch", "Delete", "Get"]


def test_refused_suspend_still_deletes_the_version_read() -> None:
    def answer(call: Any) -> Any:
        if isinstance(call, Get):
            return trainjob() if call.resource == TRAINJOBS else jobset("new-uid")
        if isinstance(call, Patch):
            return ApiError(403, "Forbidden")
        return {"kind": "Status", "status": "Success"}

    done, calls = play(lambda api: cancel.delete(api, "ns", "j"), answer)
    assert done is True
    assert kinds(calls) == ["Get", "Delete", "Patch", "Delete", "Get"]
    assert (calls[3].uid, calls[3].resource_version) == (UID, "5")


def test_a_job_already_suspended_is_not_patched() -> None:
    def answer(call: Any) -> Any:
        if isinstance(call, Get):
            return trainjob(suspend=True) if call.resource == TRAINJOBS else jobset("new-uid")
        return {"kind": "Status", "status": "Success"}

    done, calls = play(lambda api: cancel.delete(api, "ns", "j"), answer)
    assert done is True
    assert kinds(calls) == ["Get", "Delete", "Delete", "Get"]


def test_a_refused_delete_changes_nothing_and_says_so() -> None:
    """No delete right: the dry run is refused before anything was changed (a patch
    right alone used to leave the job suspended, with nothing saying so)."""

    def answer(call: Any) -> Any:
        if isinstance(call, Get):
            return trainjob()
        if isinstance(call, Delete):
            return ApiError(403, "Forbidden", 'User "u" cannot delete resource "trainjobs"')
        raise AssertionError(f"nothing may be changed: {call}")

    with pytest.raises(DeleteRefusedError, match="nothing was changed") as refused:
        play(lambda api: cancel.delete(api, "ns", "j"), answer)
    assert "Fix: grant the 'delete' verb on trainjobs" in str(refused.value)
    assert refused.value.restored


def test_a_delete_refused_after_the_suspend_resumes_the_job_again() -> None:
    """The dry run passed but the delete itself was refused (a policy that changed in
    between): the suspend it made is undone, on that job only, and the error says so."""
    state = {"suspend": False, "version": 5}
    calls_seen: list[Any] = []

    def answer(call: Any) -> Any:
        calls_seen.append(call)
        if isinstance(call, Get):
            return trainjob(str(state["version"]), suspend=bool(state["suspend"]))
        if isinstance(call, Patch):
            state["suspend"] = call.body["spec"]["suspend"]
            state["version"] = int(state["version"]) + 1
            return trainjob(str(state["version"]), suspend=bool(state["suspend"]))
        if isinstance(call, Delete):
            return None if call.dry_run else ApiError(403, "Forbidden", "denied by a policy")
        raise AssertionError(call)

    def answer_or_value(call: Any) -> Any:
        out = answer(call)
        return {"kind": "Status"} if out is None else out

    with pytest.raises(DeleteRefusedError, match="suspended for the delete and was resumed"):
        play(lambda api: cancel.delete(api, "ns", "j"), answer_or_value)
    assert state["suspend"] is False
    undo = [c for c in calls_seen if isinstance(c, Patch)][-1]
    assert undo.body == {"metadata": {"resourceVersion": "6"}, "spec": {"suspend": False}}


def test_a_conflict_reads_the_job_again() -> None:
    versions = iter(["5", "7"])
    patches: list[Any] = []

    def answer(call: Any) -> Any:
        if isinstance(call, Get):
            return trainjob(next(versions)) if call.resource == TRAINJOBS else jobset("x")
        if isinstance(call, Patch):
            patches.append(call)
            if call.body["metadata"]["resourceVersion"] == "5":
                return ApiError(409, "Conflict")
            return trainjob("8", suspend=True)
        return {"kind": "Status"}

    done, _ = play(lambda api: cancel.delete(api, "ns", "j"), answer)
    assert done is True
    assert [p.body["metadata"]["resourceVersion"] for p in patches] == ["5", "7"]


@pytest.mark.parametrize("propagation", ["Foreground", "Orphan"])
def test_other_propagations(propagation: str) -> None:
    done, calls = play(
        lambda api: cancel.delete(api, "ns", "j", propagation), answers([jobset(UID)])
    )
    assert done is True
    assert calls[3].propagation == propagation
    # Foreground: the TrainJob outlives its JobSet. Orphan: the JobSet is left to run.
    assert kinds(calls) == ["Get", "Delete", "Patch", "Delete"]


def test_a_job_already_gone_is_not_deleted() -> None:
    done, calls = play(
        lambda api: cancel.delete(api, "ns", "j"), lambda call: ApiError(404, "NotFound")
    )
    assert done is False
    assert kinds(calls) == ["Get"]


def test_a_suspend_another_controller_undoes_is_not_fought() -> None:
    """Kueue unsuspends an admitted job it holds at once (measured: within 0.13 s). A
    delete that lost its round to that write must not suspend again (the next round
    would lose the same way, eight times, and the job ran on): it deletes the version
    it reads, unsuspended."""
    state = {"version": 5, "suspend": False}

    def answer(call: Any) -> Any:
        if isinstance(call, Get):
            if call.resource == JOBSETS:
                return ApiError(404, "NotFound")
            return trainjob(str(state["version"]), suspend=bool(state["suspend"]))
        if isinstance(call, Patch):
            state["version"] += 1
            suspended = trainjob(str(state["version"]), suspend=True)
            state["version"] += 1  # the other controller, before the delete arrives
            return suspended
        real_delete = isinstance(call, Delete) and not call.dry_run
        if real_delete and call.resource_version != str(state["version"]):
            return ApiError(409, "Conflict")
        return {"kind": "Status", "status": "Success"}

    done, calls = play(lambda api: cancel.delete(api, "ns", "j"), answer)
    assert done is True
    deletes = [c for c in calls if isinstance(c, Delete) and not c.dry_run]
    assert [c.resource_version for c in deletes] == ["6", "7"]
    assert len([c for c in calls if isinstance(c, Patch)]) == 1


def labelled(finished: bool) -> dict[str, Any]:
    job = trainjob()
    job["metadata"]["labels"] = {QUEUE_NAME_LABEL: "team-a"}
    if finished:
        job["status"] = {"conditions": [{"type": "Failed", "status": "True"}]}
    return job


@pytest.mark.parametrize("finished", [False, True])
def test_an_unfinished_job_kueue_holds_is_deleted_without_a_suspend(finished: bool) -> None:
    """Kueue would undo the suspend of an admitted job (a queued one is suspended
    already); a finished one Kueue leaves alone, and the Trainer would rebuild it."""

    def answer(call: Any) -> Any:
        if isinstance(call, Get):
            return labelled(finished) if call.resource == TRAINJOBS else jobset("new-uid")
        if isinstance(call, Patch):
            return trainjob("6", suspend=True)
        return {"kind": "Status", "status": "Success"}

    done, calls = play(lambda api: cancel.delete(api, "ns", "j"), answer)
    assert done is True
    if finished:
        assert kinds(calls) == ["Get", "Delete", "Patch", "Delete", "Get"]
    else:
        assert kinds(calls) == ["Get", "Delete", "Delete", "Get"]


def test_a_job_that_changes_under_every_round_is_not_reported_gone() -> None:
    """A delete that lost all its rounds did nothing: ``False`` ("already gone") would
    leave the caller believing the job was gone while it runs on."""
    versions = iter(range(5, 1000))

    def answer(call: Any) -> Any:
        if isinstance(call, Get):
            return trainjob(str(next(versions)), suspend=True)
        if isinstance(call, Delete) and not call.dry_run:
            return ApiError(409, "Conflict")
        return {"kind": "Status", "status": "Success"}

    with pytest.raises(DeleteConflictError, match=r"ns/j was not deleted.*8 times.*Fix: try"):
        play(lambda api: cancel.delete(api, "ns", "j"), answer)
    with pytest.raises(DeleteConflictError):
        play(lambda api: cancel.cancel(api, "ns", "j", "delete"), answer)
    assert failure_class_of(DeleteConflictError("x")) is FailureClass.INFRASTRUCTURE


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
        play(lambda api: submit.submit(api, "ns", built), answer)
    assert submit.DELETION_WAIT_ROUNDS == 60
