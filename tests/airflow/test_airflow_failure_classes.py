"""Failure classes in real Airflow (``dag.test()`` against the test server): a
``retry_policy`` decides from the TrainJob's failure class, configuration errors fail
fast, and a job Kueue does not admit says why in the task log."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from dagtest import run_dag

from kf_trainer_core.cluster.kueue import QUEUE_NAME_LABEL
from kf_trainer_core.spec import Annotations, CustomTrainer, Labels, TrainJobSpec
from kf_trainer_core.testing.scenarios import SCENARIO_ANNOTATION
from kf_trainer_core.testing.server import KubeTestServer

pytestmark = pytest.mark.usefixtures("airflow_db", "kf_conn")


def _fit() -> None:
    return None


def jobs(kube: KubeTestServer) -> list[dict[str, Any]]:
    from kf_trainer_core.k8s.resources import TRAINJOBS

    items, _ = kube.store.list(TRAINJOBS, "default")
    return sorted(items, key=lambda j: j["metadata"]["creationTimestamp"] + j["metadata"]["name"])


def states(kube: KubeTestServer) -> list[str]:
    out = []
    for job in jobs(kube):
        conds = {c["type"]: c["status"] for c in job.get("status", {}).get("conditions", [])}
        out.append(
            "Failed"
            if conds.get("Failed") == "True"
            else "Complete"
            if conds.get("Complete") == "True"
            else "Other"
        )
    return out


@pytest.mark.parametrize("dag_id", ["kf_policy_retries_infra", "kf_exception_policy_deferred"])
def test_policy_retries_an_infrastructure_failure(
    kube: KubeTestServer, dag_id: str, capfd: pytest.CaptureFixture[str]
) -> None:
    run = run_dag(dag_id)
    assert run.state == "success"
    assert run.try_number("train") == 2
    # The retry is the next attempt: the evicted job kept, one new job that ran.
    assert sorted(states(kube)) == ["Complete", "Failed"]
    text = capfd.readouterr().out
    assert "failure class: infrastructure" in text
    assert "Evicted" in text


def test_policy_fails_user_code_without_retry(
    kube: KubeTestServer, capfd: pytest.CaptureFixture[str]
) -> None:
    run = run_dag("kf_policy_fails_user_code")
    assert run.state == "failed"
    assert run.try_number("train") == 1  # retries were left; the policy said no
    assert states(kube) == ["Failed"]
    text = capfd.readouterr().out
    assert "failure class: user-code" in text
    assert "RuntimeError: simulated training failure" in text


def test_configuration_failure_fails_fast(kube: KubeTestServer) -> None:
    run = run_dag("kf_config_fails_fast")
    assert run.state == "failed"
    assert run.try_number("train") == 1  # AirflowFailException: no retry
    assert len(jobs(kube)) == 1


def test_fail_fast_can_be_switched_off(kube: KubeTestServer) -> None:
    run = run_dag("kf_config_retried")
    assert run.state == "failed"
    assert run.try_number("train") == 3  # every retry spent


@pytest.mark.parametrize(
    ("dag_id", "tries"), [("kf_config_refused", 1), ("kf_config_refused_retried", 3)]
)
def test_a_configuration_error_before_the_job_exists_fails_fast(
    kube: KubeTestServer, dag_id: str, tries: int, capfd: pytest.CaptureFixture[str]
) -> None:
    """A runtime the cluster lacks is a configuration failure (``failure_class_of``):
    ``fail_fast_on`` fails the task without spending its retries on it, as for a job
    that cannot run — the submit's error was raised as it was, and every retry spent."""
    run = run_dag(dag_id)
    assert run.state == "failed"
    assert run.try_number("train") == tries
    assert jobs(kube) == []
    text = capfd.readouterr().out
    assert "no-such-runtime" in text
    assert ("failure class: configuration" in text) is (tries == 1)


def queue_with_four_gpus(kube: KubeTestServer) -> None:
    sim = kube.install_kueue()
    sim.add_cluster_queue("gpus", {"nvidia.com/gpu": 4})
    sim.add_local_queue("default", "team-a", "gpus")


