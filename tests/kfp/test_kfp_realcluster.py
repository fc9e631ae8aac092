"""The KFP launcher component once on the real control plane (issue 23, item 5): a
``kfp.local`` task (a real subprocess) submits the job, the real JobSet and Trainer
controllers run it on kwok's nodes, and its outputs come back. A succeeded job whose
result cannot be read (kwok's nodes serve no log) fails the task with the reason and the
infrastructure exit code (75), never a silent ``null`` ``result_json`` (item 4)."""

# No `from __future__ import annotations`: KFP reads component annotations as objects.
import json
from pathlib import Path
from typing import Any

import pytest

from kf_trainer_core.spec import (
    MANAGED_BY_MULTIKUEUE,
    CustomTrainer,
    ManagedBy,
    QueueName,
    TrainJobSpec,
)
from kf_trainer_core.testing import kwok
from kf_trainer_core.testing.control_plane import ControlPlane
from kf_trainer_core.testing.control_plane.multikueue import MultiKueuePair
from kf_trainer_kfp import ComponentImage, trainjob_launcher

pytestmark = pytest.mark.control_plane

HERE = ComponentImage.current_environment()
FIT = "def fit():\n    return {'loss': 0.5}\n"
#: What the API server answers for a kwok node's log: the log was asked of the worker's
#: kubelet (the manager has no pod to ask; tests/realcluster/test_multikueue_real.py).
KUBELET_LOG = ":10250/containerLogs/"
#: How the launcher's log follower says why the log ended.
FOLLOWED = "[kf-trainer] Could not follow the log of"
#: How long the MultiKueue launcher waits before it gives up: long enough for its job
#: to reach the worker (a second or two), short enough to keep the test short.
MULTIKUEUE_WAIT_SECONDS = 8.0


@pytest.fixture
def real_backend(control_plane: ControlPlane, control_plane_kubeconfig: Path) -> dict[str, Any]:
    control_plane.require_controllers()
    return {"kubeconfig": str(control_plane_kubeconfig)}


def spec(*options: Any) -> TrainJobSpec:
    return TrainJobSpec(
        runtime="torch-distributed",
        trainer=CustomTrainer(FIT, num_nodes=2),
        options=list(options),
    )


def test_launcher_on_the_real_controllers(
    local_kfp: Path,
    real_backend: dict[str, Any],
    control_plane_namespace: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    launch = trainjob_launcher(backend_config=real_backend, component_image=HERE)
    task = launch(
        spec=spec(kwok.termination_message(json.dumps({"loss": 0.5}))),
        pipeline_run_id="run-1",
        pipeline_task_name="train",
    )
    assert task.outputs["status"] == "Complete"
    assert task.outputs["namespace"] == control_plane_namespace
    assert json.loads(task.outputs["result_json"]) == {"loss": 0.5}

    with pytest.raises(RuntimeError):
        launch(spec=spec(), pipeline_run_id="run-1", pipeline_task_name="log-less")
    out = capsys.readouterr().out
    assert "TrainJobResultUnreachableError" in out
    assert "succeeded, but its result cannot be read" in out
    assert "failure class: infrastructure; exiting with code 75" in out
    summaries = [p.read_text() for p in local_kfp.rglob("launch-trainjob/summary")]
    assert any("Result unavailable:" in text for text in summaries)


def mk_backend(multikueue: MultiKueuePair, namespace: str) -> dict[str, Any]:
    """The manager, with the worker by the component's backend configuration (its
    mapping)."""
    return {
        "kubeconfig": str(multikueue.manager.kubeconfig),
        "namespace": namespace,
        "multikueue_workers": {
            multikueue.cluster: {"kubeconfig": str(multikueue.worker.kubeconfig)}
        },
    }


def mk_spec(queue: str, pods: dict[str, str], nodes: int = 2) -> TrainJobSpec:
    """A MultiKueue job (its pods ask for cpu, a resource the queue covers)."""
    return TrainJobSpec(
        runtime="torch-distributed",
        trainer=CustomTrainer(FIT, num_nodes=nodes, resources_per_node={"cpu": "1"}),
        options=[QueueName(queue), ManagedBy(MANAGED_BY_MULTIKUEUE), kwok.node_annotations(pods)],
    )


def test_launcher_follows_a_multikueue_job_to_its_worker(
    local_kfp: Path,
    multikueue: MultiKueuePair,
    multikueue_namespace: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    backend = mk_backend(multikueue, multikueue_namespace)
    launch = trainjob_launcher(backend_config=backend, component_image=HERE)
    pods = {kwok.TERMINATION_MESSAGE: json.dumps({"loss": 0.5}), kwok.DURATION: "3s"}
    mk = mk_spec(multikueue.queue, pods)
    task = launch(spec=mk, pipeline_run_id="run-mk", pipeline_task_name="train-mk")
    assert task.outputs["status"] == "Complete"
    assert json.loads(task.outputs["result_json"]) == {"loss": 0.5}
    summaries = [p.read_text() for p in local_kfp.rglob("launch-trainjob/summary")]
    runs_on = f"- **Runs on:** `{multikueue.cluster} (MultiKueue worker)`"
    assert any(runs_on in s for s in summaries)
    # Its log was asked of the worker's kubelet (kwok serves none: the API server's
    # answer names it, in the launcher's output).
    said = capsys.readouterr().out.splitlines()
    assert any(FOLLOWED in line and KUBELET_LOG in line for line in said), said


def test_launcher_timeout_cancels_a_multikueue_job_on_both_clusters(
    local_kfp: Path,
    multikueue: MultiKueuePair,
    multikueue_namespace: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    ns = multikueue_namespace
    launch = trainjob_launcher(
        backend_config=mk_backend(multikueue, ns),
        component_image=HERE,
        timeout_seconds=MULTIKUEUE_WAIT_SECONDS,  # on_cancel="delete", the default
    )
    long_job = mk_spec(multikueue.queue, {kwok.DURATION: "300s"}, nodes=1)
    with multikueue.watching(ns) as seen:
        with pytest.raises(RuntimeError):
            launch(spec=long_job, pipeline_run_id="run-mk-cancel", pipeline_task_name="train")
        assert seen.on_worker.is_set(), seen  # it ran on the worker before the timeout
        # The launcher deleted the manager's job; MultiKueue removes the worker's copy.
        assert not any(n.startswith("trainjob/") for n in multikueue.manager_has(ns))
        assert multikueue.left_over(ns) == []
    assert not seen.manager_jobsets  # the manager never ran it
    out = capsys.readouterr().out
    assert "timed out: stopped " in out, out
