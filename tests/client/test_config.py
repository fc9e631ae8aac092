"""Ways to reach a cluster, where the namespace comes from, and secrets kept out of
sight."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from pydantic import SecretStr

from kf_trainer_core.client import AsyncTrainerClient, TrainerClient
from kf_trainer_core.config import KubernetesConfig, LocalConfig
from kf_trainer_core.errors import SpecError
from kf_trainer_core.testing.server import KubeTestServer


def test_explicit_host_and_token(kube: KubeTestServer) -> None:
    kube.require_token({"s3cr3t-token"})
    try:
        cfg = KubernetesConfig(host=kube.url, token=SecretStr("s3cr3t-token"), namespace="default")
        with TrainerClient(cfg) as client:
            assert client.list_runtimes()
        assert "s3cr3t-token" not in repr(cfg)
        assert "s3cr3t-token" not in str(cfg.model_dump())
        assert "s3cr3t-token" not in cfg.model_dump_json()
        assert "s3cr3t-token" not in cfg.cache_key()
    finally:
        kube.require_token(None)


async def test_inline_kubeconfig_async(kube: KubeTestServer, kubeconfig_path: Path) -> None:
    content = kubeconfig_path.read_text()
    cfg = KubernetesConfig(kubeconfig_content=content)
    async with AsyncTrainerClient(cfg) as client:
        assert await client.list_runtimes()
    assert "clusters" not in repr(cfg)


def test_namespace_resolution(kube: KubeTestServer, tmp_path: Path) -> None:
    path = kube.kubeconfig(tmp_path / "kc", namespace="team-a")
    assert KubernetesConfig(kubeconfig=str(path)).resolve_namespace() == "team-a"
    assert (
        KubernetesConfig(kubeconfig=str(path), namespace="team-b").resolve_namespace() == "team-b"
    )
    assert TrainerClient(KubernetesConfig(kubeconfig=str(path))).namespace == "team-a"
    data = yaml.safe_load(path.read_text())
    for ctx in data["contexts"]:
        ctx["context"].pop("namespace", None)
    path.write_text(yaml.safe_dump(data))
    assert KubernetesConfig(kubeconfig=str(path)).resolve_namespace() == "default"
    assert KubernetesConfig(host="http://x").resolve_namespace() == "default"


def test_config_validation() -> None:
    with pytest.raises(SpecError, match="a token needs a host"):
        KubernetesConfig(token=SecretStr("x"))
    with pytest.raises(SpecError, match="in_cluster"):
        KubernetesConfig(in_cluster=True, host="http://x")
    assert KubernetesConfig(in_cluster=True).mode() == "in-cluster"
    assert KubernetesConfig(host="http://x").mode() == "explicit"


def test_backend_config_from_plain_dicts(kubeconfig_path: Path, tmp_path: Path) -> None:
    client = TrainerClient({"backend": "kubernetes", "kubeconfig": str(kubeconfig_path)})
    assert isinstance(client.config, KubernetesConfig)
    assert LocalConfig.parse({"backend": "local", "state_dir": str(tmp_path)}).state_dir == str(
        tmp_path
    )


def test_kubeconfig_context_is_honoured(kube: KubeTestServer, tmp_path: Path) -> None:
    path = kube.kubeconfig(tmp_path / "kc", namespace="team-a")
    data = yaml.safe_load(path.read_text())
    # A second context pointing nowhere, made current: only the named context works.
    data["clusters"].append({"name": "nowhere", "cluster": {"server": "http://127.0.0.1:9"}})
    data["contexts"].append(
        {"name": "broken", "context": {"cluster": "nowhere", "user": data["users"][0]["name"]}}
    )
    good = data["current-context"]
    data["current-context"] = "broken"
    path.write_text(yaml.safe_dump(data))
    cfg = KubernetesConfig(kubeconfig=str(path), context=good)
    assert cfg.resolve_namespace() == "team-a"
    with TrainerClient(cfg) as client:
        assert client.list_runtimes()


def test_every_kubeconfig_file_of_the_env_is_merged(
    kube: KubeTestServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``KUBECONFIG=a:b`` is read as kubectl reads it: every file, the first to set a
    value winning (here the context and its namespace come from the first file, the
    cluster, user and current-context from the second; the second's own version of the
    context, and the current-context of a third, lose)."""
    full = yaml.safe_load(kube.kubeconfig(tmp_path / "full", namespace="team-b").read_text())
    (context,) = full["contexts"]
    first = {"apiVersion": "v1", "kind": "Config"}
    first["contexts"] = [{**context, "context": {**context["context"], "namespace": "team-a"}}]
    third = {**full, "current-context": "elsewhere", "clusters": [], "users": []}
    paths = []
    for i, doc in enumerate((first, full, third)):
        paths.append(tmp_path / f"kc{i}")
        paths[-1].write_text(yaml.safe_dump(doc))
    missing = tmp_path / "absent"
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join(str(p) for p in [missing, *paths]))
    cfg = KubernetesConfig()
    cfg.check_usable()
    assert cfg.resolve_namespace() == "team-a"
    with TrainerClient(cfg) as client:
        assert client.namespace == "team-a"
        assert client.list_runtimes()


async def test_every_kubeconfig_file_is_merged_async(
    kube: KubeTestServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The first file's current-context wins (the client libraries' own merge would
    # take the last one's, a context that exists nowhere).
    full = yaml.safe_load(kube.kubeconfig(tmp_path / "full").read_text())
    users_only = {"users": full.pop("users"), "current-context": "elsewhere"}
    (tmp_path / "a").write_text(yaml.safe_dump(full))
    (tmp_path / "b").write_text(yaml.safe_dump(users_only))
    monkeypatch.setenv("KUBECONFIG", f"{tmp_path / 'a'}{os.pathsep}{tmp_path / 'b'}")
    async with AsyncTrainerClient(KubernetesConfig()) as client:
        assert await client.list_runtimes()


def test_merged_kubeconfig_paths_stay_relative_to_their_file(tmp_path: Path) -> None:
    from kf_trainer_core.config import merge_kubeconfigs

    a, b = tmp_path / "a" / "config", tmp_path / "b" / "config"
    doc_a = {"clusters": [{"name": "c", "cluster": {"certificate-authority": "ca.crt"}}]}
    doc_b = {
        "clusters": [{"name": "c", "cluster": {"certificate-authority": "other.crt"}}],
        "users": [{"name": "u", "user": {"client-key": "k.pem", "exec": {"command": "./bin/x"}}}],
        "current-context": "ctx",
    }
    merged = merge_kubeconfigs([(a, doc_a), (b, doc_b)])
    assert merged["clusters"] == [
        {"name": "c", "cluster": {"certificate-authority": str(a.parent / "ca.crt")}}
    ]
    user = merged["users"][0]["user"]
    assert user["client-key"] == str(b.parent / "k.pem")
    assert user["exec"]["command"] == str(b.parent / "bin/x")
    assert merged["current-context"] == "ctx"
