"""KubeflowTrainerHook: connections of type ``kubeflow_trainer`` and ``kubernetes`` into
backend configs, clients over HTTP, and secrets kept out of reprs and logs."""

from __future__ import annotations

import json
import traceback
from pathlib import Path
from typing import Any

import pytest
import yaml
from airflow.sdk import Connection
from airflow.sdk.exceptions import AirflowNotFoundException
from dagtest import CONN_ENV, connection_json
from pydantic import SecretStr

from kf_trainer_airflow.hooks.trainer import (
    ConnectionConfigError,
    KubeflowTrainerHook,
    parse_connection,
    secrets_of,
)
from kf_trainer_core.config import KubernetesConfig, LocalConfig
from kf_trainer_core.testing.server import KubeTestServer

TOKEN = "tok-9f1c2b-secret"


def kubeconfig_text(token: str = TOKEN) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "c", "cluster": {"server": "https://example:6443"}}],
            "users": [{"name": "u", "user": {"token": token, "client-key-data": "S0VZ"}}],
            "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
            "current-context": "ctx",
        }
    )


def parse(extra: dict[str, Any] | None = None, **fields: Any) -> Any:
    return parse_connection(fields.pop("conn_type", "kubeflow_trainer"), extra=extra, **fields)


# ------------------------------------------------------------------ kubeflow_trainer


def test_kubeconfig_path_context_and_namespace() -> None:
    found = parse({"kubeconfig_path": "/etc/kube/config", "context": "prod", "namespace": "ml"})
    cfg = found.config
    assert isinstance(cfg, KubernetesConfig)
    assert (cfg.kubeconfig, cfg.context, cfg.namespace) == ("/etc/kube/config", "prod", "ml")


def test_inline_kubeconfig_is_secret() -> None:
    cfg = parse({"kubeconfig": kubeconfig_text()}).config
    assert cfg.kubeconfig_content is not None
    assert TOKEN not in repr(cfg)
    assert TOKEN in cfg.kubeconfig_content.get_secret_value()
    # Every credential inside it is handed to Airflow's masker.
    assert {TOKEN, "S0VZ"} <= set(secrets_of(cfg))


def test_inline_kubeconfig_as_json_object() -> None:
    cfg = parse({"kubeconfig": yaml.safe_load(kubeconfig_text())}).config
    assert cfg.kubeconfig_dict()["current-context"] == "ctx"


def test_host_and_token() -> None:
    found = parse({"ca_cert_data": "PEM"}, host="my-cluster:6443", password=TOKEN)
    cfg = found.config
    assert cfg.host == "https://my-cluster:6443"
    assert cfg.token.get_secret_value() == TOKEN
    assert TOKEN not in repr(found)
    assert set(secrets_of(cfg)) == {TOKEN, "PEM"}


def test_in_cluster_from_text_and_namespace_override() -> None:
    cfg = parse({"in_cluster": "true", "namespace": "ml"}, namespace="team-b").config
    assert cfg.in_cluster is True
    assert cfg.namespace == "team-b"


def test_legacy_prefix_and_cncf_names_are_accepted() -> None:
    cfg = parse(
        {
            "extra__kubeflow_trainer__namespace": "ml",
            "kube_config_path": "/k",
            "cluster_context": "c",
            "disable_verify_ssl": "true",
        }
    ).config
    assert (cfg.namespace, cfg.kubeconfig, cfg.context, cfg.verify_ssl) == ("ml", "/k", "c", False)


def test_blank_form_fields_are_ignored() -> None:
    cfg = parse({"kubeconfig_path": "/k", "context": "", "namespace": None, "state_dir": " "})
    assert cfg.config.kubeconfig == "/k"


def test_local_backend() -> None:
    found = parse({"backend": "local", "state_dir": "/tmp/kf", "namespace": "dev"})
    assert isinstance(found.config, LocalConfig)
    assert (found.config.state_dir, found.config.namespace) == ("/tmp/kf", "dev")


def test_dashboard_url() -> None:
    hook = KubeflowTrainerHook(config={"backend": "local"})
    assert hook.dashboard_url("job", "ns", "https://ui/{namespace}/{name}") == "https://ui/ns/job"
    assert hook.dashboard_url("job", "ns") is None
    assert hook.dashboard_url("job", "ns", "https://ui/{nope}") is None


