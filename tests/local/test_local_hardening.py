"""The local backend keeps to its state directory, runs nothing it was not meant to,
and refuses bad client arguments before anything is created (issue 14)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kf_trainer_core.backends.local._common import Paths
from kf_trainer_core.client import AsyncTrainerClient, TrainerClient
from kf_trainer_core.config import LocalConfig
from kf_trainer_core.errors import SpecError
from kf_trainer_core.spec import CustomTrainer, TrainJobSpec


def trivial() -> int:
    return 7


def _jobs_created(client: TrainerClient) -> int:
    # Nothing submitted: the state directory was not even created (reads never do).
    state = Path(str(client.config.state_dir))
    return 0 if not state.exists() else len(client.list_jobs())


@pytest.mark.parametrize("namespace", ["../../x", "..", "Team_A", "a/b"])
def test_a_namespace_that_would_leave_the_state_dir_is_refused(
    state_dir: Path, namespace: str
) -> None:
    with pytest.raises(SpecError, match="namespace"):
        LocalConfig(state_dir=str(state_dir), namespace=namespace)
    with pytest.raises(SpecError, match="namespace"):
        TrainerClient(LocalConfig(state_dir=str(state_dir)), namespace=namespace)
    with pytest.raises(SpecError, match="namespace"):
        TrainerClient({"backend": "local", "state_dir": str(state_dir), "namespace": namespace})
    assert not (state_dir.parent.parent / "x").exists()


@pytest.mark.parametrize(
    "parts", [("..", "pod"), ("../../x", "pod"), ("ns", "../up"), ("ns", "a/b"), ("", "pod")]
)
def test_paths_never_leave_the_root(tmp_path: Path, parts: tuple[str, str]) -> None:
    paths = Paths(tmp_path / "state")
    with pytest.raises(ValueError, match="state directory"):
        paths.log_dir(*parts)
    with pytest.raises(ValueError, match="state directory"):
        paths.workspace(parts[0], parts[1], "0123456789")
    with pytest.raises(ValueError, match="state directory"):
        paths.run_dir("..")
    with pytest.raises(ValueError, match="state directory"):
        paths.lock("../x")


def test_a_symlink_out_of_the_root_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "state"
    (root / "logs").mkdir(parents=True)
    (root / "logs" / "ns").symlink_to(tmp_path)
    with pytest.raises(ValueError, match="leaves"):
        Paths(root).log_dir("ns", "pod")


def test_bad_client_arguments_fail_before_anything_is_created(client: TrainerClient) -> None:
    spec = TrainJobSpec(trainer=CustomTrainer(trivial))
    with pytest.raises(SpecError, match="spec"):
        client.submit(None)  # type: ignore[arg-type]
    with pytest.raises(SpecError, match="identity"):
        client.submit(spec, identity={"dag": "d"})  # type: ignore[arg-type]
    with pytest.raises(SpecError, match="identity"):
        client.submit(spec, identity=("d", {"x": 1}))  # type: ignore[arg-type]
    with pytest.raises(SpecError, match=r"timeout.*timeout=60"):
        client.run(spec, timeout="60")  # type: ignore[arg-type]
    with pytest.raises(SpecError, match="timeout=None"):
        client.run(spec, timeout=-5)
    with pytest.raises(SpecError, match="log_step"):
        client.run(spec, log_step="worker")
    with pytest.raises(SpecError, match="get_job"):
        client.get_job_logs("x", step="worker")
    with pytest.raises(SpecError, match="tail"):
        client.get_job_logs("x", tail=-1)
    with pytest.raises(SpecError, match="log_tail"):
        client.run(spec, log_tail=-1)
    with pytest.raises(SpecError, match="timeout"):
        client.wait("x", timeout="60")  # type: ignore[arg-type]
    with pytest.raises(SpecError, match="polling_interval"):
        client.wait("x", polling_interval=0)
    assert _jobs_created(client) == 0


async def test_bad_arguments_fail_the_same_on_the_async_client(
    aclient: AsyncTrainerClient,
) -> None:
    spec = TrainJobSpec(trainer=CustomTrainer(trivial))
    with pytest.raises(SpecError, match="spec"):
        await aclient.submit(None)  # type: ignore[arg-type]
    with pytest.raises(SpecError, match="timeout"):
        await aclient.run(spec, timeout=-5)
    with pytest.raises(SpecError, match="timeout"):
        await aclient.wait("x", timeout="60")  # type: ignore[arg-type]
    with pytest.raises(SpecError, match="step"):
        async for _ in aclient.get_job_logs("x", step="worker"):
            pass
    assert not Path(str(aclient.config.state_dir)).exists()  # nothing was created


def test_a_string_backend_says_which_config_to_pass() -> None:
    with pytest.raises(SpecError, match=r"LocalConfig\(\)"):
        TrainerClient("local")  # type: ignore[arg-type]


def test_an_embed_false_name_with_a_dash_fails_before_submission(client: TrainerClient) -> None:
    with pytest.raises(SpecError, match="my_train"):
        client.train(
            trainer=CustomTrainer({"ref": "os.path:join", "name": "my-train", "embed": False})
        )
    assert _jobs_created(client) == 0


def test_logs_of_a_step_a_finished_job_never_had_name_its_steps(client: TrainerClient) -> None:
    name = client.train(trainer=CustomTrainer(trivial))
    client.wait(name, timeout=60)
    assert client.get_job_logs(name, step="node-0") is not None
    for missing in ("node-3", "dataset-initializer"):
        with pytest.raises(SpecError, match=r"its steps are node-0\."):
            list(client.get_job_logs(name, step=missing))