@pytest.mark.parametrize("dag_id", ["kf_not_admitted", "kf_not_admitted_deferred"])
def test_not_admitted_by_kueue(
    kube: KubeTestServer, dag_id: str, kf_conn: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    queue_with_four_gpus(kube)
    # A job holds the queue's 4 GPUs: the DAG's job waits for quota that frees later.
    from kf_trainer_core.client import TrainerClient
    from kf_trainer_core.config import KubernetesConfig

    with TrainerClient(KubernetesConfig(kubeconfig=str(kf_conn))) as client:
        blocker = client.submit(
            TrainJobSpec(
                trainer=CustomTrainer(_fit, resources_per_node={"gpu": 4}),
                options=[
                    Labels({QUEUE_NAME_LABEL: "team-a"}),
                    Annotations({SCENARIO_ANNOTATION: "never-finish"}),
                ],
            )
        ).job.name
        client.wait(blocker, "Running", timeout=30)
    run = run_dag(dag_id)
    assert run.state == "failed"
    text = capfd.readouterr().out
    # The task log follows the queue, then the error says what the queue waited for.
    assert "queued in team-a (cluster queue gpus)" in text
    assert "was not admitted by Kueue (queue team-a) within 1.5s" in text
    assert "insufficient unused quota for nvidia.com/gpu in flavor default-flavor" in text
    assert "failure class: capacity" in text


@pytest.mark.parametrize("dag_id", ["kf_never_admitted", "kf_never_admitted_deferred"])
def test_never_admitted_by_kueue_fails_at_once(
    kube: KubeTestServer, dag_id: str, capfd: pytest.CaptureFixture[str]
) -> None:
    queue_with_four_gpus(kube)
    run = run_dag(dag_id)  # no admission timeout: the wait must not run until one
    assert run.state == "failed"
    assert run.try_number("train") == 1
    text = capfd.readouterr().out
    assert "ExceedsMaxQuota" in text
    assert "pod set node asks for 8 nvidia.com/gpu, more than the maximum capacity of 4" in text
    assert "failure class: capacity" in text
    (job,) = jobs(kube)
    assert job["spec"]["suspend"] is True  # still queued: on_finish_action keeps it


def test_fail_fast_on_names_its_fix() -> None:
    from kf_trainer_airflow.operators.trainjob import TrainJobOperator
    from kf_trainer_core.spec import CustomTrainer

    def fit() -> None:
        return None

    with pytest.raises(ValueError, match=r"fail_fast_on='configuration'.*Fix: use"):
        TrainJobOperator(task_id="t", trainer=CustomTrainer(fit), fail_fast_on="configuration")
    with pytest.raises(ValueError, match=r"retry_policy"):
        TrainJobOperator(task_id="t", trainer=CustomTrainer(fit), fail_fast_on=("user-code",))


RETRYING = re.compile(
    r"Restarting: step node-0 is failing and being retried \(attempt \d of 7, exit code 3\)"
)


@pytest.mark.parametrize("dag_id", ["kf_restarting", "kf_restarting_deferred"])
def test_a_restarting_job_is_explained_in_the_task_log(
    kube: KubeTestServer, dag_id: str, capfd: pytest.CaptureFixture[str]
) -> None:
    run = run_dag(dag_id)
    assert run.state == "failed"
    text = capfd.readouterr().out
    name = jobs(kube)[0]["metadata"]["name"]
    # The progress lines and the error say it as the CLI and the client do.
    assert re.search(rf"TrainJob default/{name}: {RETRYING.pattern}", text), text
    assert "did not reach Complete within 5s; it is Restarting" in text
    assert "failure class: user-code — the training program exited with code 3" in text
    assert re.search(rf"fix: read the step's log \(\S.* jobs logs {name} --step node-0\)", text)
    assert f"left behind: TrainJob default/{name} still exists (Restarting)" in text
    # A timeout is not reported as a failure, nor with a fix that contradicts its class.
    assert f"TrainJob default/{name} failed:" not in text
    assert "a retry will not help" not in text
    assert "wait longer" not in text


@pytest.mark.parametrize("dag_id", ["kf_too_big", "kf_too_big_deferred"])
def test_a_job_too_big_for_any_node_is_explained_in_the_task_log(
    kube: KubeTestServer, dag_id: str, capfd: pytest.CaptureFixture[str]
) -> None:
    run = run_dag(dag_id)
    assert run.state == "failed"
    text = capfd.readouterr().out
    name = jobs(kube)[0]["metadata"]["name"]
    pending = "Pending: step node-0 cannot be scheduled: 0/4 nodes can give it 16 nvidia.com/gpu (each has fewer in all or fewer unused)"
    assert f"within 2s; it is {pending}" in text, text
    assert "failure class: capacity" in text
    assert "fix: make the job fit: " in text
    assert f"left behind: TrainJob default/{name} still exists (Pending)" in text
    assert f"TrainJob default/{name} failed:" not in text


def test_a_submit_refused_for_what_other_jobs_hold_is_left_to_retries() -> None:
    # GPUs another job holds now are capacity: the task's retries may find them free,
    # where a configuration refusal (a missing runtime) fails it fast.
    from kf_trainer_airflow.failures import refused_exception
    from kf_trainer_core.errors import ResourcesBusyError, SubmitError

    assert refused_exception(ResourcesBusyError("other jobs hold 3 of 4 GPUs")) is None
    assert refused_exception(SubmitError("the runtime is missing")) is not None
