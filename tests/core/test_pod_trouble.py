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