@pytest.mark.parametrize(
    ("extra", "fields", "expected"),
    [
        (
            {"kubeconfig_pth": "/k"},
            {},
            r"unknown field\(s\) kubeconfig_pth \(did you mean kubeconfig_path\?\)\. Fix: use the extra's",
        ),
        (
            {"backend": "slurm"},
            {},
            r"backend is 'slurm'\. Fix: use 'kubernetes', 'local' or 'container'",
        ),
        (
            {"backend": "local"},
            {"host": "h"},
            r"host applies only to backend 'kubernetes', but backend is 'local'",
        ),
        ({"state_dir": "/s"}, {}, r"state_dir applies only to backend 'local'"),
        ({}, {"password": "t"}, r"bearer token \(password\) needs the API server URL"),
        (
            {"in_cluster": "maybe"},
            {},
            r"in_cluster: .*valid boolean.*\(got 'maybe'\)\. Fix: give true or false",
        ),
        (
            {"kubeconfig": "x", "kubeconfig_path": "/k"},
            {},
            r"both `kubeconfig_path` and `kubeconfig`",
        ),
        (
            {"in_cluster": True, "kubeconfig_path": "/k"},
            {},
            r"kubeconfig_path.*in_cluster=True cannot be combined|in_cluster=True cannot be",
        ),
        ({"watch_timeout": 1}, {}, r"watch_timeout"),
        (
            {"dashboard_url": "ui/{name}"},
            {},
            r"dashboard_url 'ui/\{name\}' is not an http\(s\) URL",
        ),
        ({"dashboard_url": "https://ui/{job}"}, {}, r"unknown placeholders \['job'\]"),
    ],
)
def test_bad_connections_name_the_field_and_fix(
    extra: dict[str, Any], fields: dict[str, Any], expected: str
) -> None:
    with pytest.raises(ConnectionConfigError, match=expected) as info:
        parse(extra, conn_id="my_conn", **fields)
    assert "connection 'my_conn'" in str(info.value)


def test_wrong_connection_type() -> None:
    with pytest.raises(ConnectionConfigError, match="has type 'postgres'"):
        parse({}, conn_type="postgres")


# ----------------------------------------------------- cncf-kubernetes's connection


def test_kubernetes_connection_extras() -> None:
    conn = Connection(
        conn_id="k8s",
        conn_type="kubernetes",
        extra=json.dumps(
            {
                "kube_config_path": "/etc/kube",
                "cluster_context": "gpu",
                "namespace": "ml",
                "disable_verify_ssl": False,
                "xcom_sidecar_container_image": "alpine",  # theirs: ignored here
            }
        ),
    )
    cfg = KubeflowTrainerHook("k8s")._from_connection(conn).config
    assert (cfg.kubeconfig, cfg.context, cfg.namespace, cfg.verify_ssl) == (
        "/etc/kube",
        "gpu",
        "ml",
        True,
    )


def test_kubernetes_connection_prefixed_inline_config() -> None:
    doc = yaml.safe_load(kubeconfig_text())
    conn = Connection(
        conn_id="k8s",
        conn_type="kubernetes",
        extra=json.dumps(
            {"extra__kubernetes__kube_config": doc, "extra__kubernetes__in_cluster": ""}
        ),
    )
    cfg = KubeflowTrainerHook("k8s", namespace="x")._from_connection(conn).config
    assert cfg.kubeconfig_dict() == doc
    assert cfg.namespace == "x"
    assert TOKEN in secrets_of(cfg)


def test_kubernetes_connection_in_cluster_false_is_not_a_choice() -> None:
    conn = Connection(
        conn_id="k8s",
        conn_type="kubernetes",
        extra=json.dumps({"in_cluster": "false", "kube_config_path": "/k"}),
    )
    cfg = KubeflowTrainerHook("k8s")._from_connection(conn).config
    assert (cfg.in_cluster, cfg.kubeconfig) == (False, "/k")


def test_kubernetes_connection_exclusive_options() -> None:
    conn = Connection(
        conn_id="k8s",
        conn_type="kubernetes",
        extra=json.dumps({"in_cluster": True, "kube_config_path": "/k"}),
    )
    with pytest.raises(
        ConnectionConfigError, match="in_cluster=True cannot be combined with a kubeconfig"
    ):
        KubeflowTrainerHook("k8s")._from_connection(conn)


def test_extra_that_is_not_json() -> None:
    conn = Connection(conn_id="bad", conn_type="kubeflow_trainer", extra="{nope")
    with pytest.raises(ConnectionConfigError, match="extra is not JSON"):
        KubeflowTrainerHook("bad")._from_connection(conn)


# --------------------------------------------------------------- through Airflow


