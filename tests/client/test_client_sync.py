"""The sync client, over real HTTP (the ``kubernetes`` package) against the test server
and its simulated Trainer controller."""

from __future__ import annotations

import time
from typing import Any

import pytest
from train_functions import train_linear

from kf_trainer_core.client import TrainerClient
from kf_trainer_core.cluster.status import JobState
from kf_trainer_core.errors import (
    SpecConflictError,
    SubmitError,
    TrainJobCreationFailedError,
    TrainJobFailedError,
    TrainJobNotFoundError,
    TrainJobTimeoutError,
)
from kf_trainer_core.k8s.calls import Create, ListObjects, OpenWatch
from kf_trainer_core.manifest.builder import IDENTITY_LABEL
from kf_trainer_core.spec import (
    Annotations,
    CustomTrainer,
    Name,
    Suspend,
    TrainJobSpec,
)
from kf_trainer_core.testing.scenarios import SCENARIO_ANNOTATION
from kf_trainer_core.testing.server import KubeTestServer


def spec(
    scenario: str | None = None, *options: Any, nodes: int = 1, **trainer: Any
) -> TrainJobSpec:
    opts = list(options)
    if scenario:
        opts.append(Annotations({SCENARIO_ANNOTATION: scenario}))
    return TrainJobSpec(
        trainer=CustomTrainer(train_linear, num_nodes=nodes, **trainer), options=opts
    )


def test_runtimes(client: TrainerClient) -> None:
    names = {r.name for r in client.list_runtimes()}
    assert {"torch-distributed", "deepspeed-distributed", "torchtune-llama3.2-1b"} <= names
    rt = client.get_runtime("deepspeed-distributed")
    assert rt.launcher == "mpirun"
    assert rt.observed
    with pytest.raises(TrainJobNotFoundError, match="torch-distributed"):
        client.get_runtime("no-such-runtime")


def test_train_wait_and_outputs(client: TrainerClient, calls: list[Any]) -> None:
    name = client.train(trainer=CustomTrainer(train_linear, num_nodes=2))
    job, result = client.wait(name, timeout=30)
    assert job.status is JobState.COMPLETE
    assert [s.name for s in job.steps] == ["node-0", "node-1"]
    assert all(s.status == "Succeeded" for s in job.steps)
    assert result is not None
    out = client.get_job_outputs(name)
    assert out.result == result
    assert out.status is JobState.COMPLETE
    # Per job: the create and one list of its pods (the watch is shared).
    creates = [c for c in calls if isinstance(c, Create)]
    assert len(creates) == 1


def test_sdk_wait_signature_and_callbacks(client: TrainerClient) -> None:
    name = client.submit(spec("progress")).job.name
    seen: list[JobState] = []
    progress: list[int] = []

    def callback(job: Any) -> None:
        seen.append(job.status)
        if job.progress and job.progress.percentage is not None:
            progress.append(job.progress.percentage)

    job = client.wait_for_job_status(name, status={"Complete"}, timeout=30, callbacks=[callback])
    assert job.status is JobState.COMPLETE
    assert seen[-1] is JobState.COMPLETE
    assert progress
    assert progress == sorted(progress)
    assert job.progress is not None
    assert job.progress.metrics


def test_wait_for_running(client: TrainerClient) -> None:
    name = client.submit(spec("never-finish")).job.name
    job = client.wait_for_job_status(name, status="Running", timeout=30)
    assert job.status is JobState.RUNNING
    assert client.delete_job(name) is True
    assert client.delete_job(name) is False


def test_failure_explains_itself(client: TrainerClient) -> None:
    name = client.submit(spec("fail", nodes=2)).job.name
    with pytest.raises(TrainJobFailedError) as info:
        client.wait(name, timeout=30)
    failure = info.value.failure
    assert failure.reason
    assert failure.step is not None
    assert failure.step.startswith("node-")
    assert failure.pod is not None
    assert failure.exit_code not in (None, 0)
    assert failure.log_tail
    text = str(info.value)
    assert failure.pod in text
    assert "exit code" in text


def test_oom_is_reported(client: TrainerClient) -> None:
    name = client.submit(spec("oom")).job.name
    with pytest.raises(TrainJobFailedError) as info:
        client.wait(name, timeout=30)
    assert info.value.failure.container_reason == "OOMKilled"
    assert info.value.failure.exit_code == 137


def test_creation_failure_fails_the_wait_promptly(client: TrainerClient) -> None:
    name = client.submit(spec("creation-failure")).job.name
    with pytest.raises(TrainJobCreationFailedError, match="TrainJobResourcesCreationFailed"):
        client.wait(name, timeout=30)


