"""The classification rules, case by case (pure: the HTTP tests produce each class from
a scenario; these pin the evidence the cluster gives in the cases no scenario makes)."""

from __future__ import annotations

from typing import Any

import pytest

from kf_trainer_core.cluster.failures import classify
from kf_trainer_core.cluster.kueue import queue_status
from kf_trainer_core.errors import FailureClass


def pod(pod_reason: str | None = None, **cond: Any) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": "Failed"}
    if pod_reason:
        status["reason"] = pod_reason
        status["message"] = f"pod {pod_reason.lower()}"
    if cond:
        status["conditions"] = [cond]
    return {"metadata": {"name": "job-node-0-0"}, "status": status}


@pytest.mark.parametrize(
    ("kwargs", "klass", "evidence"),
    [
        ({"container_reason": "ImagePullBackOff", "message": "rpc error: i/o timeout"},
         FailureClass.INFRASTRUCTURE, "pulling the image failed"),
        ({"container_reason": "ErrImagePull", "message": "429 Too Many Requests"},
         FailureClass.INFRASTRUCTURE, "pulling the image failed"),
        ({"container_reason": "ErrImagePull", "message": "pull access denied for x"},
         FailureClass.CONFIGURATION, "cannot be pulled"),
        ({"container_reason": "CreateContainerConfigError", "message": 'secret "s" not found'},
         FailureClass.CONFIGURATION, "CreateContainerConfigError"),
        ({"exit_code": 137, "pods": [pod("NodeLost")]},
         FailureClass.INFRASTRUCTURE, "NodeLost"),
        ({"exit_code": 137, "pods": [pod(type="DisruptionTarget", status="True",
                                         reason="PreemptionByScheduler", message="preempted")]},
         FailureClass.INFRASTRUCTURE, "PreemptionByScheduler"),
        ({"exit_code": 143}, FailureClass.INFRASTRUCTURE, "killed (exit code 143)"),
        ({"pods": [pod(type="PodScheduled", status="False", reason="Unschedulable",
                       message="0/3 nodes are available: 3 Insufficient nvidia.com/gpu.")]},
         FailureClass.CAPACITY, "Insufficient nvidia.com/gpu"),
        ({"evictions": [("PodsReadyTimeout", "Exceeded the PodsReady timeout")]},
         FailureClass.INFRASTRUCTURE, "evicted by Kueue"),
        ({"container_reason": "CrashLoopBackOff"}, FailureClass.USER_CODE, "keeps crashing"),
        ({"exit_code": 2, "log_tail": ["Traceback (most recent call last):",
                                       '  File "t.py", line 1, in <module>',
                                       "KeyError: 'lr'"]},
         FailureClass.USER_CODE, "raised KeyError: 'lr'"),
        ({}, FailureClass.UNKNOWN, ""),
    ],
)  # fmt: skip
def test_rules(kwargs: dict[str, Any], klass: FailureClass, evidence: str) -> None:
    found, why = classify(**kwargs)
    assert found is klass
    assert evidence in why


def test_out_of_memory_wins_over_a_traceback() -> None:
    found, _ = classify(
        container_reason="OOMKilled", exit_code=137, log_tail=["Traceback (most recent call last):"]
    )
    assert found is FailureClass.CAPACITY


def test_queue_status_of_a_workload_waiting_for_admission_checks() -> None:
    workload = {
        "metadata": {"name": "trainjob-x-1a2b3", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"queueName": "team-a", "priority": 5},
        "status": {
            "admission": {"clusterQueue": "gpus"},
            "conditions": [
                {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved",
                 "message": "Quota reserved in ClusterQueue gpus",
                 "lastTransitionTime": "2026-01-01T00:01:00Z"},
                {"type": "Admitted", "status": "False", "reason": "AdmissionChecksPending",
                 "message": "Waiting for admission checks: provisioning",
                 "lastTransitionTime": "2026-01-01T00:01:00Z"},
            ],
        },
    }  # fmt: skip
    from datetime import datetime, timezone

    at = datetime(2026, 1, 1, 0, 3, tzinfo=timezone.utc)
    status = queue_status("team-a", workload, at=at)
    assert status.waiting
    assert status.quota_reserved
    assert status.cluster_queue == "gpus"
    assert status.pending_reason == "AdmissionChecksPending"
    assert status.queued_seconds == 180
    assert status.priority == 5
    assert "Waiting for admission checks" in status.line()


