"""Fault injection over real HTTP: throttling, outages, latency, RBAC denials, broken
watches, restarts and auth."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes
import kubernetes_asyncio
import pytest
import urllib3
from kubernetes.client import ApiException

from kf_trainer_core.testing.faults import FaultInjector
from kf_trainer_core.testing.server import KubeTestServer

GROUP, VERSION = "trainer.kubeflow.org", "v1alpha1"


def status_of(exc: ApiException) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(exc.body)
    return body


def test_fail_next_429_with_retry_after(api: Any, bare_kube: KubeTestServer) -> None:
    v1 = kubernetes.client.CoreV1Api(api)
    bare_kube.faults.fail_next(1, code=429, retry_after=2, verb="create")
    with pytest.raises(ApiException) as exc:
        v1.create_namespaced_config_map("default", {"metadata": {"name": "c"}})
    assert exc.value.status == 429
    assert exc.value.headers["Retry-After"] == "2"
    assert status_of(exc.value) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "Too many requests, please try again later.",
        "reason": "TooManyRequests",
        "details": {"retryAfterSeconds": 2},
        "code": 429,
    }
    v1.create_namespaced_config_map("default", {"metadata": {"name": "c"}})  # only one failed
    assert bare_kube.requests.count(verb="create", resource="configmaps", status=429) == 1


def test_urllib3_retries_idempotent_requests_on_429(api: Any, bare_kube: KubeTestServer) -> None:
    # The sync client's urllib3 pool honours Retry-After on GETs by itself (as it would
    # against a real apiserver): the caller sees success, the server saw two requests.
    v1 = kubernetes.client.CoreV1Api(api)
    bare_kube.faults.fail_next(1, code=429, retry_after=0, verb="list")
    assert v1.list_namespace().items
    assert [r.status for r in bare_kube.requests.filter(verb="list")] == [429, 200]


def test_fail_next_matches_verb_and_resource(
    api: Any, bare_kube: KubeTestServer, make_pod: Callable[..., Any]
) -> None:
    v1 = kubernetes.client.CoreV1Api(api)
    v1.create_namespaced_pod("default", make_pod("p"))
    # 503 without Retry-After: urllib3 does not retry it, the caller sees it.
    bare_kube.faults.fail_next(2, code=503, retry_after=None, verb="list", resource="pods")
    bare_kube.faults.fail_next(1, code=500, retry_after=None, verb="get")
    assert v1.list_namespaced_config_map("default").items == []  # other resource: unaffected
    for _ in range(2):
        with pytest.raises(ApiException) as exc:
            v1.list_namespaced_pod("default")
        assert exc.value.status == 503
        assert "Retry-After" not in exc.value.headers
        assert status_of(exc.value)["reason"] == "ServiceUnavailable"
    assert len(v1.list_namespaced_pod("default").items) == 1
    with pytest.raises(ApiException) as exc:
        v1.read_namespaced_pod("p", "default")
    assert exc.value.status == 500
    assert "Retry-After" not in exc.value.headers
    assert status_of(exc.value)["message"] == "Internal error occurred: injected fault"
    assert v1.read_namespaced_pod("p", "default").metadata.name == "p"


def test_latency(api: Any, bare_kube: KubeTestServer) -> None:
    v1 = kubernetes.client.CoreV1Api(api)
    bare_kube.faults.latency(0.2, verb="list", resource="namespaces")
    started = time.monotonic()
    v1.list_namespace()
    assert time.monotonic() - started >= 0.2
    started = time.monotonic()
    v1.read_namespace("default")
    assert time.monotonic() - started < 0.2


def test_forbid_watch_lets_client_fall_back_to_polling(
    api: Any, bare_kube: KubeTestServer, make_trainjob: Callable[..., Any]
) -> None:
    co = kubernetes.client.CustomObjectsApi(api)
    co.create_namespaced_custom_object(GROUP, VERSION, "default", "trainjobs", make_trainjob("x"))
    bare_kube.forbid("watch", "trainjobs", namespace="default")
    with pytest.raises(ApiException) as exc:
        for _ in kubernetes.watch.Watch().stream(
            co.list_namespaced_custom_object,
            GROUP,
            VERSION,
            "default",
            "trainjobs",
            timeout_seconds=1,
        ):
            pass
    assert exc.value.status == 403
    assert status_of(exc.value) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "trainjobs.trainer.kubeflow.org is forbidden: User "
        '"system:serviceaccount:default:default" cannot watch resource "trainjobs" in '
        'API group "trainer.kubeflow.org" in the namespace "default"',
        "reason": "Forbidden",
        "details": {"group": GROUP, "kind": "trainjobs"},
        "code": 403,
    }
    # Polling still works.
    assert co.get_namespaced_custom_object(GROUP, VERSION, "default", "trainjobs", "x")
    assert co.list_namespaced_custom_object(GROUP, VERSION, "default", "trainjobs")["items"]

    bare_kube.forbid("get", "trainjobs")
    with pytest.raises(ApiException) as exc:
        co.get_namespaced_custom_object(GROUP, VERSION, "default", "trainjobs", "x")
    assert status_of(exc.value)["message"].startswith(
        'trainjobs.trainer.kubeflow.org "x" is forbidden: User '
    )
    bare_kube.forbid("get", "pods/log")
    with pytest.raises(ApiException) as exc:
        kubernetes.client.CoreV1Api(api).read_namespaced_pod_log("p", "kf-test")
    assert (
        'cannot get resource "pods/log" in API group "" in the namespace "kf-test"'
        in (status_of(exc.value)["message"])
    )
    bare_kube.forbid("list", "clustertrainingruntimes")
    with pytest.raises(ApiException) as exc:
        co.list_cluster_custom_object(GROUP, VERSION, "clustertrainingruntimes")
    assert status_of(exc.value)["message"].endswith("at the cluster scope")
    bare_kube.faults.clear()
    assert co.get_namespaced_custom_object(GROUP, VERSION, "default", "trainjobs", "x")


def test_drop_watch_probability(api: Any, bare_kube: KubeTestServer) -> None:
    v1 = kubernetes.client.CoreV1Api(api)
    for i in range(3):
        v1.create_namespaced_config_map("default", {"metadata": {"name": f"c{i}"}})
    bare_kube.faults.drop_watch_probability(1.0)
    events = list(
        kubernetes.watch.Watch().stream(v1.list_namespaced_config_map, "default", timeout_seconds=5)
    )
    assert events == []  # the stream broke before the first event got through
    bare_kube.faults.drop_watch_probability(0.5, seed=7)
    first = len(
        list(
            kubernetes.watch.Watch().stream(
                v1.list_namespaced_config_map, "default", timeout_seconds=5
            )
        )
    )
    bare_kube.faults.drop_watch_probability(0.5, seed=7)
    again = len(
        list(
            kubernetes.watch.Watch().stream(
                v1.list_namespaced_config_map, "default", timeout_seconds=5
            )
        )
    )
    assert first == again < 3  # seeded: repeatable


def test_restart_with_downtime_refuses_then_serves(api: Any, bare_kube: KubeTestServer) -> None:
    v1 = kubernetes.client.CoreV1Api(api)
    v1.create_namespaced_config_map("default", {"metadata": {"name": "kept"}})
    thread = threading.Thread(target=bare_kube.faults.restart, kwargs={"downtime": 0.5})
    thread.start()
    time.sleep(0.2)
    with pytest.raises(urllib3.exceptions.MaxRetryError):
        v1.list_namespaced_config_map("default", _request_timeout=1)
    thread.join()
    assert [c.metadata.name for c in v1.list_namespaced_config_map("default").items] == ["kept"]


def test_token_rotation_with_callable(bare_kube: KubeTestServer, tmp_path: Path) -> None:
    accepted = {"t1"}
    bare_kube.require_token(lambda token: token in accepted)
    client = kubernetes.config.new_client_from_config(
        config_file=str(bare_kube.kubeconfig(tmp_path / "k", token="t1"))
    )
    try:
        v1 = kubernetes.client.CoreV1Api(client)
        assert v1.list_namespace().items
        accepted.clear()
        accepted.add("t2")  # the token was rotated server-side
        with pytest.raises(ApiException) as exc:
            v1.list_namespace()
        assert exc.value.status == 401
    finally:
        client.close()


def test_exec_plugin_credentials(bare_kube: KubeTestServer, tmp_path: Path) -> None:
    bare_kube.require_token({"from-exec"})
    credential = json.dumps(
        {
            "apiVersion": "client.authentication.k8s.io/v1beta1",
            "kind": "ExecCredential",
            "status": {"token": "from-exec"},
        }
    )
    user = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1beta1",
            "command": sys.executable,
            "args": ["-c", f"print({credential!r})"],
        }
    }
    client = kubernetes.config.new_client_from_config(
        config_file=str(bare_kube.kubeconfig(tmp_path / "k", user=user))
    )
    try:
        assert kubernetes.client.CoreV1Api(client).list_namespace().items
    finally:
        client.close()


def test_clear_removes_every_fault(bare_kube: KubeTestServer) -> None:
    faults = bare_kube.faults
    faults.fail_next(5)
    faults.latency(1.0)
    faults.forbid("get", "*")
    faults.drop_watches_after(1)
    faults.drop_watch_probability(0.5)
    faults.clear()
    assert faults.take_failure("get", "pods", None) is None
    assert faults.delay_for("get", "pods", None) == 0.0
    assert not faults.forbidden("get", "pods", None, "default")
    assert faults.drop_after is None
    assert not faults.drop_event()
    with pytest.raises(ValueError, match="unknown verb"):
        faults.forbid("read", "pods")
    with pytest.raises(RuntimeError):
        FaultInjector().drop_watches()


async def test_async_client_sees_429_and_403(aapi: Any, bare_kube: KubeTestServer) -> None:
    v1 = kubernetes_asyncio.client.CoreV1Api(aapi)
    bare_kube.faults.fail_next(1, code=429, retry_after=1, verb="list")
    with pytest.raises(kubernetes_asyncio.client.ApiException) as exc:
        await v1.list_namespace()
    assert exc.value.status == 429
    assert exc.value.headers["Retry-After"] == "1"
    bare_kube.forbid("list", "namespaces")
    with pytest.raises(kubernetes_asyncio.client.ApiException) as exc:
        await v1.list_namespace()
    assert exc.value.status == 403


def test_expired_continue_token_is_410_gone(api: Any, bare_kube: KubeTestServer) -> None:
    v1 = kubernetes.client.CoreV1Api(api)
    for i in range(5):
        v1.create_namespaced_config_map("default", {"metadata": {"name": f"cm-{i}"}})
    page = v1.list_namespaced_config_map("default", limit=2)
    bare_kube.faults.expire_continue_tokens(1)
    with pytest.raises(ApiException) as exc:
        v1.list_namespaced_config_map("default", limit=2, _continue=page.metadata._continue)
    assert exc.value.status == 410
    body = status_of(exc.value)
    assert body["reason"] == "Expired"
    assert "continue parameter is too old" in body["message"]
    # One token expired; the same one works again (the fault is used up), and a list
    # without a token is never affected.
    again = v1.list_namespaced_config_map("default", limit=2, _continue=page.metadata._continue)
    assert [c.metadata.name for c in again.items] == ["cm-2", "cm-3"]
    bare_kube.faults.expire_continue_tokens(None)
    assert len(v1.list_namespaced_config_map("default").items) == 5
    for _ in range(2):
        with pytest.raises(ApiException):
            v1.list_namespaced_config_map("default", limit=2, _continue=page.metadata._continue)
    bare_kube.faults.clear()
    v1.list_namespaced_config_map("default", limit=2, _continue=page.metadata._continue)


def test_watch_by_name_and_label_sees_only_its_objects(api: Any, bare_kube: KubeTestServer) -> None:
    v1 = kubernetes.client.CoreV1Api(api)
    rv = v1.list_namespaced_config_map("default").metadata.resource_version
    v1.create_namespaced_config_map("default", {"metadata": {"name": "other"}})
    v1.create_namespaced_config_map("default", {"metadata": {"name": "mine"}})
    v1.create_namespaced_config_map(
        "default", {"metadata": {"name": "labelled", "labels": {"app": "x"}}}
    )

    def names(**selector: str) -> list[str]:
        resp = v1.list_namespaced_config_map(
            "default",
            watch=True,
            resource_version=rv,
            timeout_seconds=1,
            _preload_content=False,
            **selector,
        )
        lines = [json.loads(line) for line in resp.data.splitlines() if line.strip()]
        return [e["object"]["metadata"]["name"] for e in lines if e["type"] == "ADDED"]

    assert names(field_selector="metadata.name=mine") == ["mine"]
    assert names(label_selector="app=x") == ["labelled"]
    listed = v1.list_namespaced_config_map("default", field_selector="metadata.name=mine")
    assert [c.metadata.name for c in listed.items] == ["mine"]
