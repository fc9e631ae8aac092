"""The container backend's configuration and the pieces that need no engine."""

from __future__ import annotations

from typing import Any

import pytest

from kf_trainer_core.backends.local.container.engine import (
    EngineUnavailable,
    _split,
    candidates,
    connect,
)
from kf_trainer_core.backends.local.container.runner import _limits
from kf_trainer_core.backends.local.transport import container_settings
from kf_trainer_core.config import (
    ContainerConfig,
    KubernetesConfig,
    LocalConfig,
    parse_backend,
)
from kf_trainer_core.errors import SpecError


def test_parse_backend_picks_the_model_by_its_backend_key() -> None:
    assert isinstance(parse_backend({}), KubernetesConfig)
    assert type(parse_backend({"backend": "local"})) is LocalConfig
    config = parse_backend('{"backend": "container", "image": "img:1", "pull_policy": "Never"}')
    assert isinstance(config, ContainerConfig)
    assert isinstance(config, LocalConfig)  # every local-config path takes it
    assert (config.image, config.pull_policy, config.auto_remove) == ("img:1", "Never", True)
    with pytest.raises(ValueError, match=r"backend 'podman' is unknown\. Fix: use one of"):
        parse_backend({"backend": "podman"})


def test_container_config_refuses_bad_fields_with_a_fix() -> None:
    with pytest.raises(SpecError, match=r"mounts: mount 'data' is not HOST:CONTAINER"):
        ContainerConfig(mounts=["data"])
    with pytest.raises(SpecError, match="mode 'rx'"):
        ContainerConfig(mounts=["/a:/b:rx"])
    with pytest.raises(SpecError, match="use_venv applies to the local backend only"):
        ContainerConfig(use_venv=True)
    with pytest.raises(SpecError, match=r"pull_polcy: unknown field.*pull_policy"):
        ContainerConfig.parse({"pull_polcy": "Never"})
    assert ContainerConfig(mounts=["/data:/data:ro"]).mounts == ["/data:/data:ro"]
    assert "hunter2" not in repr(ContainerConfig(env={"WANDB_API_KEY": "hunter2"}))


def test_only_a_container_config_gives_container_settings() -> None:
    assert container_settings(LocalConfig()) is None
    settings = container_settings(ContainerConfig(image="img", env={"A": "1"}, state_dir="/s"))
    assert settings is not None
    assert settings["image"] == "img"
    assert settings["env"] == {"A": "1"}
    assert "state_dir" not in settings  # the plan carries only what the runner needs


def test_engine_addresses_in_order() -> None:
    env = {"DOCKER_HOST": "tcp://127.0.0.1:2375", "XDG_RUNTIME_DIR": "/run/user/7"}
    auto = candidates("auto", None, env)
    assert auto[0] == "tcp://127.0.0.1:2375"
    assert auto.index("unix:///var/run/docker.sock") < auto.index(
        "unix:///run/user/7/podman/podman.sock"
    )
    assert all("docker" not in a for a in candidates("podman", None, env))
    assert candidates("docker", "unix:///x.sock", env) == ["unix:///x.sock"]


def test_no_engine_names_every_address_tried() -> None:
    with pytest.raises(EngineUnavailable) as err:
        connect("podman", environ={"XDG_RUNTIME_DIR": "/nonexistent"})
    text = str(err.value)
    assert "unix:///nonexistent/podman/podman.sock (no such socket)" in text
    assert "Fix:" in text


def test_image_names_split_into_repository_and_tag() -> None:
    assert _split("img") == ("img", "latest")
    assert _split("img:1.2") == ("img", "1.2")
    assert _split("registry:5000/team/img") == ("registry:5000/team/img", "latest")
    assert _split("registry:5000/team/img:3") == ("registry:5000/team/img", "3")
    assert _split("img@sha256:abc") == ("img@sha256:abc", None)


def test_resources_become_engine_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    from kf_trainer_core.backends.local import machine

    monkeypatch.setattr(
        machine, "available", lambda: {"cpu": 8.0, "memory": 2.0**35, "nvidia.com/gpu": 0.0}
    )

    def request(**kw: Any) -> dict[str, Any]:
        return kw

    limits = _limits({"limits": {"cpu": "1500m", "memory": "2Gi", "nvidia.com/gpu": 4}}, request)
    assert limits == {"nano_cpus": 1_500_000_000, "mem_limit": 2 * 2**30}  # no GPU given
    assert _limits({"requests": {"cpu": 64}}, request) == {"nano_cpus": 8_000_000_000}
    # The node's own GPUs, by id (the kubelet shared them out).
    limits = _limits({"limits": {"nvidia.com/gpu": 2}}, request, ["2", "3"])
    assert limits["device_requests"] == [{"device_ids": ["2", "3"], "capabilities": [["gpu"]]}]