def test_hook_reads_the_connection_and_talks_to_the_cluster(
    kube: KubeTestServer, kubeconfig_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(
        CONN_ENV,
        connection_json(kubeconfig_path=str(kubeconfig_path), namespace="kf-test"),
    )
    hook = KubeflowTrainerHook("kf_test")
    assert hook.get_backend_config().namespace == "kf-test"
    with hook.get_client() as client:
        assert client.namespace == "kf-test"
        assert "torch-distributed" in {r.name for r in client.list_runtimes()}
    ok, message = hook.test_connection()
    assert ok, message
    assert "torch-distributed" in message


async def test_async_client_in_the_loop(
    kube: KubeTestServer, kubeconfig_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CONN_ENV, connection_json(kubeconfig_path=str(kubeconfig_path)))
    hook = KubeflowTrainerHook("kf_test")
    async with await hook.aget_client() as client:
        runtimes = await client.list_runtimes()
    assert "torch-distributed" in {r.name for r in runtimes}


def test_test_connection_reports_failure(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(CONN_ENV, connection_json(kubeconfig_path=str(tmp_path / "missing")))
    ok, message = KubeflowTrainerHook("kf_test").test_connection()
    assert not ok
    assert message


def test_missing_connection() -> None:
    with pytest.raises(AirflowNotFoundException):
        _ = KubeflowTrainerHook("no_such_connection").settings
    # The default connection may be absent: the usual kubeconfig/in-cluster discovery.
    assert KubeflowTrainerHook().get_backend_config() == KubernetesConfig()


def test_hook_repr_has_no_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CONN_ENV, connection_json(host="https://h:6443", password=TOKEN))
    hook = KubeflowTrainerHook("kf_test")
    assert hook.get_backend_config().token is not None
    assert TOKEN not in repr(hook)
    assert TOKEN not in repr(hook.settings)


def test_masker_hides_connection_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.sdk._shared.secrets_masker import redact

    inline = kubeconfig_text("inner-token-77aa")
    monkeypatch.setenv(CONN_ENV, connection_json(kubeconfig=inline, namespace="ml"))
    _ = KubeflowTrainerHook("kf_test").settings
    assert "inner-token-77aa" not in str(redact("Authorization: Bearer inner-token-77aa"))


def test_form_behaviour_for_older_airflow() -> None:
    behaviour = KubeflowTrainerHook.get_ui_field_behaviour()
    assert set(behaviour["hidden_fields"]) == {"schema", "login", "port"}
    assert behaviour["relabeling"]["password"] == "Bearer token"


# Malformed inline kubeconfigs: the YAML parser quotes the line it stopped at (token
# included, sometimes cut short, so a masker cannot find it), and its errors are no
# ValueError. Whatever the shape, no error, log line or Test message holds the token.
LEAKY = "lk-7d3e9a51c0b24f86"
MALFORMED = [
    pytest.param(f"users:\n- name: u\n  user:\n    token: {LEAKY}\n  bad: [unclosed\n", id="flow"),
    pytest.param(f"users: [{{name: u, user: {{token: {LEAKY}}}}}]\n\t- tab", id="tab"),
    pytest.param('{"users": [{"user": {"token": "' + LEAKY + '"}}], ', id="cut-json"),
    pytest.param(f"token: {LEAKY}\n: :", id="block"),
    pytest.param(f"- token: {LEAKY}", id="not-a-mapping"),
]


def _leaks(text: str) -> bool:
    # The whole token, or the first half of it (a parser's excerpt cuts lines).
    return LEAKY in text or LEAKY[:10] in text


@pytest.mark.parametrize("text", MALFORMED)
def test_malformed_inline_kubeconfig_never_leaks_its_token(
    text: str, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    from airflow.sdk._shared.secrets_masker import redact

    monkeypatch.setenv(CONN_ENV, connection_json(kubeconfig=text))
    with pytest.raises(ConnectionConfigError) as info:
        _ = KubeflowTrainerHook("kf_test").settings
    message = str(info.value)
    assert "kf_test" in message
    assert "Fix:" in message
    assert not _leaks(message)
    assert not _leaks("".join(traceback.format_exception(info.value)))
    # The token was handed to the masker before anything parsed the connection.
    assert LEAKY not in str(redact(f"Authorization: Bearer {LEAKY}"))
    ok, shown = KubeflowTrainerHook("kf_test").test_connection()
    assert not ok
    assert not _leaks(shown)
    assert not _leaks(capfd.readouterr().out)


async def test_malformed_inline_kubeconfig_in_a_trigger(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CONN_ENV, connection_json(kubeconfig=MALFORMED[0].values[0]))
    with pytest.raises(ConnectionConfigError) as info:
        await KubeflowTrainerHook("kf_test").asettings()
    assert not _leaks(str(info.value))


def test_secrets_of_survives_any_parse_error() -> None:
    # The core refuses such content when a config is built; one made without validation
    # (an old pickle, model_construct) must still be masked.
    config = KubernetesConfig.model_construct(kubeconfig_content=SecretStr(f"token: {LEAKY}\n: :"))
    assert LEAKY in secrets_of(config)  # found line by line when the YAML cannot be read


def test_retention_in_the_extra_is_every_backends_default() -> None:
    """docs/retention.md: a connection's extra carries the backend's Retention (an
    object, or its JSON text from a form); a bad one is refused naming the field."""
    cluster = parse({"retention": {"keep_last": 3}}, host="https://k:6443", password="t")
    assert cluster.config.retention is not None
    assert cluster.config.retention.keep_last == 3
    local = parse({"backend": "local", "retention": '{"after_finished_seconds": 60}'})
    assert local.config.retention.after_finished_seconds == 60
    container = parse({"backend": "container", "retention": {"keep_last": 1}})
    assert container.config.retention.keep_last == 1
    with pytest.raises(ConnectionConfigError, match=r"retention.*Fix"):
        parse({"backend": "local", "retention": "three"})
    with pytest.raises(ConnectionConfigError, match=r"retention\.keep_last"):
        parse({"backend": "local", "retention": {"keep_last": 0}})
