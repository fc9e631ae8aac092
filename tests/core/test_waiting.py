"""What holds an unfinished job up, read from its pods (``cluster/stuck.py``) and said
once (``cluster/waiting.py``): attempts counted per Job incarnation, the scheduler's
reason said once, one fix per failure class, and the timeout error built from them
(pickled across processes, and settled by a task that stopped the job)."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from kf_trainer_core.cluster.stuck import (
    backoff_limits,
    restarting_steps,
    scheduler_reason,
    waiting_of,
)
from kf_trainer_core.cluster.waiting import Waiting, fix_for, plain_hint, timeout_lines
from kf_trainer_core.errors import (
    FailureClass,
    TrainJobAdmissionTimeoutError,
    TrainJobTimeoutError,
)

RUNNING_JOB = {
    "metadata": {"name": "j", "namespace": "ns", "uid": "u1"},
    "status": {"jobsStatus": [{"name": "node", "ready": 1}]},
}
CREATED_JOB = {"metadata": {"name": "j", "namespace": "ns", "uid": "u1"}, "status": {}}


def pod(
    name: str,
    phase: str,
    *,
    code: int | None = None,
    created: str = "2026-01-01T00:00:00Z",
    job_uid: str = "job-1",
    restart: int = 0,
    index: int = 0,
    gpus: str | None = None,
    conditions: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    state: dict[str, Any] = {}
    if code is not None:
        state = {"terminated": {"exitCode": code, "reason": "Error" if code else "Completed"}}
    resources = {"limits": {"nvidia.com/gpu": gpus}} if gpus else {}
    return {
        "metadata": {
            "name": name,
            "creationTimestamp": created,
            "labels": {
                "jobset.sigs.k8s.io/replicatedjob-name": "node",
                "jobset.sigs.k8s.io/job-index": "0",
                "batch.kubernetes.io/job-completion-index": str(index),
                "batch.kubernetes.io/controller-uid": job_uid,
                "jobset.sigs.k8s.io/restart-attempt": str(restart),
            },
        },
        "spec": {"containers": [{"name": "node", "resources": resources}]},
        "status": {
            "phase": phase,
            "containerStatuses": [{"name": "node", "state": state}] if state else [],
            "conditions": conditions or [],
        },
    }


def failures(count: int, **kw: Any) -> list[dict[str, Any]]:
    return [
        pod(f"p{i}", "Failed", code=3, created=f"2026-01-01T00:00:{i:02d}Z", **kw)
        for i in range(count)
    ]


def test_backoff_limits_read_the_jobset_template_or_the_job_default() -> None:
    jobset = {
        "spec": {
            "replicatedJobs": [
                {"name": "node", "template": {"spec": {}}},
                {"name": "launcher", "template": {"spec": {"backoffLimit": 0}}},
            ]
        }
    }
    assert backoff_limits(jobset) == {"node": 6, "launcher": 0}
    assert backoff_limits(None) == {}


def test_a_retried_step_counts_its_attempts() -> None:
    pods = [*failures(2), pod("p9", "Running", created="2026-01-01T00:00:30Z")]
    found = waiting_of(RUNNING_JOB, pods, limits={"node": 6})
    assert found is not None
    assert found.state == "Restarting"
    assert found.reason == "step node-0 is failing and being retried (attempt 3 of 7, exit code 3)"
    assert (found.attempt, found.attempts, found.exit_code) == (3, 7, 3)
    assert found.failure_class is FailureClass.USER_CODE
    # Without the JobSet's limits the count has no total.
    bare = waiting_of(CREATED_JOB, pods)
    assert bare is not None
    assert bare.reason == "step node-0 is failing and being retried (attempt 3, exit code 3)"


def test_a_step_that_used_every_attempt_is_failing() -> None:
    found = waiting_of(CREATED_JOB, failures(7), limits={"node": 6})
    assert found is not None
    assert found.reason == "step node-0 failed all 7 attempts (exit code 3); the job is failing"


def test_an_older_jobset_restart_and_a_step_that_succeeded_since_do_not_count() -> None:
    # The JobSet restarted (attempt 1): the failures of restart 0 are another incarnation.
    old = failures(3, job_uid="old", restart=0)
    assert restarting_steps([*old, pod("new", "Running", job_uid="new", restart=1)]) == []
    # Index 0 failed once, then succeeded: nothing restarts any more.
    done = [*failures(1), pod("ok", "Succeeded", code=0, created="2026-01-01T00:01:00Z")]
    assert restarting_steps(done) == []
    assert waiting_of(RUNNING_JOB, done) is None


def test_finished_and_suspended_jobs_are_not_held_up() -> None:
    for cond in ("Complete", "Failed", "Suspended"):
        obj = {**CREATED_JOB, "status": {"conditions": [{"type": cond, "status": "True"}]}}
        assert waiting_of(obj, failures(2)) is None


def unschedulable(message: str) -> list[dict[str, Any]]:
    cond = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
    return [pod("big", "Pending", gpus="16", conditions=[{**cond, "message": message}])]


@pytest.mark.parametrize(
    "message",
    [
        # Kubernetes 1.36's scheduler (the real control plane), and the test bed's.
        "0/4 nodes are available: 4 Insufficient nvidia.com/gpu. no new claims to "
        "deallocate, preemption: 0/4 nodes are available: 4 Preemption is not helpful "
        "for scheduling.",
        "0/4 nodes are available: 4 Insufficient nvidia.com/gpu. preemption: 0/4 nodes are "
        "available: 4 No preemption victims found for incoming pod.",
    ],
)
def test_the_schedulers_reason_is_said_once_with_what_the_pod_asks(message: str) -> None:
    found = waiting_of(CREATED_JOB, unschedulable(message))
    assert found is not None
    assert found.line() == (
        "Pending: step node-0 cannot be scheduled: 0/4 nodes can give it 16 nvidia.com/gpu (each has fewer in all or fewer unused)"
    )
    assert found.failure_class is FailureClass.CAPACITY


def test_a_mixed_scheduler_reason_is_kept_as_its_first_sentence() -> None:
    message = (
        "0/4 nodes are available: 1 node(s) had untolerated taint {gpu: bad}, 3 Insufficient "
        "nvidia.com/gpu. preemption: 0/4 nodes are available: 4 No preemption victims."
    )
    assert scheduler_reason(message, unschedulable(message)[0]) == (
        "0/4 nodes are available: 1 node(s) had untolerated taint {gpu: bad}, 3 Insufficient "
        "nvidia.com/gpu"
    )


def test_a_running_job_is_not_pending_for_a_pending_pod() -> None:
    message = "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."
    assert waiting_of(RUNNING_JOB, unschedulable(message)) is None


def test_one_fix_per_class_with_commands_that_reach_the_job() -> None:
    hint = plain_hint("team-a")
    fixes = {k: fix_for(k, "j", hint, "node-1") for k in FailureClass}
    assert len(set(fixes.values())) == len(FailureClass)
    assert "kf-trainer -n team-a jobs logs j --step node-1" in fixes[FailureClass.USER_CODE]
    assert "kf-trainer -n team-a jobs wait j" in fixes[FailureClass.INFRASTRUCTURE]
    assert fix_for(None, "j", hint) == fixes[FailureClass.UNKNOWN]
    for klass in (FailureClass.USER_CODE, FailureClass.CAPACITY, FailureClass.CONFIGURATION):
        assert "wait longer" not in fixes[klass]


def restarting_waiting() -> Waiting:
    return Waiting(
        state="Restarting",
        reason="step node-0 is failing and being retried (attempt 2 of 7, exit code 3)",
        step="node-0",
        failure_class=FailureClass.USER_CODE,
        classified_by="the training program exited with code 3",
    )


def test_a_timeout_says_what_holds_the_job_up_its_fix_and_what_is_left() -> None:
    waiting = restarting_waiting()
    lines, fix = timeout_lines(
        "TrainJob ns/j did not reach Complete within 30s",
        waiting,
        namespace="ns",
        name="j",
        state="Restarting",
        hint=plain_hint("ns"),
    )
    assert lines == [
        "TrainJob ns/j did not reach Complete within 30s; it is Restarting: step node-0 is "
        "failing and being retried (attempt 2 of 7, exit code 3)",
        "failure class: user-code — the training program exited with code 3",
        f"fix: {fix}",
        "left behind: TrainJob ns/j still exists (Restarting); delete it with: "
        "kf-trainer -n ns jobs delete j (Python: client.delete_job('j'))",
    ]
    err = TrainJobTimeoutError(lines[0], None, None, lines=lines, waiting=waiting, fix=fix)
    assert str(err) == "\n".join(lines)
    assert err.failure_class is FailureClass.USER_CODE
    again = pickle.loads(pickle.dumps(err))
    assert type(again) is TrainJobTimeoutError
    assert str(again) == str(err)
    assert again.waiting == waiting
    assert again.fix == fix
    # A task that then deleted the job says so instead of "left behind".
    settled = err.settled("cleaned up: TrainJob j deleted by the task")
    assert type(settled) is TrainJobTimeoutError
    assert str(settled).splitlines()[:3] == lines[:3]
    assert str(settled).splitlines()[3] == "cleaned up: TrainJob j deleted by the task"
    assert settled.waiting == waiting
    # Subclasses keep what they carry.
    queued = TrainJobAdmissionTimeoutError(
        lines[0], None, None, None, lines=lines, waiting=waiting, fix=fix
    )
    assert type(pickle.loads(pickle.dumps(queued))) is TrainJobAdmissionTimeoutError
    assert type(queued.settled("cleaned up")) is TrainJobAdmissionTimeoutError


def test_a_job_nothing_holds_up_is_told_to_wait_longer() -> None:
    lines, fix = timeout_lines(
        "TrainJob ns/j did not reach Complete within 3s (it is Running)",
        None,
        namespace="ns",
        name="j",
        state="Running",
        hint=plain_hint("ns"),
    )
    assert fix.startswith("wait longer (kf-trainer -n ns jobs wait j)")
    assert lines[-1].startswith("left behind: TrainJob ns/j still exists (Running)")


def test_what_several_containers_ask_is_summed_only_from_ascii_digits() -> None:
    """A pod's containers' asks are summed only when each is a whole number by the rule
    for cluster data: a superscript two passes ``str.isdigit`` and made ``int()`` raise
    (the reader must never raise on what a cluster holds)."""
    message = "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."

    def asking(*values: str) -> dict[str, Any]:
        found = unschedulable(message)[0]
        found["spec"]["containers"] = [
            {"name": f"c{i}", "resources": {"requests": {"nvidia.com/gpu": v}}}
            for i, v in enumerate(values)
        ]
        return found

    assert "can give it 3 nvidia.com/gpu" in scheduler_reason(message, asking("1", "2"))
    shown = scheduler_reason(message, asking("1", "\u00b2"))
    assert shown == "0/4 nodes are available: 4 Insufficient nvidia.com/gpu"
