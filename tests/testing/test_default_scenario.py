"""The test server's default runs the job's training function (issue 35, item 4): it
answered a canned ``{'epochs': 3, 'loss': 0.1289}``, so a user's own assertion on their
function's value failed. Where the function cannot run on this machine (an image's own
command, packages to install), the job is simulated and its log says so loudly; a
scenario chosen by name behaves as it always did.

The suite's own tests run with ``kf_trainer_default_scenario = "success"`` (pyproject);
these tests switch the server to the users' default, ``default``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kf_trainer_core.client import TrainerClient
from kf_trainer_core.config import KubernetesConfig
from kf_trainer_core.spec import (
    Annotations,
    CustomTrainer,
    CustomTrainerContainer,
    TrainerArgs,
    TrainerCommand,
    TrainJobSpec,
)
from kf_trainer_core.testing.scenarios import (
    DEFAULT_PRESET,
    SCENARIO_ANNOTATION,
    SIMULATED_RESULT,
    Scenario,
)
from kf_trainer_core.testing.server import KubeTestServer

NOT_RUN = "[kf-trainer test bed] this container was simulated, not run"


def train(lr: float = 0.1) -> dict[str, float]:
    print(f"training with lr={lr}", flush=True)
    return {"loss": round(1 - lr, 3), "lr": lr}


@pytest.fixture
def users_default(kube: KubeTestServer) -> Iterator[KubeTestServer]:
    before = kube.controller.default_preset
    kube.controller.default_preset = DEFAULT_PRESET
    try:
        yield kube
    finally:
        kube.controller.default_preset = before
        kube.controller.reset()


@pytest.fixture
def client(users_default: KubeTestServer, kubeconfig_path: Path) -> Iterator[TrainerClient]:
    with TrainerClient(KubernetesConfig(kubeconfig=str(kubeconfig_path), poll_interval=0.1)) as c:
        yield c


def test_a_server_made_plainly_runs_the_function_by_default() -> None:
    server = KubeTestServer()
    assert server.controller.default_preset == DEFAULT_PRESET
    assert server.controller.default_scenario.executor == "function"
    assert KubeTestServer(default_scenario="success").controller.default_preset == "success"
    with pytest.raises(ValueError, match="unknown scenario preset"):
        server.controller.default_preset = "no-such-preset"


def test_the_function_runs_and_its_value_comes_back(client: TrainerClient) -> None:
    spec = TrainJobSpec(trainer=CustomTrainer(train, func_args={"lr": 0.25}))
    out = client.run(spec, name="runs-for-real", timeout=120)
    assert out.result == {"loss": 0.75, "lr": 0.25}
    assert out.result_missing is None
    log = "\n".join(client.get_job_logs("runs-for-real"))
    assert "training with lr=0.25" in log
    assert NOT_RUN not in log


def test_a_container_it_cannot_run_is_simulated_and_says_so(client: TrainerClient) -> None:
    spec = TrainJobSpec(
        trainer=CustomTrainerContainer(image="busybox"),
        options=[TrainerCommand(["sh", "-c"]), TrainerArgs(["echo hi"])],
    )
    out = client.run(spec, name="an-image", timeout=120)
    assert out.status.value == "Complete"
    assert out.result is None  # no canned value that looks like a result
    first = next(iter(client.get_job_logs("an-image")))
    assert first.startswith(NOT_RUN)
    assert "it runs a command of its image" in first


def test_a_function_with_packages_is_not_installed_here(client: TrainerClient) -> None:
    spec = TrainJobSpec(
        trainer=CustomTrainer(train, packages_to_install=["definitely-not-a-package-35"])
    )
    out = client.run(spec, name="with-packages", timeout=120)
    assert out.status.value == "Complete"
    assert out.result is None
    log = "\n".join(client.get_job_logs("with-packages"))
    assert "its packages_to_install would be installed on this machine" in log
    assert "pip install failed" not in log


def test_a_scenario_chosen_by_name_behaves_as_before(client: TrainerClient) -> None:
    spec = TrainJobSpec(
        trainer=CustomTrainer(train),
        options=[Annotations({SCENARIO_ANNOTATION: "success"})],
    )
    out = client.run(spec, name="canned", timeout=120)
    assert out.result == {"epochs": 3, "loss": 0.1289}
    assert Scenario.preset("success").termination_message == SIMULATED_RESULT
