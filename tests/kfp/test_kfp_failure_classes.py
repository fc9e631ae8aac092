"""Failure classes in Kubeflow Pipelines: a failed TrainJob component exits with its
class's code (so an exit handler or a retry policy can tell them apart) and says the
class in its log and summary; a queued job's log says why it waits."""

# No `from __future__ import annotations`: KFP reads pipeline annotations as objects.
import json
from pathlib import Path
from typing import Any

import pytest
from kfp import dsl

from kf_trainer_core.client import TrainerClient
from kf_trainer_core.cluster.failures import EXIT_CODES
from kf_trainer_core.cluster.kueue import QUEUE_NAME_LABEL
from kf_trainer_core.cluster.status import Failure
from kf_trainer_core.errors import FailureClass, SpecError, failed_error
from kf_trainer_core.spec import (
    Annotations,
    CustomTrainer,
    HuggingFaceDatasetInitializer,
    Initializer,
    Labels,
    TrainJobSpec,
)
from kf_trainer_core.testing.scenarios import SCENARIO_ANNOTATION
from kf_trainer_core.testing.server import KubeTestServer
from kf_trainer_kfp import ComponentImage, step_components, trainjob_launcher
from kf_trainer_kfp.task import _classified

HERE = ComponentImage.current_environment()


@pytest.mark.parametrize(
    ("klass", "code"),
    [
        (FailureClass.INFRASTRUCTURE, 75),
        (FailureClass.CAPACITY, 69),
        (FailureClass.CONFIGURATION, 78),
        (FailureClass.USER_CODE, 70),
    ],
)
def test_each_class_has_its_exit_code(
    klass: FailureClass, code: int, capsys: pytest.CaptureFixture[str]
) -> None:
    failure = Failure(reason="FailedJobs", failure_class=klass, classified_by="evidence")

    def fail() -> None:
        raise failed_error(None, failure)

    with pytest.raises(SystemExit) as ended:
        _classified(fail)
    assert ended.value.code == code == EXIT_CODES[klass]
    out = capsys.readouterr().out
    assert f"failure class: {klass.value}; exiting with code {code}" in out
    assert "TrainJobFailedError" in out


def test_unknown_class_keeps_the_plain_error() -> None:
    def fail() -> None:
        raise failed_error(None, Failure(reason="Mystery"))

    with pytest.raises(Exception, match="Mystery"):
        _classified(fail)


