"""Bad client input against the Kubernetes-API test server, over HTTP: each fails with
the field and the fix and sends no request; a kubeconfig's secrets never reach an
error (issue 14)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from train_functions import train_linear

from kf_trainer_core.client import AsyncTrainerClient, TrainerClient
from kf_trainer_core.config import KubernetesConfig
from kf_trainer_core.errors import SpecError
from kf_trainer_core.spec import CustomTrainer, TrainJobSpec
from kf_trainer_core.testing.server import KubeTestServer

SPEC = TrainJobSpec(trainer=CustomTrainer(train_linear))


def test_bad_arguments_send_no_request(client: TrainerClient, calls: list[Any]) -> None:
    name = client.submit(SPEC).job.name
    calls.clear()
    for call, field in [
        (lambda: client.wait(name, timeout="60"), "timeout"),
        (lambda: client.wait(name, timeout=-5), "timeout"),
        (lambda: client.wait(name, startup_timeout=float("nan")), "startup_timeout"),
        (lambda: client.get_job_logs(name, step="worker"), "step"),
        (lambda: client.run(SPEC, timeout="1h"), "timeout"),
        (lambda: client.submit(None), "spec"),
        (lambda: client.submit(SPEC, identity=["d", {"run": 1}]), "identity"),
        (lambda: client.build(SPEC, identity=""), "identity"),
    ]:
        with pytest.raises(SpecError) as info:
            call()
        assert info.value.fields == [field], info.value
        assert "Fix:" in str(info.value)
    assert calls == []


async def test_the_async_client_refuses_the_same(
    aclient: AsyncTrainerClient, calls: list[Any]
) -> None:
    with pytest.raises(SpecError, match="timeout"):
        await aclient.wait("x", timeout="60")  # type: ignore[arg-type]
    with pytest.raises(SpecError, match="spec"):
        await aclient.submit(None)  # type: ignore[arg-type]
    with pytest.raises(SpecError, match="log_step"):
        await aclient.run(SPEC, log_step="launcher")
    assert calls == []


def test_bad_cluster_settings_name_the_field(tmp_path: Path, kube: KubeTestServer) -> None:
    missing = tmp_path / "nonexistent"
    with pytest.raises(SpecError) as info:
        TrainerClient(KubernetesConfig(kubeconfig=str(missing)))
    assert str(missing) in str(info.value)
    with pytest.raises(SpecError) as info:
        AsyncTrainerClient(KubernetesConfig(kubeconfig=str(missing)))
    assert str(missing) in str(info.value)
    with pytest.raises(SpecError, match=r"https://localhost:1"):
        TrainerClient(KubernetesConfig(host="localhost:1"))
    with pytest.raises(SpecError, match=r"LocalConfig\(\)"):
        TrainerClient("local")  # type: ignore[arg-type]
    with pytest.raises(SpecError, match="team-a"):
        TrainerClient(KubernetesConfig(host=kube.url), namespace="Team_A")


async def test_a_context_namespace_is_checked_too(
    kube: KubeTestServer, kubeconfig_path: Path
) -> None:
    doc = yaml.safe_load(kubeconfig_path.read_text())
    doc["contexts"][0]["context"]["namespace"] = "Team_A"
    with pytest.raises(SpecError, match="namespace"):
        AsyncTrainerClient(KubernetesConfig(kubeconfig_content=yaml.safe_dump(doc)))


def test_a_kubeconfig_the_client_library_refuses_is_reported_without_its_token(
    kube: KubeTestServer, kubeconfig_path: Path
) -> None:
    secret = "tok-3f9a8b7c6d5e4f3a2b1c"
    doc = yaml.safe_load(kubeconfig_path.read_text())
    doc["users"][0]["user"] = {"token": secret}
    cfg = KubernetesConfig(kubeconfig_content=yaml.safe_dump(doc), context="no-such-context")
    with pytest.raises(SpecError) as info:
        TrainerClient(cfg)
    assert secret not in str(info.value)
    assert info.value.fields == ["kubeconfig_content"]
    assert "no-such-context" in str(info.value)
