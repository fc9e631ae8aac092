"""A finished job's success is never turned into an error by node-0's log — proven on
the real control plane, whose kwok nodes serve no logs and write no termination message
(issue 23, item 4), and the CLI's ``run`` and ``jobs wait`` there (item 5)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from train_functions import train_linear

from kf_trainer_core.client import AsyncTrainerClient, TrainerClient
from kf_trainer_core.cluster.status import JobState
from kf_trainer_core.config import KubernetesConfig
from kf_trainer_core.errors import InfrastructureFailure, TrainJobResultUnreachableError
from kf_trainer_core.k8s.calls import ReadLog
from kf_trainer_core.spec import CustomTrainer, TrainJobSpec
from kf_trainer_core.testing import kwok
from kf_trainer_core.testing.control_plane import ControlPlane

pytestmark = pytest.mark.control_plane

RESULT = {"loss": 0.25, "w": 2.9}


def spec(*options: Any, nodes: int = 2) -> TrainJobSpec:
    return TrainJobSpec(
        runtime="torch-distributed",
        trainer=CustomTrainer(train_linear, num_nodes=nodes),
        options=list(options),
    )


@pytest.fixture
def config(control_plane: ControlPlane, control_plane_kubeconfig: Path) -> KubernetesConfig:
    control_plane.require_controllers()
    return KubernetesConfig(kubeconfig=str(control_plane_kubeconfig))


@pytest.fixture
def calls() -> list[Any]:
    return []


@pytest.fixture
def client(config: KubernetesConfig, calls: list[Any]) -> Any:
    with TrainerClient(config, request_hook=calls.append) as c:
        yield c


def test_wait_run_and_outputs_of_a_log_less_job(client: TrainerClient, calls: list[Any]) -> None:
    name = client.submit(spec()).job.name
    job, result = client.wait(name, timeout=120)
    assert job.status is JobState.COMPLETE
    assert [s.status for s in job.steps] == ["Succeeded", "Succeeded"]
    assert result is None
    out = client.run(spec(), timeout=120)  # the same job, adopted
    assert out.name == name
    assert out.status is JobState.COMPLETE
    missing = out.result_missing
    assert missing is not None
    assert missing.cause == "log-unreadable"
    # What the real apiserver says when it cannot reach the node's kubelet.
    assert ":10250/containerLogs/" in missing.message
    assert "connection refused" in missing.message
    assert client.get_job_outputs(name).result_missing == missing
    assert client.get_job(name, log_progress=True).status is JobState.COMPLETE
    with pytest.raises(TrainJobResultUnreachableError) as caught:
        out.require_result()
    assert isinstance(caught.value, InfrastructureFailure)
    # A refused kubelet is asked twice per read, not for the retry policy's seconds.
    per_read = [c for c in calls if isinstance(c, ReadLog)]
    assert 0 < len(per_read) <= 2 * 4


async def test_concurrent_async_waits(config: KubernetesConfig) -> None:
    async with AsyncTrainerClient(config) as aclient:
        name = (await aclient.submit(spec())).job.name
        done = await asyncio.gather(*(aclient.wait(name, timeout=120) for _ in range(5)))
        assert [job.status for job, _ in done] == [JobState.COMPLETE] * 5
        out = await aclient.wait_outputs(name, timeout=120)
        assert out.result_missing is not None


def test_the_termination_message_carries_the_result(
    client: TrainerClient, calls: list[Any]
) -> None:
    out = client.run(spec(kwok.termination_message(json.dumps(RESULT))), timeout=120)
    assert out.status is JobState.COMPLETE
    assert out.result == RESULT
    assert out.result_missing is None
    assert out.require_result() == RESULT
    assert not [c for c in calls if isinstance(c, ReadLog)]  # no log was needed


def _spec_file(tmp_path: Path, *options: Any) -> str:
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec(*options).model_dump(mode="json", exclude_none=True)))
    return str(path)


def test_cli_run_and_jobs_wait(
    control_plane_kubeconfig: Path,
    config: KubernetesConfig,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from kf_trainer_core.cli import main

    where = ["--kubeconfig", str(control_plane_kubeconfig)]

    def cli(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = main([*args])
        got = capsys.readouterr()
        return code, got.out, got.err

    with_result = _spec_file(tmp_path, kwok.termination_message(json.dumps(RESULT)))
    code, out, err = cli("run", with_result, "--quiet", *where)
    assert code == 0, err
    assert "Complete in" in out
    assert f"result: {json.dumps(RESULT)}" in out

    log_less = tmp_path / "log-less"
    log_less.mkdir()
    code, out, err = cli("run", _spec_file(log_less), "--quiet", *where)
    assert code == 0, err  # the job succeeded: so does the command
    assert "result: unavailable" in out
    assert "connection refused" in err
    name = out.split(":", 1)[0].rsplit("/", 1)[-1]

    code, out, err = cli("jobs", "wait", name, *where)
    assert code == 0, err
    assert "result: unavailable" in out
    code, out, err = cli("jobs", "get", name, *where)
    assert code == 0, err
    assert "Result:  unavailable:" in out
