"""Pipelines run with ``kfp.local.SubprocessRunner(use_venv=False)``: each task is a real
subprocess running the component's command, talking HTTP to the Kubernetes-API test
server (or running jobs on the local backend)."""

# No `from __future__ import annotations`: KFP reads pipeline annotations as objects.
import json
from pathlib import Path
from typing import Any

import pytest
from kfp import compiler, dsl
from kfp_support import files_text, scenario
from pipeline_parts import evaluate, prepare_data, train_model

from kf_trainer_core.client import TrainerClient
from kf_trainer_core.cluster.status import JobState
from kf_trainer_core.spec import (
    Annotations,
    BuiltinTrainer,
    CustomTrainer,
    HuggingFaceDatasetInitializer,
    HuggingFaceModelInitializer,
    Initializer,
    TorchTuneConfig,
    TrainJobSpec,
)
from kf_trainer_core.testing.scenarios import SCENARIO_ANNOTATION
from kf_trainer_core.testing.server import KubeTestServer
from kf_trainer_kfp import ComponentImage, step_components, trainjob_component, trainjob_launcher
from kf_trainer_kfp.inputs import TOKEN_ENV

HERE = ComponentImage.current_environment()


def with_scenario(value: str) -> Annotations:
    return Annotations({SCENARIO_ANNOTATION: value})


