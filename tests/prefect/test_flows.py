"""Real Prefect flows on the ephemeral server, running TrainJobs on the Kubernetes-API
test server: success, failure with its reason, retries, the step-by-step tasks, the
decorator, artifacts and logs read back through the Prefect API, and secrets kept out
of all of it."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
from prefect import flow
from prefect.client.orchestration import get_client
from prefect_support import read_artifacts, read_logs, spec

from kf_trainer_core.client import TrainerClient
from kf_trainer_core.cluster.outputs import JobOutputs
from kf_trainer_core.cluster.status import JobState, TrainJob
from kf_trainer_core.errors import TrainJobFailedError
from kf_trainer_core.manifest.builder import ATTEMPT_ANNOTATION, IDENTITY_LABEL
from kf_trainer_core.spec import Annotations
from kf_trainer_core.testing.scenarios import SCENARIO_ANNOTATION, Scenario
from kf_trainer_core.testing.server import KubeTestServer
from kf_trainer_prefect import (
    KubeflowTrainerCredentials,
    cancel_trainjob,
    get_trainjob_outputs,
    run_trainjob,
    stream_trainjob_logs,
    submit_trainjob,
    trainjob_task,
    wait_trainjob,
)
from kf_trainer_prefect._engine import FLOW_RUN_LABEL

BLOCK_NAME = "kf-prefect-tests"

pytestmark = pytest.mark.usefixtures("prefect_server")


def by_key(artifacts: list[Any]) -> dict[str, Any]:
    return {a.key: a for a in artifacts if a.key}


def test_run_trainjob(creds: KubeflowTrainerCredentials, k8s: TrainerClient) -> None:
    creds = creds.model_copy(update={"dashboard_url": "https://ui.example/{namespace}/{name}"})

    @flow
    def train() -> JobOutputs:
        return run_trainjob(spec("progress", nodes=2), creds)

    state = train(return_state=True)
    out: JobOutputs = state.result()
    assert out.status is JobState.COMPLETE
    assert out.result == {"epochs": 3, "loss": 0.1289}
    assert out.metrics
    assert [s.name for s in out.steps] == ["node-0", "node-1"]
    flow_run_id = state.state_details.flow_run_id
    name = out.name

    (job,) = k8s.list_jobs()
    assert job.name == name
    assert job.labels[FLOW_RUN_LABEL] == str(flow_run_id)

    logs = read_logs(flow_run_id)
    assert (
        f"Submitted TrainJob default/{name} (runtime torch-distributed, Created): https://ui.example/default/{name}"
        in logs
    )
    assert any(line.startswith(f"[{name}/node-0] Epoch 3/3") for line in logs)

    artifacts = by_key(read_artifacts(flow_run_id))
    assert set(artifacts) == {f"{name}-{k}" for k in ("progress", "steps", "summary", "dashboard")}
    progress = artifacts[f"{name}-progress"]
    assert progress.type == "progress"
    assert float(progress.data) == 100
    assert "loss=" in progress.description
    summary = artifacts[f"{name}-summary"].data
    for part in (
        name,
        "`default`",
        "`torch-distributed`",
        "Duration",
        "Complete",
        '"loss": 0.1289',
    ):
        assert part in summary
    rows = json.loads(artifacts[f"{name}-steps"].data)
    assert [r["name"] for r in rows if r["kind"] == "step"] == ["node-0", "node-1"]
    assert {r["name"] for r in rows if r["kind"] == "metric"} == set(out.metrics)
    assert f"(https://ui.example/default/{name})" in artifacts[f"{name}-dashboard"].data


def test_requests_per_job_do_not_grow_with_its_duration(
    creds: KubeflowTrainerCredentials, kube: KubeTestServer
) -> None:
    # Waiting is event-driven (one shared watch), so a longer job costs no more requests.
    # (Without the log stream, whose start depends on when the pod starts.)
    counts = []
    for duration in (0.2, 3.0):

        @flow
        def train(seconds: float) -> JobOutputs:
            job = spec(json.dumps({"preset": "success", "duration": seconds}))
            return run_trainjob(job, creds, stream_logs=False)

        out = train(duration)
        counts.append(kube.requests.count(job=out.name))
    assert counts[0] == counts[1]
    assert counts[0] <= 10


def test_failure_reports_its_reason(creds: KubeflowTrainerCredentials, k8s: TrainerClient) -> None:
    @flow
    def train() -> JobOutputs:
        return run_trainjob(spec("fail", nodes=2), creds)

    state = train(return_state=True)
    assert state.is_failed()
    with pytest.raises(TrainJobFailedError) as info:
        state.result()
    failure = info.value.failure
    assert failure.step == "node-0"
    assert failure.exit_code not in (None, 0)
    assert failure.log_tail
    (job,) = k8s.list_jobs()
    assert job.status is JobState.FAILED
    summary = by_key(read_artifacts(state.state_details.flow_run_id))[f"{job.name}-summary"].data
    assert "Failed" in summary
    assert "### Failure" in summary
    assert f"exit code {failure.exit_code}" in summary
    assert failure.pod is not None
    assert failure.pod in summary


def test_retry_after_a_failed_job_submits_a_fresh_one(
    creds: KubeflowTrainerCredentials, k8s: TrainerClient, kube: KubeTestServer
) -> None:
    # The first attempt fails; fresh attempts (annotated with their number) succeed.
    kube.controller.script(
        lambda tj: ATTEMPT_ANNOTATION not in (tj["metadata"].get("annotations") or {}),
        Scenario.preset("fail"),
    )

    @flow
    def train() -> JobOutputs:
        return run_trainjob.with_options(retries=1, retry_delay_seconds=0)(spec(None), creds)

    out = train()
    assert out.status is JobState.COMPLETE
    # Creation timestamps have one-second resolution, so tell the attempts apart by
    # state: the scenario fails only the first (un-annotated) attempt.
    jobs = {j.status: j for j in k8s.list_jobs()}
    assert len(k8s.list_jobs()) == 2
    assert set(jobs) == {JobState.FAILED, JobState.COMPLETE}
    assert out.name == jobs[JobState.COMPLETE].name != jobs[JobState.FAILED].name
    assert (
        jobs[JobState.FAILED].labels[IDENTITY_LABEL]
        == jobs[JobState.COMPLETE].labels[IDENTITY_LABEL]
    )


def test_a_task_retried_after_an_error_reattaches_to_its_job(
    creds: KubeflowTrainerCredentials, k8s: TrainerClient, kube: KubeTestServer
) -> None:
    # The first attempt loses the API (403 once) after its job was created; Prefect
    # retries the task, and the retry finds the job instead of training again.
    kube.faults.fail_next(1, code=403, retry_after=None, verb="list", resource="pods")

    @flow
    def train() -> JobOutputs:
        retried = run_trainjob.with_options(retries=1, retry_delay_seconds=0)
        return retried(spec(None), creds, stream_logs=False)

    state = train(return_state=True)
    out = state.result()
    assert out.status is JobState.COMPLETE
    assert [j.name for j in k8s.list_jobs()] == [out.name]
    logs = read_logs(state.state_details.flow_run_id)
    assert any(line.startswith(f"Submitted TrainJob default/{out.name}") for line in logs)
    assert any(line.startswith(f"Reattached to TrainJob default/{out.name}") for line in logs)


def test_submitting_the_same_job_twice_reattaches(
    creds: KubeflowTrainerCredentials, k8s: TrainerClient
) -> None:
    @flow
    def train() -> tuple[TrainJob, TrainJob, JobOutputs]:
        first = submit_trainjob(spec(None), creds)
        again = submit_trainjob(spec(None), creds)
        return first, again, wait_trainjob(first, creds)

    first, again, out = train()
    assert first.name == again.name == out.name
    assert len(k8s.list_jobs()) == 1


def test_step_by_step_tasks(creds: KubeflowTrainerCredentials, k8s: TrainerClient) -> None:
    @flow
    def train() -> tuple[JobOutputs, int, JobOutputs, bool, bool]:
        job = submit_trainjob(spec(None, nodes=2), creds)
        done = wait_trainjob(job.name, creds)
        lines = stream_trainjob_logs(job, creds, step="node-1", follow=True)
        outputs = get_trainjob_outputs(job, creds, artifacts=True)
        return done, lines, outputs, cancel_trainjob(job, creds), cancel_trainjob(job, creds)

    state = train(return_state=True)
    done, lines, outputs, deleted, again = state.result()
    assert done.status is JobState.COMPLETE
    assert outputs.result == done.result
    assert lines > 0
    assert (deleted, again) == (True, False)
    assert k8s.list_jobs() == []
    logs = read_logs(state.state_details.flow_run_id)
    assert any(line.startswith(f"[{done.name}/node-1] ") for line in logs)
    assert f"Deleted TrainJob {done.name}" in logs


def test_wait_for_a_state_other_than_complete(creds: KubeflowTrainerCredentials) -> None:
    @flow
    def train() -> tuple[JobOutputs, bool]:
        job = submit_trainjob(spec("never-finish"), creds)
        running = wait_trainjob(job, creds, status="Running")
        return running, cancel_trainjob(job, creds, action="suspend")

    running, suspended = train()
    assert running.status is JobState.RUNNING
    assert suspended is True


@trainjob_task(
    credentials=BLOCK_NAME, options=[Annotations({SCENARIO_ANNOTATION: "exec"})], retries=0
)
def fit_line(lr: float = 0.1, epochs: int = 3) -> dict[str, float]:
    """Fits y = 3x by gradient descent (runs in the job's pods, here as a process)."""
    import random

    rng = random.Random(0)
    w = 0.0
    for _ in range(epochs * 50):
        x = rng.uniform(-1, 1)
        w -= lr * 2 * (w * x - 3.0 * x) * x
    return {"w": round(w, 4), "epochs": epochs}


def test_decorated_function_returns_its_value(
    creds: KubeflowTrainerCredentials, k8s: TrainerClient
) -> None:
    creds.save(BLOCK_NAME, overwrite=True)  # the decorator names the saved block

    @flow
    def train() -> tuple[dict[str, float], dict[str, float]]:
        return fit_line(lr=0.2), fit_line(0.05, epochs=2)

    first, second = train()
    original = fit_line.fn.__wrapped__  # type: ignore[attr-defined]
    assert first == original(lr=0.2)
    assert second == original(lr=0.05, epochs=2)
    jobs = k8s.list_jobs()
    assert len(jobs) == 2
    assert all(j.name.startswith("fit-line-") for j in jobs)


def test_bad_input_fails_before_anything_is_submitted(
    creds: KubeflowTrainerCredentials, kube: KubeTestServer
) -> None:
    @flow
    def train() -> Any:
        return run_trainjob(
            {"trainer": {"type": "CustomTrainer", "func": "m:f", "num_node": 2}}, creds
        )

    state = train(return_state=True)
    assert state.is_failed()
    with pytest.raises(ValueError, match=r"trainer\.num_node: unknown field.*num_nodes"):
        state.result()
    assert kube.requests.count(verb="create") == 0
    assert kube.requests.count(resource="clustertrainingruntimes") == 0


def test_secrets_never_leave_the_credentials(kube: KubeTestServer, k8s: TrainerClient) -> None:
    secret = "sk-prefect-test-token-77"
    kube.require_token({secret})
    creds = KubeflowTrainerCredentials(
        host=kube.url,
        token=secret,
        namespace="default",
        watch_timeout=30,
        poll_interval=0.1,
        dashboard_url="https://ui.example/{namespace}/{name}",
    )
    creds.save("kf-secret-test", overwrite=True)

    @flow
    def train(block: KubeflowTrainerCredentials) -> JobOutputs:
        ok = run_trainjob(spec("progress"), "kf-secret-test")
        failed = run_trainjob.with_options(retries=0)(spec("fail"), block, return_state=True)
        assert failed.is_failed()
        return ok

    state = train(creds, return_state=True)
    out = state.result()
    assert out.status is JobState.COMPLETE
    flow_run_id = state.state_details.flow_run_id

    seen: list[str] = [out.model_dump_json(), repr(out), repr(creds), str(creds)]
    seen += read_logs(flow_run_id)
    for artifact in read_artifacts(flow_run_id):
        seen += [str(artifact.data), str(artifact.description)]
    with get_client(sync_client=True) as client:
        run = client.read_flow_run(flow_run_id)
        seen.append(json.dumps(run.parameters, default=str))
        for task_run in client.read_task_runs():
            seen.append(task_run.model_dump_json())
        stored = client.read_block_document_by_name(
            "kf-secret-test", "kubeflow-trainer-credentials", include_secrets=False
        )
        seen.append(json.dumps(stored.data, default=str))
    kube.require_token(None)
    for job in k8s.list_jobs():
        seen.append(job.model_dump_json())
    assert len(seen) > 10
    leaks = [text for text in seen if secret in text]
    assert leaks == []
    # And the saved block still works: the secret is stored, only never shown.
    loaded = KubeflowTrainerCredentials.load("kf-secret-test")
    assert loaded.token is not None
    assert loaded.token.get_secret_value() == secret


def test_the_ready_made_flow(creds: KubeflowTrainerCredentials, k8s: TrainerClient) -> None:
    from kf_trainer_prefect import trainjob_flow

    creds.save(BLOCK_NAME, overwrite=True)
    out = trainjob_flow(spec=spec(None).model_dump(mode="json"), credentials=BLOCK_NAME)
    assert out.status is JobState.COMPLETE
    assert [j.name for j in k8s.list_jobs()] == [out.name]
    # It can be served on a schedule: its deployment loads it back by entrypoint.
    deployment = trainjob_flow.to_deployment(
        "nightly",
        cron="0 3 * * *",
        parameters={"spec": spec(None).model_dump(mode="json"), "credentials": BLOCK_NAME},
    )
    assert deployment.entrypoint is not None
    assert deployment.entrypoint.endswith("kf_trainer_prefect/flows.py:trainjob_flow")
    assert deployment.schedules


def test_block_registers_from_the_cli(prefect_server: str) -> None:
    env = {**__import__("os").environ, "PREFECT_API_URL": prefect_server}
    proc = subprocess.run(
        [sys.executable, "-m", "prefect", "block", "register", "-m", "kf_trainer_prefect"],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Kubeflow Trainer Credentials" in proc.stdout
    with get_client(sync_client=True) as client:
        block_type = client.read_block_type_by_slug("kubeflow-trainer-credentials")
    assert block_type.name == "Kubeflow Trainer Credentials"
