"""What the client and the CLI show while the real controllers run a job: steps and
pod states, a pod that cannot be scheduled, pods that fail and are retried by the
upstream runtime's Jobs (backoffLimit 6: only what shows early is tested), an explicit
foreground delete. Where the test bed can show the same, the test runs on both servers."""

from __future__ import annotations

import json

import pytest
from conformance_support import GC_TIMEOUT, Cluster, until

from kf_trainer_core.client import TrainerClient
from kf_trainer_core.cluster.status import JobState
from kf_trainer_core.errors import FailureClass, TrainJobNotFoundError, TrainJobTimeoutError
from kf_trainer_core.spec import CustomTrainer, TrainJobSpec


def cli(capsys: pytest.CaptureFixture[str], cluster: Cluster, *args: str) -> tuple[int, str]:
    """``kf-trainer ARGS`` in this process, pointed at the cluster's namespace."""
    from kf_trainer_core.cli import main

    capsys.readouterr()
    code = main([*args, "--kubeconfig", str(cluster.kubeconfig)])
    out = capsys.readouterr()
    return code, out.out + out.err


def test_cli_get_and_list_show_a_running_job(
    client: TrainerClient, controllers: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    name = client.submit(controllers.spec("hold", nodes=2)).job.name
    client.wait_for_job_status(name, "Running", timeout=60)
    until(lambda: all(s.status == "Running" for s in client.get_job(name).steps), what="pods")
    code, out = cli(capsys, controllers, "jobs", "get", name, "-o", "json")
    assert code == 0, out
    job = json.loads(out)["job"]
    assert job["name"] == name
    assert job["status"] == "Running"
    assert job["num_nodes"] == 2
    assert [s["name"] for s in job["steps"]] == ["node-0", "node-1"]
    assert {s["status"] for s in job["steps"]} == {"Running"}
    code, out = cli(capsys, controllers, "jobs", "list", "-o", "json")
    assert code == 0, out
    assert [j["name"] for j in json.loads(out)] == [name]
    code, out = cli(capsys, controllers, "jobs", "get", name)
    assert code == 0, out
    assert name in out
    assert "Running" in out


def test_unschedulable_job_says_why_it_did_not_start(
    client: TrainerClient, controllers: Cluster
) -> None:
    # Nine GPUs on one node: every node (kwok's and the test bed's) has eight.
    spec = TrainJobSpec(
        trainer=CustomTrainer(
            controllers.spec().trainer.func, num_nodes=1, resources_per_node={"gpu": 9}
        )
    )
    name = client.submit(spec).job.name
    with pytest.raises(TrainJobTimeoutError, match="did not start within 3s") as info:
        client.wait(name, timeout=60, startup_timeout=3)
    failure = info.value.failure
    assert failure is not None
    assert failure.container_reason == "Unschedulable"
    assert "Insufficient nvidia.com/gpu" in failure.message
    assert info.value.failure_class is FailureClass.CAPACITY
    assert "0/4 nodes can give it 9 nvidia.com/gpu (each has fewer in all or fewer unused)" in str(
        info.value
    )
    job = client.get_job(name)
    assert job.status is JobState.CREATED
    (step,) = job.steps
    assert step.status == "Pending"
    assert step.device_count == "9"


@pytest.mark.parametrize(
    ("behaviour", "reason", "code"), [("fail", "Error", 3), ("oom", "OOMKilled", 137)]
)
def test_retried_failure_shows_while_the_job_retries(
    client: TrainerClient, real_cluster: Cluster, behaviour: str, reason: str, code: int
) -> None:
    # The upstream runtime leaves backoffLimit at 6: the Job controller retries for
    # ~10 minutes before the job is Failed. Early on, the failed attempt shows.
    name = client.submit(real_cluster.spec(behaviour)).job.name
    step = until(
        lambda: next((s for s in client.get_job(name).steps if s.container_reason == reason), None),
        what=f"a {reason} attempt",
    )
    assert step.exit_code == code
    assert client.get_job(name).status not in (JobState.FAILED, JobState.COMPLETE)
    with pytest.raises(TrainJobTimeoutError) as info:
        client.wait(name, timeout=2)
    assert f"exit code {code}" in str(info.value)
    pods = real_cluster.owned("pods")
    assert pods  # retried, not given up
    failure = client.explain_failure(name)
    assert failure.exit_code == code


def test_explicit_foreground_delete_holds_the_job_until_a_background_delete(
    client: TrainerClient, real_cluster: Cluster
) -> None:
    # Asked for explicitly, a foreground delete keeps the TrainJob (marked deleting)
    # while the collector removes its dependents; Trainer v2.3 re-applying the JobSet of
    # an unfinished job makes that last seconds to minutes. A (background) delete_job
    # of the job being held ends it: the server drops the foregroundDeletion finalizer.
    name = client.submit(real_cluster.spec("hold", nodes=2)).job.name
    client.wait_for_job_status(name, "Running", timeout=60)
    assert client.delete_job(name, propagation="Foreground") is True
    try:
        job = client.get_job(name)
    except TrainJobNotFoundError:
        job = None  # the collector won its first round
    if job is not None:
        assert job.deleting
        assert client.delete_job(name) is True
    with pytest.raises(TrainJobNotFoundError):
        client.get_job(name)
    until(lambda: not real_cluster.owned("jobsets"), timeout=GC_TIMEOUT, what="JobSet collected")
    until(lambda: not real_cluster.owned("pods"), timeout=GC_TIMEOUT, what="pods collected")


def test_termination_message_is_the_result(client: TrainerClient, real_cluster: Cluster) -> None:
    from conformance_support import pod_annotations

    result = {"loss": 0.5, "w": 3.0}
    msg = json.dumps(result, sort_keys=True, separators=(",", ":"))
    spec = real_cluster.spec("succeed", pod_annotations({"kwok.x-k8s.io/termination-message": msg}))
    name = client.submit(spec).job.name
    until(lambda: client.get_job(name).status is JobState.COMPLETE, what="Complete")
    out = client.get_job_outputs(name)
    assert out.status is JobState.COMPLETE
    assert out.result == result
