"""A pod the scheduler cannot place (found on the real control plane: a 9-GPU pod on
8-GPU nodes) is the job's trouble: a startup timeout names it and the scheduler's
message, instead of only "did not start"."""

from __future__ import annotations

from kf_trainer_core.cluster.status import failing_pod, failure_of
from kf_trainer_core.errors import FailureClass

MESSAGE = "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."
POD = {
    "metadata": {
        "name": "j-node-0-0-abcde",
        "labels": {
            "jobset.sigs.k8s.io/replicatedjob-name": "node",
            "jobset.sigs.k8s.io/job-index": "0",
            "batch.kubernetes.io/job-completion-index": "0",
            "trainer.kubeflow.org/trainjob-ancestor-step": "trainer",
        },
        "annotations": {"batch.kubernetes.io/job-completion-index": "0"},
    },
    "status": {
        "phase": "Pending",
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": MESSAGE,
            }
        ],
    },
}


def test_unschedulable_pod_is_the_failing_pod() -> None:
    found = failing_pod([POD])
    assert found is not None
    step, _, reason, code, message = found
    assert step == "node-0"
    assert (reason, code, message) == ("Unschedulable", None, MESSAGE)


def test_its_failure_is_capacity_with_the_scheduler_message() -> None:
    failure = failure_of({"metadata": {"name": "j"}, "status": {}}, [POD])
    assert failure.container_reason == "Unschedulable"
    assert MESSAGE in failure.message
    assert failure.failure_class is FailureClass.CAPACITY


def test_a_scheduled_pending_pod_is_not_trouble() -> None:
    pod = {
        **POD,
        "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}]},
    }
    assert failing_pod([pod]) is None


def _failed(name: str, created: str, code: int, reason: str = "Error") -> dict[str, object]:
    """A failed attempt of node-0's pod, as the Job controller leaves each one."""
    return {
        "metadata": {**POD["metadata"], "name": name, "creationTimestamp": created},
        "status": {
            "phase": "Failed",
            "containerStatuses": [
                {
                    "name": "node",
                    "state": {"terminated": {"exitCode": code, "reason": reason}},
                }
            ],
        },
    }


def test_a_retried_step_is_explained_by_its_newest_attempt() -> None:
    """The Job controller keeps every failed attempt of a step (the upstream runtimes
    retry six times). The explanation named the first pod in the API's order (by name):
    on the real control plane `jobs get` showed the newest pod in its step table and
    another attempt's pod in "failing step node-0 (pod ...)", whose log the tail was
    not read from either. The newest attempt is the one every other choice uses."""
    older = _failed("j-node-0-0-aaaaa", "2026-11-27T20:37:44Z", 137, "OOMKilled")
    newer = _failed("j-node-0-0-zzzzz", "2026-11-27T20:48:33Z", 3)
    for pods in ([older, newer], [newer, older]):
        found = failing_pod(pods)
        assert found is not None
        step, pod, reason, code, _ = found
        assert (step, pod["metadata"]["name"], reason, code) == (
            "node-0",
            "j-node-0-0-zzzzz",
            "Error",
            3,
        )