def test_prepare_train_evaluate(
    local_kfp: Path,
    backend: dict[str, Any],
    client: TrainerClient,
    server: KubeTestServer,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The training function really runs (the server's ``exec`` scenario): its return
    value becomes the Model location, Metrics and ``result_json`` a later task reads."""
    train = trainjob_component(
        train_model,
        options=[with_scenario("exec")],
        backend_config=backend,
        timeout_seconds=120,
        component_image=HERE,
    )

    @dsl.pipeline
    def pipe(rows: int = 100, lr: float = 0.5) -> str:
        data = prepare_data(rows=rows)
        trained = train(data_uri=data.output, lr=lr)
        return evaluate(
            model=trained.outputs["model"],
            metrics=trained.outputs["metrics"],
            result_json=trained.outputs["result_json"],
        ).output

    run = pipe()
    seen = json.loads(run.output)
    jobs = client.list_jobs()
    assert len(jobs) == 1
    job = jobs[0]
    assert job.status is JobState.COMPLETE
    assert seen["model_uri"] == "s3://bucket/models/rows-100/model"
    assert seen["trainjob"] == job.name
    assert seen["loss_metric"] == seen["loss_result"]
    assert seen["w_metric"] > 2.9
    # Identity: the KFP run and task, filled in by KFP at run time.
    assert job.identity is not None
    kind, run_id, task = job.identity.split("/")
    assert (kind, task) == ("kfp", "train-model")
    assert run_id.isdigit()
    out = capsys.readouterr().out
    assert '"event": "trained"' in out  # node-0's log, streamed into the task's log
    assert f"[kf-trainer] TrainJob default/{job.name}: Complete" in out
    assert server.requests.count(verb="create", resource="trainjobs", status=201) == 1
    summary = next(local_kfp.rglob("train-model/summary")).read_text()
    # The summary every adapter writes (the core's), with the model's location.
    assert summary.startswith(f"## TrainJob `{job.name}`: Complete\n")
    assert "- **Namespace:** `default`" in summary
    assert '- **Result:** `{"loss": ' in summary
    assert "- **Model:** `s3://bucket/models/rows-100/model`" in summary


def _torchtune_spec(**timing: float) -> TrainJobSpec:
    return TrainJobSpec(
        runtime="torchtune-llama3.2-1b",
        trainer=BuiltinTrainer(TorchTuneConfig(epochs=1)),
        initializer=Initializer(
            dataset=HuggingFaceDatasetInitializer(storage_uri="hf://tatsu-lab/alpaca"),
            model=HuggingFaceModelInitializer(storage_uri="hf://meta-llama/Llama-3.2-1B"),
        ),
        options=[with_scenario(scenario("success", **timing))],
    )


def test_initializer_training_and_outputs_as_separate_nodes(
    local_kfp: Path,
    backend: dict[str, Any],
    client: TrainerClient,
    capsys: pytest.CaptureFixture[str],
) -> None:
    steps = step_components(backend_config=backend, component_image=HERE, timeout_seconds=120)
    spec = _torchtune_spec(initializer_duration=0.5, duration=0.5)

    @dsl.pipeline
    def pipe() -> None:
        cleanup = steps.cancel(task_name="submit-trainjob")
        with dsl.ExitHandler(cleanup):
            job = steps.submit(spec=spec)
            init = steps.wait_for_step(job_name=job.outputs["job_name"], step="initializer")
            train = steps.wait_for_step(job_name=init.outputs["job_name"], step="trainer")
            outs = steps.outputs(job_name=train.outputs["job_name"])
            evaluate(
                model=outs.outputs["model"],
                metrics=outs.outputs["metrics"],
                result_json=outs.outputs["result_json"],
            )

    pipe()
    # Inside an exit handler a pipeline returns nothing: read the task's output file.
    written = json.loads(next(local_kfp.rglob("evaluate/executor_output.json")).read_text())
    seen = json.loads(written["parameterValues"]["Output"])
    [job] = client.list_jobs()
    assert job.status is JobState.COMPLETE
    assert [s.name for s in job.steps] == ["dataset-initializer", "model-initializer", "node-0"]
    assert seen["trainjob"] == job.name
    assert seen["loss_result"] == 0.1289  # the simulated function's return value
    out = capsys.readouterr().out
    assert "waiting for the initializer step" in out
    assert "Downloading dataset from hf://tatsu-lab/alpaca" in out  # the initializer's log
    assert "the initializer step of TrainJob" in out
    assert "Epoch 3/3" in out  # the trainer's log, in the trainer node
    assert "delete: nothing unfinished" in out  # the exit handler keeps a finished job


def test_failure_names_reason_step_and_log(
    local_kfp: Path, backend: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    launch = trainjob_launcher(backend_config=backend, component_image=HERE)
    failing = TrainJobSpec(
        trainer=CustomTrainer("def fit():\n    return 1\n"),
        options=[
            with_scenario(
                scenario(
                    "fail",
                    exit_code=3,
                    failure_message="CUDA error: out of memory",
                    logs=["loading shard 1", "RuntimeError: the loss is nan"],
                )
            )
        ],
    )

    @dsl.pipeline
    def pipe() -> None:
        launch(spec=failing)

    with pytest.raises(RuntimeError):
        pipe()
    out = capsys.readouterr().out
    assert "TrainJobFailedError" in out
    assert "failing step node-0" in out
    assert "exit code 3" in out
    assert "CUDA error: out of memory" in out
    assert "  | RuntimeError: the loss is nan" in out  # the log tail, in the error
    summary = next(local_kfp.rglob("launch-trainjob/summary")).read_text()
    assert "### Failure" in summary
    assert "exit code 3" in summary


def test_retried_task_reattaches_and_failed_job_gets_a_fresh_attempt(
    local_kfp: Path,
    backend: dict[str, Any],
    client: TrainerClient,
    server: KubeTestServer,
) -> None:
    """Run the launcher alone (as KFP's retry would run the same task again): the same
    run and task find their job again; after a failed job, a fresh attempt."""
    launch = trainjob_launcher(backend_config=backend, component_image=HERE)
    spec = TrainJobSpec(trainer=CustomTrainer("def fit():\n    return {'loss': 0.5}\n"))
    same_task = {"pipeline_run_id": "run-42", "pipeline_task_name": "train"}

    first = launch(spec=spec, **same_task)
    again = launch(spec=spec, **same_task)
    assert first.outputs["job_name"] == again.outputs["job_name"]
    assert server.requests.count(verb="create", resource="trainjobs", status=201) == 1
    assert json.loads(again.outputs["result_json"]) == {"epochs": 3, "loss": 0.1289}

    failing = spec.with_options(with_scenario("fail"))
    other_task = {"pipeline_run_id": "run-42", "pipeline_task_name": "train-2"}
    with pytest.raises(RuntimeError):
        launch(spec=failing, **other_task)
    retried = launch(spec=spec, **other_task)
    jobs = {j.name: j for j in client.list_jobs()}
    assert len(jobs) == 3
    assert jobs[retried.outputs["job_name"]].status is JobState.COMPLETE
    attempts = [j for j in jobs.values() if j.identity == "kfp/run-42/train-2"]
    assert sorted(j.status.value for j in attempts) == ["Complete", "Failed"]


def test_token_from_a_secret_never_shows(
    local_kfp: Path,
    server: KubeTestServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The token reaches the pod as an environment variable (kfp.kubernetes
    use_secret_as_env in a cluster): it works, and appears in no log, output or IR."""
    token = "tok-7f1c0a9e-very-secret"
    server.require_token({token})
    monkeypatch.setenv(TOKEN_ENV, token)
    backend = {"host": server.url, "namespace": "default", "watch_timeout": 30}
    launch = trainjob_launcher(backend_config=backend, component_image=HERE)
    spec = TrainJobSpec(trainer=CustomTrainer("def fit():\n    return 1\n"))

    @dsl.pipeline
    def pipe() -> str:
        return launch(spec=spec).outputs["status"]

    assert pipe().output == "Complete"
    compiler.Compiler().compile(pipe, str(tmp_path / "pipe.yaml"))
    assert token not in (tmp_path / "pipe.yaml").read_text()
    assert token not in capsys.readouterr().out
    assert token not in files_text(local_kfp)
    assert server.requests.count(status=401) == 0


def test_local_backend(local_kfp: Path, tmp_path: Path) -> None:
    """The same component, with ``backend_config={"backend": "local"}``: the job runs
    as processes on this machine."""
    pytest.importorskip("kf_trainer_core.backends.local")
    backend = {"backend": "local", "state_dir": str(tmp_path / "state")}
    train = trainjob_component(train_model, backend_config=backend, component_image=HERE)

    @dsl.pipeline
    def pipe() -> str:
        data = prepare_data(rows=7)
        trained = train(data_uri=data.output, lr=0.5, epochs=1)
        return evaluate(
            model=trained.outputs["model"],
            metrics=trained.outputs["metrics"],
            result_json=trained.outputs["result_json"],
        ).output

    seen = json.loads(pipe().output)
    assert seen["model_uri"] == "s3://bucket/models/rows-7/model"
    assert seen["loss_metric"] == seen["loss_result"]
    with TrainerClient(backend) as local:
        [job] = local.list_jobs()
    assert job.status is JobState.COMPLETE
    assert job.identity is not None
    assert job.identity.startswith("kfp/")


def test_timeouts_fail_the_task_and_stop_the_job(
    local_kfp: Path,
    backend: dict[str, Any],
    client: TrainerClient,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """No hard-coded limits: the task's ``timeout_seconds`` / ``startup_timeout_seconds``
    decide, and a job the task gives up on is stopped (``on_cancel``)."""
    launch = trainjob_launcher(backend_config=backend, component_image=HERE)
    fit = CustomTrainer("def fit():\n    return 1\n")
    never = TrainJobSpec(trainer=fit, options=[with_scenario("never-finish")])
    with pytest.raises(RuntimeError):
        launch(spec=never, timeout_seconds=1, pipeline_run_id="r", pipeline_task_name="t")
    out = capsys.readouterr().out
    assert "TrainJobTimeoutError" in out
    assert "did not reach Complete within 1s" in out
    assert "[kf-trainer] timed out: stopped" in out
    assert client.list_jobs() == []

    stuck = TrainJobSpec(trainer=fit, options=[with_scenario("image-pull")])
    with pytest.raises(RuntimeError):
        launch(
            spec=stuck,
            startup_timeout_seconds=1,
            on_cancel="keep",
            pipeline_run_id="r",
            pipeline_task_name="t2",
        )
    out = capsys.readouterr().out
    assert "did not start within 1s" in out
    assert "ImagePullBackOff" in out or "ErrImagePull" in out
    [kept] = client.list_jobs()  # on_cancel="keep": left for inspection
    assert kept.status is JobState.CREATED


@pytest.mark.parametrize("on_cancel", ["keep", "delete"])
def test_a_job_too_big_for_any_node_is_explained_as_everywhere(
    local_kfp: Path,
    backend: dict[str, Any],
    client: TrainerClient,
    capsys: pytest.CaptureFixture[str],
    on_cancel: str,
) -> None:
    """A timeout says what holds the job up in the core's words (the CLI's, the
    client's), one fix for its class, and what the task did with the job."""
    launch = trainjob_launcher(backend_config=backend, component_image=HERE)
    big = TrainJobSpec(
        trainer=CustomTrainer("def fit():\n    return 1\n", resources_per_node={"gpu": 16})
    )
    with pytest.raises(RuntimeError):
        launch(
            spec=big,
            timeout_seconds=2,
            on_cancel=on_cancel,
            pipeline_run_id="r",
            pipeline_task_name=f"big-{on_cancel}",
        )
    out = capsys.readouterr().out
    pending = "Pending: step node-0 cannot be scheduled: 0/4 nodes can give it 16 nvidia.com/gpu (each has fewer in all or fewer unused)"
    assert f"did not reach Complete within 2s; it is {pending}" in out
    assert "failure class: capacity" in out
    assert "fix: make the job fit: " in out
    assert "retry will not help" not in out
    summary = next(local_kfp.rglob("launch-trainjob/summary")).read_text()
    assert ": Pending" in summary
    assert (
        "0/4 nodes can give it 16 nvidia.com/gpu (each has fewer in all or fewer unused)" in summary
    )
    assert "make the job fit" in summary
    assert "### Failure" not in summary  # said once, as what holds the job up
    if on_cancel == "keep":
        [kept] = client.list_jobs()
        assert f"left behind: TrainJob default/{kept.name} still exists (Pending)" in out
        client.delete_job(kept.name)
    else:
        assert "left behind:" not in out
        assert "cleaned up: TrainJob " in out
        assert client.list_jobs() == []