def test_a_running_job_kueue_does_not_manage_reports_no_queue() -> None:
    from scripted_api import play

    from kf_trainer_core.cluster.kueue import QUEUE_NAME_LABEL, KueueProbe, lookup
    from kf_trainer_core.k8s.calls import ListObjects

    def run(suspended: bool) -> object:
        obj = {
            "metadata": {"name": "x", "uid": "u1", "labels": {QUEUE_NAME_LABEL: "team-a"}},
            "spec": {"suspend": suspended},
        }
        found, calls = play(
            lambda api: lookup(api, "default", obj, KueueProbe()), lambda call: {"items": []}
        )
        (call,) = calls  # the lookup asks for nothing more
        assert isinstance(call, ListObjects)
        assert call.label_selector == "kueue.x-k8s.io/job-uid=u1"
        return found

    assert run(suspended=False) is None  # labelled, running, no Workload: not Kueue's
    waiting = run(suspended=True)  # held: Kueue has yet to create the Workload
    assert waiting is not None
    assert "waiting for Kueue to create the job's Workload" in waiting.line()  # type: ignore[attr-defined]


def test_describe_says_a_raised_error_once() -> None:
    from kf_trainer_core.cluster.status import Failure

    raised = "ValueError: loss diverged at lr=10.0"
    quoted = Failure(
        reason="FailedJobs",
        message=f"jobset failed ({raised})",
        failure_class=FailureClass.USER_CODE,
        classified_by=f"the training code raised {raised}",
    )
    assert quoted.describe().count(raised) == 1
    assert "the training code raised the error above" in quoted.describe()
    # Where the reason does not quote it, the class line is the one place it is said.
    bare = quoted.model_copy(update={"message": "jobset failed"})
    assert bare.describe().count(raised) == 1


def _refusal(job: str, message: str) -> Any:
    from kf_trainer_core.cluster.status import Event

    return Event(
        involved_object_kind="Job",
        involved_object_name=job,
        reason="FailedCreate",
        message=message,
        type="Warning",
    )


QUOTA = 'Error creating: pods "t-node-0-x" is forbidden: exceeded quota: gpus, requested: ...'
NO_ACCOUNT = 'Error creating: pods "t-node-0-x" is forbidden: serviceaccount "sa" not found'


@pytest.mark.parametrize(
    ("message", "klass"),
    [(QUOTA, FailureClass.CAPACITY), (NO_ACCOUNT, FailureClass.CONFIGURATION)],
)
def test_refused_pods_name_the_step_and_the_class(message: str, klass: FailureClass) -> None:
    from kf_trainer_core.cluster.events import refused_pods

    failure = refused_pods([_refusal("t-node-0", message)], [], "t")
    assert failure is not None
    assert (failure.reason, failure.step, failure.failure_class) == ("FailedCreate", "node", klass)
    assert failure.message == message


def test_a_refusal_of_a_job_that_has_its_pod_now_or_of_another_job_says_nothing() -> None:
    from kf_trainer_core.cluster.events import refused_pods

    running = {
        "metadata": {
            "labels": {
                "jobset.sigs.k8s.io/replicatedjob-name": "node",
                "jobset.sigs.k8s.io/job-index": "0",
            }
        }
    }
    assert refused_pods([_refusal("t-node-0", QUOTA)], [running], "t") is None
    assert refused_pods([_refusal("other-node-0", QUOTA)], [], "t") is None


def test_a_refusal_for_another_job_whose_name_starts_alike_is_not_ours() -> None:
    from kf_trainer_core.cluster.events import refused_pods

    assert refused_pods([_refusal("t-2-node-0", QUOTA)], [], "t") is None
    assert refused_pods([_refusal("t-2-node-0", QUOTA)], [], "t-2") is not None
