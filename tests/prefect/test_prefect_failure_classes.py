"""Failure classes in real Prefect flows: ``retry_condition_fn`` predicates retry an
infrastructure failure (as the next attempt) and spend no retry on user code; the
summary artifact names the class, and a queued job's Kueue status."""

from __future__ import annotations

import re

import pytest
from prefect import flow
from prefect_support import read_artifacts, spec

from kf_trainer_core.client import TrainerClient
from kf_trainer_core.cluster.outputs import JobOutputs
from kf_trainer_core.cluster.status import JobState
from kf_trainer_core.errors import FailureClass
from kf_trainer_core.manifest.builder import ATTEMPT_ANNOTATION
from kf_trainer_core.testing.scenarios import Scenario
from kf_trainer_core.testing.server import KubeTestServer
from kf_trainer_prefect import (
    KubeflowTrainerCredentials,
    retry_infrastructure_failures,
    retry_on_classes,
    run_trainjob,
)
from kf_trainer_prefect.retries import failure_class_of_state

pytestmark = pytest.mark.usefixtures("prefect_server")


def first_attempt(tj: dict) -> bool:  # type: ignore[type-arg]
    return ATTEMPT_ANNOTATION not in (tj["metadata"].get("annotations") or {})


def test_infrastructure_failure_is_retried_as_the_next_attempt(
    creds: KubeflowTrainerCredentials, k8s: TrainerClient, kube: KubeTestServer
) -> None:
    kube.controller.script(first_attempt, Scenario.preset("evicted"))
    task = run_trainjob.with_options(
        retries=2, retry_delay_seconds=0, retry_condition_fn=retry_infrastructure_failures
    )

    @flow
    def train() -> JobOutputs:
        return task(spec(None), creds)

    out = train()
    assert out.status is JobState.COMPLETE
    states = sorted(j.status.value for j in k8s.list_jobs())
    assert states == ["Complete", "Failed"]  # one evicted attempt, one retry that ran


def test_user_code_failure_spends_no_retry(
    creds: KubeflowTrainerCredentials, k8s: TrainerClient, kube: KubeTestServer
) -> None:
    task = run_trainjob.with_options(
        retries=2, retry_delay_seconds=0, retry_condition_fn=retry_infrastructure_failures
    )

    @flow
    def train() -> dict[str, object]:
        from prefect.runtime import flow_run

        state = task(spec("fail"), creds, return_state=True)
        return {
            "failed": state.is_failed(),
            "class": failure_class_of_state(state),
            "flow_run": flow_run.id,
        }

    seen = train()
    assert seen["failed"]
    assert seen["class"] is FailureClass.USER_CODE
    assert [j.status for j in k8s.list_jobs()] == [JobState.FAILED]  # no retry: one job
    artifacts = read_artifacts(seen["flow_run"])
    summary = next(a.data for a in artifacts if a.type == "markdown")
    assert "**Failure class:** `user-code`" in summary
    assert "the training code raised RuntimeError: simulated training failure" in summary


def test_retry_on_classes_widens_the_condition(
    creds: KubeflowTrainerCredentials, k8s: TrainerClient, kube: KubeTestServer
) -> None:
    kube.controller.script(first_attempt, Scenario.preset("oom"))
    task = run_trainjob.with_options(
        retries=1,
        retry_delay_seconds=0,
        retry_condition_fn=retry_on_classes("infrastructure", "capacity"),
    )

    @flow
    def train() -> JobOutputs:
        return task(spec(None), creds)

    assert train().status is JobState.COMPLETE
    assert len(k8s.list_jobs()) == 2


def test_not_admitted_by_kueue_says_why(
    creds: KubeflowTrainerCredentials, k8s: TrainerClient, kube: KubeTestServer
) -> None:
    from kf_trainer_core.cluster.kueue import QUEUE_NAME_LABEL
    from kf_trainer_core.spec import Labels

    sim = kube.install_kueue()
    sim.add_cluster_queue("gpus", {"nvidia.com/gpu": 4})
    sim.add_local_queue("default", "team-a", "gpus")
    in_queue = Labels({QUEUE_NAME_LABEL: "team-a"})
    blocker = k8s.submit(spec("never-finish", in_queue, resources_per_node={"gpu": 4})).job.name
    k8s.wait(blocker, "Running", timeout=30)
    queued = spec(None, in_queue, resources_per_node={"gpu": 4})
    task = run_trainjob.with_options(retries=0)

    @flow
    def train() -> dict[str, object]:
        from prefect.runtime import flow_run

        state = task(queued, creds, admission_timeout=1.5, on_cancel="keep", return_state=True)
        return {"class": failure_class_of_state(state), "flow_run": flow_run.id}

    seen = train()
    assert seen["class"] is FailureClass.CAPACITY
    summary = next(a.data for a in read_artifacts(seen["flow_run"]) if a.type == "markdown")
    assert "**Queue:**" in summary
    assert "insufficient unused quota for nvidia.com/gpu" in summary
    waiting = [j for j in k8s.list_jobs() if j.name != blocker]
    assert [j.status for j in waiting] == [JobState.SUSPENDED]  # kept, still queued