def test_image_pull_trouble_shows_in_startup_timeout(client: TrainerClient) -> None:
    name = client.submit(spec("image-pull")).job.name
    with pytest.raises(TrainJobTimeoutError) as info:
        client.wait(name, timeout=30, startup_timeout=1.0)
    assert info.value.failure is not None
    assert info.value.failure.container_reason in ("ErrImagePull", "ImagePullBackOff")


def test_timeout(client: TrainerClient) -> None:
    name = client.submit(spec("never-finish")).job.name
    with pytest.raises(TrainJobTimeoutError, match="did not reach Complete"):
        client.wait(name, timeout=0.5)
    client.delete_job(name)


def test_suspend_and_resume(client: TrainerClient) -> None:
    name = client.submit(spec(None, Suspend())).job.name
    job = client.wait_for_job_status(name, status="Suspended", timeout=30)
    assert job.status is JobState.SUSPENDED
    client.resume_job(name)
    job = client.wait_for_job_status(name, timeout=30)
    assert job.status is JobState.COMPLETE
    # Suspended=False (Resumed) stays in the conditions and does not read as suspended.
    assert any(c["type"] == "Suspended" and c["status"] == "False" for c in job.conditions)


def test_idempotent_submit(client: TrainerClient) -> None:
    ident = ("dag", "train", "run-1", -1)
    first = client.submit(spec("never-finish"), identity=ident)
    again = client.submit(spec("never-finish"), identity=ident)
    assert first.created
    assert not again.created
    assert again.job.name == first.job.name
    assert len(client.list_jobs()) == 1


def test_same_name_other_spec_is_a_conflict(client: TrainerClient) -> None:
    client.submit(spec(None, Name("fixed")))
    adopted = client.submit(spec(None, Name("fixed")))
    assert not adopted.created
    with pytest.raises(SpecConflictError, match="different spec"):
        client.submit(spec(None, Name("fixed"), nodes=3))


def test_fresh_attempt_after_a_failed_job(client: TrainerClient) -> None:
    ident = ("dag", "train", "run-2", -1)
    first = client.submit(spec("fail"), identity=ident)
    with pytest.raises(TrainJobFailedError):
        client.wait(first.job.name, timeout=30)
    second = client.submit(spec("fail"), identity=ident)
    assert second.created
    assert second.job.name != first.job.name
    # Without fresh_after_failure the failed job is adopted as it is.
    third = client.submit(spec("fail"), identity=ident, fresh_after_failure=False)
    assert third.job.name == second.job.name


def test_list_get_events_and_logs(client: TrainerClient) -> None:
    name = client.submit(spec(None, nodes=2)).job.name
    client.wait(name, timeout=30)
    assert [j.name for j in client.list_jobs()] == [name]
    assert client.list_jobs(runtime="jax-distributed") == []
    job = client.get_job(name)
    assert job.step("node-1") is not None
    events = client.get_job_events(name)
    kinds = {e.involved_object_kind for e in events}
    assert "Pod" in kinds
    lines = list(client.get_job_logs(name, step="node-0"))
    assert lines
    followed = list(client.get_job_logs(name, step="node-0", follow=True))
    assert followed == lines


def test_follow_waits_for_a_pending_pod(client: TrainerClient) -> None:
    name = client.submit(spec("slow-start")).job.name
    lines = list(client.get_job_logs(name, follow=True))
    assert lines
    assert client.get_job(name).status in (JobState.RUNNING, JobState.COMPLETE)


def test_missing_job(client: TrainerClient) -> None:
    with pytest.raises(TrainJobNotFoundError):
        client.get_job("nope")
    with pytest.raises(TrainJobNotFoundError):
        client.wait("nope", timeout=5)


def test_server_rejection_names_the_field(client: TrainerClient, server: KubeTestServer) -> None:
    # A manifest the builder would never make, sent as a raw spec: the API answers 422.
    from kf_trainer_core.manifest.builder import build_trainjob
    from kf_trainer_core.programs.submit import submit

    built = build_trainjob(spec(None))
    built.manifest["spec"]["trainer"]["numNodes"] = "many"

    async def submitted() -> object:
        return await submit(await client._async._api(), client.namespace, built)

    with pytest.raises(SubmitError, match=r"spec\.trainer\.numNodes"):
        client._call(submitted())


def test_watch_forbidden_falls_back_to_polling(
    client: TrainerClient, server: KubeTestServer, calls: list[Any]
) -> None:
    server.forbid("watch", "trainjobs")
    name = client.submit(spec(None)).job.name
    job = client.wait_for_job_status(name, timeout=30, polling_interval=0.1)
    assert job.status is JobState.COMPLETE
    # One refused watch, then lists.
    assert sum(isinstance(c, OpenWatch) and c.resource.plural == "trainjobs" for c in calls) == 1
    assert sum(isinstance(c, ListObjects) and c.resource.plural == "trainjobs" for c in calls) >= 2