def test_evicted_job_exits_as_infrastructure(
    local_kfp: Path, backend: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    launch = trainjob_launcher(backend_config=backend, component_image=HERE)
    evicted = TrainJobSpec(
        trainer=CustomTrainer("def fit():\n    return 1\n"),
        options=[Annotations({SCENARIO_ANNOTATION: "evicted"})],
    )

    @dsl.pipeline
    def pipe() -> None:
        launch(spec=evicted)

    with pytest.raises(RuntimeError):
        pipe()
    out = capsys.readouterr().out
    assert "failure class: infrastructure; exiting with code 75" in out
    assert "Evicted" in out
    summary = next(local_kfp.rglob("launch-trainjob/summary")).read_text()
    assert "- **Failure class:** `infrastructure`" in summary


@pytest.mark.usefixtures("local_kfp")
@pytest.mark.parametrize("part", ["launch", "submit"])
def test_a_submit_refused_for_its_configuration_exits_as_configuration(
    backend: dict[str, Any], part: str, capfd: pytest.CaptureFixture[str]
) -> None:
    """A runtime the cluster lacks is a configuration failure (``failure_class_of``),
    though no job exists: the component exits with that class's code, as for a job
    that cannot run (it exited 1, the code of an unknown failure)."""
    refused = TrainJobSpec(runtime="no-such-runtime", trainer=CustomTrainer("def f():\n    pass\n"))
    steps = step_components(backend_config=backend, component_image=HERE)
    component = {"launch": trainjob_launcher(backend_config=backend, component_image=HERE)}
    with pytest.raises(RuntimeError):
        component.get(part, steps.submit)(spec=refused)
    out = capfd.readouterr().out
    assert "ClusterTrainingRuntime 'no-such-runtime' does not exist" in out
    assert (
        f"failure class: configuration; exiting with code {EXIT_CODES[FailureClass.CONFIGURATION]}"
        in out
    )


def queued_behind_a_blocker(server: KubeTestServer, client: TrainerClient) -> TrainJobSpec:
    """A queue of 4 GPUs held by a running job, and a spec of 4 more GPUs for it."""
    sim = server.install_kueue()
    sim.add_cluster_queue("gpus", {"nvidia.com/gpu": 4})
    sim.add_local_queue("default", "team-a", "gpus")
    blocker = TrainJobSpec(
        trainer=CustomTrainer("def fit():\n    return 1\n", resources_per_node={"gpu": 4}),
        options=[
            Labels({QUEUE_NAME_LABEL: "team-a"}),
            Annotations({SCENARIO_ANNOTATION: "never-finish"}),
        ],
    )
    client.wait(client.submit(blocker).job.name, "Running", timeout=30)
    return TrainJobSpec(
        trainer=CustomTrainer("def fit():\n    return 1\n", resources_per_node={"gpu": 4}),
        options=[Labels({QUEUE_NAME_LABEL: "team-a"})],
    )


def test_admission_timeout_fails_a_queued_job_as_capacity(
    local_kfp: Path,
    backend: dict[str, Any],
    server: KubeTestServer,
    client: TrainerClient,
    capsys: pytest.CaptureFixture[str],
) -> None:
    queued = queued_behind_a_blocker(server, client)
    launch = trainjob_launcher(backend_config=backend, component_image=HERE, on_cancel="keep")

    @dsl.pipeline
    def pipe() -> None:
        launch(spec=queued, admission_timeout_seconds=1.5)

    with pytest.raises(RuntimeError):
        pipe()
    out = capsys.readouterr().out
    assert "was not admitted by Kueue (queue team-a) within 1.5s" in out
    assert "insufficient unused quota for nvidia.com/gpu" in out
    assert f"failure class: capacity; exiting with code {EXIT_CODES[FailureClass.CAPACITY]}" in out


@pytest.mark.parametrize("on_cancel", ["keep", "delete"])
def test_a_job_kueue_can_never_admit_fails_at_once_as_capacity(
    local_kfp: Path,
    backend: dict[str, Any],
    server: KubeTestServer,
    client: TrainerClient,
    capsys: pytest.CaptureFixture[str],
    on_cancel: str,
) -> None:
    sim = server.install_kueue()
    sim.add_cluster_queue("gpus", {"nvidia.com/gpu": 4})
    sim.add_local_queue("default", "team-a", "gpus")
    launch = trainjob_launcher(backend_config=backend, component_image=HERE, on_cancel=on_cancel)
    never = TrainJobSpec(
        trainer=CustomTrainer(
            "def fit():\n    return 1\n", num_nodes=2, resources_per_node={"gpu": 4}
        ),
        options=[Labels({QUEUE_NAME_LABEL: "team-a"})],
    )

    @dsl.pipeline
    def pipe() -> None:
        launch(spec=never)  # no admission timeout: it must not wait for one

    with pytest.raises(RuntimeError):
        pipe()
    out = capsys.readouterr().out
    assert "can never be admitted by Kueue" in out
    assert "pod set node asks for 8 nvidia.com/gpu, more than the maximum capacity of 4" in out
    assert f"failure class: capacity; exiting with code {EXIT_CODES[FailureClass.CAPACITY]}" in out
    summary = next(local_kfp.rglob("launch-trainjob/summary")).read_text()
    assert "ExceedsMaxQuota" in summary
    # Given up on as a timed-out job is: on_cancel says what becomes of it.
    left = [j.status.value for j in client.list_jobs()]
    assert left == (["Suspended"] if on_cancel == "keep" else [])
    # The task's log says what it did to the job (the core's clean-up, on_cancel).
    assert ("Kueue can never admit it: stopped" in out) is (on_cancel == "delete")


def test_step_wait_takes_the_admission_timeout(
    local_kfp: Path,
    backend: dict[str, Any],
    server: KubeTestServer,
    client: TrainerClient,
    capsys: pytest.CaptureFixture[str],
) -> None:
    queued = queued_behind_a_blocker(server, client)
    name = client.submit(queued, identity="kfp/admission").job.name
    steps = step_components(backend_config=backend, component_image=HERE, on_cancel="keep")
    with pytest.raises(RuntimeError):
        steps.wait_for_step(job_name=name, step="trainer", admission_timeout_seconds=1.5)
    out = capsys.readouterr().out
    assert "was not admitted by Kueue (queue team-a) within 1.5s" in out
    assert "failure class: capacity" in out


def test_step_wait_of_a_job_kueue_can_never_admit_fails_at_once(
    local_kfp: Path,
    backend: dict[str, Any],
    server: KubeTestServer,
    client: TrainerClient,
    capsys: pytest.CaptureFixture[str],
) -> None:
    sim = server.install_kueue()
    sim.add_cluster_queue("gpus", {"nvidia.com/gpu": 4})
    sim.add_local_queue("default", "team-a", "gpus")
    never = TrainJobSpec(
        trainer=CustomTrainer("def fit():\n    return 1\n", resources_per_node={"gpu": 8}),
        options=[Labels({QUEUE_NAME_LABEL: "team-a"})],
    )
    name = client.submit(never, identity="kfp/never").job.name
    steps = step_components(backend_config=backend, component_image=HERE, on_cancel="keep")
    with pytest.raises(RuntimeError):
        steps.wait_for_step(job_name=name, step="trainer")
    out = capsys.readouterr().out
    assert "can never be admitted by Kueue" in out
    assert "failure class: capacity" in out


@pytest.mark.usefixtures("local_kfp")
@pytest.mark.parametrize("step", ["initializer", "dataset-initializer"])
def test_step_wait_of_an_initializer_that_cannot_start_ends_at_its_startup_timeout(
    backend: dict[str, Any], client: TrainerClient, step: str, capfd: pytest.CaptureFixture[str]
) -> None:
    """``startup_timeout_seconds`` of ``wait_for_step`` holds for every step, as the
    launcher's does for the job: an initializer whose pod never starts ends the
    wait once it runs out, saying what holds the job up (it was ignored for initializer
    steps, which then waited until ``timeout_seconds``)."""
    stuck = TrainJobSpec(
        runtime="torch-distributed-with-cache",
        trainer=CustomTrainer("def fit():\n    return 1\n"),
        initializer=Initializer(dataset=HuggingFaceDatasetInitializer(storage_uri="hf://a/b")),
        options=[
            Annotations(
                {
                    SCENARIO_ANNOTATION: json.dumps(
                        {"steps": {"dataset-initializer": {"pending_delay": 600}}}
                    )
                }
            )
        ],
    )
    name = client.submit(stuck, identity=f"kfp/stuck-{step}").job.name
    steps = step_components(backend_config=backend, component_image=HERE, on_cancel="keep")
    with pytest.raises(RuntimeError):
        steps.wait_for_step(
            job_name=name, step=step, startup_timeout_seconds=1.5, timeout_seconds=60.0
        )
    assert f"TrainJob {name} did not start within 1.5s" in capfd.readouterr().out


def test_a_negative_admission_timeout_fails_when_the_pipeline_is_defined() -> None:
    with pytest.raises(SpecError, match="admission_timeout_seconds"):
        trainjob_launcher(admission_timeout_seconds=-1)