@pytest.mark.parametrize("on_cancel", ["keep", "delete"])
def test_a_job_kueue_can_never_admit_fails_at_once(
    creds: KubeflowTrainerCredentials, k8s: TrainerClient, kube: KubeTestServer, on_cancel: str
) -> None:
    from kf_trainer_core.cluster.kueue import QUEUE_NAME_LABEL
    from kf_trainer_core.spec import Labels

    sim = kube.install_kueue()
    sim.add_cluster_queue("gpus", {"nvidia.com/gpu": 4})
    sim.add_local_queue("default", "team-a", "gpus")
    never = spec(None, Labels({QUEUE_NAME_LABEL: "team-a"}), resources_per_node={"gpu": 8})
    task = run_trainjob.with_options(retries=0)

    @flow
    def train() -> dict[str, object]:
        from prefect.runtime import flow_run

        # No admission timeout: the wait must end on Kueue's word, not on a timeout.
        state = task(never, creds, on_cancel=on_cancel, return_state=True)
        return {"class": failure_class_of_state(state), "flow_run": flow_run.id}

    seen = train()
    assert seen["class"] is FailureClass.CAPACITY
    summary = next(a.data for a in read_artifacts(seen["flow_run"]) if a.type == "markdown")
    assert "ExceedsMaxQuota" in summary
    assert "asks for 8 nvidia.com/gpu, more than the maximum capacity of 4" in summary
    # The task gave up on a job that would stay queued forever: on_cancel says its fate.
    left = [j.status for j in k8s.list_jobs()]
    assert left == ([JobState.SUSPENDED] if on_cancel == "keep" else [])


RESTARTING = (
    '{"preset": "fail", "exit_code": 3, "backoff_limit": 6, "duration": 3}'  # as a real Job
)


@pytest.mark.parametrize("on_cancel", ["keep", "delete"])
def test_a_restarting_job_is_explained_in_the_summary_and_the_error(
    creds: KubeflowTrainerCredentials, k8s: TrainerClient, on_cancel: str
) -> None:
    task = run_trainjob.with_options(retries=0)

    @flow
    def train() -> dict[str, object]:
        from prefect.runtime import flow_run

        state = task(spec(RESTARTING), creds, timeout=5, on_cancel=on_cancel, return_state=True)
        try:
            state.result()
        except Exception as exc:
            error = str(exc)
        return {"class": failure_class_of_state(state), "flow_run": flow_run.id, "error": error}

    seen = train()
    assert seen["class"] is FailureClass.USER_CODE
    summary = next(a.data for a in read_artifacts(seen["flow_run"]) if a.type == "markdown")
    error = str(seen["error"])
    # The same words as the CLI's and the client's: the state, the reason, the fix.
    found = re.search(
        r"step node-0 is failing and being retried \(attempt \d of 7, exit code 3\)", error
    )
    assert found, error
    reason = found.group(0)
    assert f"it is Restarting: {reason}" in error
    assert "failure class: user-code — the training program exited with code 3" in error
    assert ": Restarting" in summary
    assert f"**Restarting:** {reason}" in summary.replace("\\", "")
    assert "**Failure class:** user-code — the training program exited with code 3" in summary
    assert "**Fix:** read the step's log (" in summary
    assert "### Failure" not in summary  # said once, as what holds the job up
    if on_cancel == "keep":
        (job,) = k8s.list_jobs()
        assert f"left behind: TrainJob default/{job.name} still exists (Restarting)" in error
        k8s.delete_job(job.name)
    else:
        assert "left behind:" not in error
        assert "cleaned up: TrainJob " in error
        assert "deleted by the task" in error
        assert k8s.list_jobs() == []