def test_run_streams_logs_and_returns_outputs(client: TrainerClient) -> None:
    lines: list[str] = []
    updates: list[JobState] = []
    out = client.run(
        spec(None, nodes=2),
        identity=("dag", "task", "run-9"),
        on_log=lines.append,
        on_update=lambda job: updates.append(job.status),
        timeout=30,
    )
    assert out.status is JobState.COMPLETE
    assert out.result is not None
    # Every line reaches the sink, the last ones included, on success too.
    assert lines == list(client.get_job_logs(out.name))
    assert updates[-1] is JobState.COMPLETE
    # The same identity again reattaches: no second job.
    again = client.run(spec(None, nodes=2), identity=("dag", "task", "run-9"), timeout=30)
    assert again.name == out.name
    assert len(client.list_jobs()) == 1


def test_run_failure_raises_with_details(client: TrainerClient) -> None:
    lines: list[str] = []
    with pytest.raises(TrainJobFailedError) as info:
        client.run(spec("fail"), on_log=lines.append, timeout=30)
    assert info.value.failure.log_tail
    assert lines
    # Asked again later, the client explains the same failure.
    assert info.value.job is not None
    again = client.explain_failure(info.value.job.name)
    assert (again.reason, again.step, again.exit_code) == (
        info.value.failure.reason,
        info.value.failure.step,
        info.value.failure.exit_code,
    )


@pytest.mark.parametrize("action", ["delete", "suspend", "keep"])
def test_cancel_actions(client: TrainerClient, action: str) -> None:
    name = client.submit(spec("never-finish")).job.name
    client.wait_for_job_status(name, status="Running", timeout=30)
    done = client.cancel_job(name, action)  # type: ignore[arg-type]
    if action == "delete":
        assert done
        with pytest.raises(TrainJobNotFoundError):
            client.get_job(name)
    elif action == "suspend":
        assert done
        assert (
            client.wait_for_job_status(name, "Suspended", timeout=30).status is JobState.SUSPENDED
        )
    else:
        assert not done
        assert client.get_job(name).status is JobState.RUNNING
    client.delete_job(name)


def test_stop_unfinished_picks_by_name_identity_or_selector(client: TrainerClient) -> None:
    running = client.submit(spec("never-finish"), identity=("dag", "a", "run1")).job.name
    other = client.submit(spec("never-finish"), identity=("dag", "b", "run1")).job.name
    done = client.submit(spec(None), identity=("dag", "c", "run1")).job.name
    client.wait(done, timeout=30)

    # A finished job keeps its result; a missing one is no error.
    assert client.stop_unfinished(done) == []
    assert client.stop_unfinished(identity=("dag", "c", "run1")) == []
    assert client.stop_unfinished("no-such-job") == []
    assert client.get_job(done).status is JobState.COMPLETE

    # By identity: only that identity's attempts, however the identity is spelt.
    assert client.stop_unfinished(identity="dag/a/run1", action="suspend") == [running]
    assert client.wait_for_job_status(running, "Suspended", timeout=30)
    assert client.stop_unfinished(identity=("dag", "a", "run1"), action="keep") == []
    assert client.get_job(other).status is not JobState.SUSPENDED

    # By selector; the suspended job is still unfinished, so it goes too.
    picked = client.stop_unfinished(label_selector=IDENTITY_LABEL)
    assert sorted(picked) == sorted([running, other])
    assert client.stop_unfinished(other) == []  # already being deleted, or gone

    with pytest.raises(ValueError, match="picks no job"):
        client.stop_unfinished()
    with pytest.raises(ValueError, match="delete, suspend or keep"):
        client.stop_unfinished(done, action="destroy")  # type: ignore[arg-type]


def test_runtime_packages(client: TrainerClient) -> None:
    assert client.get_runtime_packages("torch-distributed", timeout=30)


def test_build_checks_against_the_cluster_runtime(client: TrainerClient) -> None:
    built = client.build(spec(None), identity=("a", "b"))
    assert built.runtime.observed
    assert built.runtime.replicated_jobs == ("node",)


def test_follow_resumes_after_drops_without_repeating(
    client: TrainerClient, server: KubeTestServer
) -> None:
    import json
    import threading

    expected = [f"step {i:03d} loss={1 / (i + 1):.4f}" for i in range(60)]
    scenario = json.dumps({"preset": "success", "duration": 2.5, "logs": expected})
    name = client.submit(spec(scenario)).job.name
    got: list[str] = []

    def follow() -> None:
        got.extend(client.get_job_logs(name, follow=True))

    reader = threading.Thread(target=follow)
    reader.start()
    for _ in range(3):
        time.sleep(0.6)
        server.restart(downtime=0.05)
    reader.join(30)
    assert not reader.is_alive()
    assert got == expected
