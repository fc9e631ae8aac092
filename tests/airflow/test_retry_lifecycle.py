"""A retried TrainJobOperator task takes up what a killed try left, as the retry of every
adapter's task does (the core's task lifecycle: the ``task retry`` columns of
docs/safety.md) — here through real Airflow (``dag.test()``: the first try is killed
while it waits, Airflow retries it), where the retry finds its job's name in the task
state store (``durable=True``, Airflow 3.3) rather than by the task's identity."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dagtest import run_dag
from kf_dag_helpers import HOOKS

from kf_trainer_core.client import TrainerClient
from kf_trainer_core.config import KubernetesConfig
from kf_trainer_core.k8s.resources import TRAINJOBS
from kf_trainer_core.manifest.builder import IDENTITY_ANNOTATION
from kf_trainer_core.spec import Annotations, CustomTrainer, Name, TrainJobSpec
from kf_trainer_core.testing.scenarios import SCENARIO_ANNOTATION
from kf_trainer_core.testing.server import KubeTestServer

pytestmark = pytest.mark.usefixtures("airflow_db", "kf_conn")

#: A finalizer of someone else's that holds a deleted job until it is removed.
HOLD = "kf-trainer-suite.test/hold"


@pytest.fixture
def hooks() -> Iterator[dict[str, Any]]:
    HOOKS.clear()
    yield HOOKS
    HOOKS.clear()


def creates(kube: KubeTestServer) -> int:
    return kube.requests.count(verb="create", resource="trainjobs", status=201)


def only_job(kube: KubeTestServer) -> dict[str, Any]:
    (job,) = kube.store.list(TRAINJOBS, "default")[0]
    return job


def complete(job: dict[str, Any]) -> bool:
    conditions = (job.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Complete" and c["status"] == "True" for c in conditions)


@pytest.mark.parametrize(
    ("action", "submits", "said"),
    [
        # Deleted: the retry submits the task's job again.
        ("delete", 2, "Submitted TrainJob"),
        # Suspended: the retry resumes it; kept running: the retry waits for it.
        ("suspend", 1, "Resumed TrainJob"),
        ("keep", 1, "Reconnecting to existing job"),
    ],
)
def test_a_retry_takes_up_what_a_killed_try_left(
    kube: KubeTestServer,
    hooks: dict[str, Any],
    capfd: pytest.CaptureFixture[str],
    action: str,
    submits: int,
    said: str,
) -> None:
    run = run_dag(f"kf_killed_{action}")
    assert run.state == "success"
    assert run.try_number("train") == 2
    job = only_job(kube)
    assert complete(job)
    assert run.xcom("train")["name"] == job["metadata"]["name"]
    assert creates(kube) == submits
    assert said in capfd.readouterr().out


def test_a_retry_waits_out_the_deletion_a_killed_try_started(
    kube: KubeTestServer, hooks: dict[str, Any]
) -> None:
    """``on_kill_action="delete"`` of a job another finalizer holds: the job stays,
    being deleted, until it goes. The retry finds its name in the task state store; it
    must not take that job up (it would wait for it to go and fail as "deleted"), but
    wait until it is gone and submit the task's job again — as a retry that finds its
    job by identity does (``task retry``, ``Deleting``: created again)."""

    def hold() -> None:
        name = only_job(kube)["metadata"]["name"]
        kube.store.patch(TRAINJOBS, "default", name, {"metadata": {"finalizers": [HOLD]}})

    def release_soon() -> None:
        # Once the retry has read the stored job's state: it is being deleted then.
        name = only_job(kube)["metadata"]["name"]
        assert only_job(kube)["metadata"].get("deletionTimestamp")
        patch = {"metadata": {"finalizers": None}}
        threading.Timer(1.0, kube.store.patch, (TRAINJOBS, "default", name, patch)).start()

    hooks["before kill"] = hold
    hooks["retry decided"] = release_soon
    run = run_dag("kf_killed_delete")
    assert run.state == "success"
    assert run.try_number("train") == 2
    job = only_job(kube)
    assert complete(job)
    assert not job["metadata"].get("deletionTimestamp")
    assert creates(kube) == 2


def test_a_retry_leaves_another_job_that_took_its_fixed_name(
    kube: KubeTestServer, kf_conn: Path, hooks: dict[str, Any], capfd: pytest.CaptureFixture[str]
) -> None:
    """The killed try deleted its job, ``kf-killed-job``; another's job took the name
    before the retry ran. The task state store still says ``kf-killed-job``: the retry
    must not wait on that job and report its outputs as the task's (nor delete it when
    killed), but report the conflict, as a submit does."""
    other = TrainJobSpec(
        trainer=CustomTrainer(lambda_free),
        options=[
            Name("kf-killed-job"),
            Annotations({SCENARIO_ANNOTATION: '{"preset": "success", "duration": 1.0}'}),
        ],
    )

    def take_the_name() -> None:
        with TrainerClient(KubernetesConfig(kubeconfig=str(kf_conn))) as client:
            client.submit(other, identity="someone-else")

    hooks["after kill"] = take_the_name
    run = run_dag("kf_killed_delete_named")
    assert run.state == "failed"
    assert "TrainJob default/kf-killed-job already exists with a different spec" in (
        capfd.readouterr().out
    )
    job = only_job(kube)
    assert job["metadata"]["annotations"][IDENTITY_ANNOTATION] == "someone-else"
    assert not job["metadata"].get("deletionTimestamp")


def test_a_try_timed_out_before_it_learnt_its_job_applies_on_kill_action_by_identity(
    kube: KubeTestServer, hooks: dict[str, Any]
) -> None:
    """The retry's ``execution_timeout`` runs out while it looks for the job its crashed
    try left (a slow API server); Airflow calls ``on_kill`` once ``execute`` has ended.
    ``on_kill_action="delete"`` must still reach the job, by the task's identity, as a
    kill while ``execute`` runs does (and Prefect's and KFP's do): the task failed for
    good, and the job ran on with nobody to collect it."""
    hooks["crash"] = lambda: kube.faults.latency(8.0, verb="list", resource="trainjobs")
    hooks["on kill"] = kube.faults.clear
    run = run_dag("kf_timed_out_while_attaching")
    assert run.state == "failed"
    assert run.try_number("train") == 2
    assert kube.store.list(TRAINJOBS, "default")[0] == []
    assert creates(kube) == 1


def lambda_free() -> None:
    """Someone else's training function."""
