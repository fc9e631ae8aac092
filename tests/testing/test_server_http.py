"""The test server over real HTTP with the real ``kubernetes`` and ``kubernetes_asyncio``
clients: CRUD, the status subresource, validation, errors, pagination, pod logs."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import kubernetes
import kubernetes_asyncio
import pytest
from kubernetes.client import ApiException

from kf_trainer_core.testing.server import KubeTestServer
from kf_trainer_core.testing.store import CLUSTER_TRAINING_RUNTIMES, JOBSETS, PODS, TRAINJOBS

GROUP, VERSION = "trainer.kubeflow.org", "v1alpha1"


def custom(api: Any) -> Any:
    return kubernetes.client.CustomObjectsApi(api)


def status_of(exc: ApiException) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(exc.body)
    return body


# ----------------------------------------------------------------------------- discovery


def test_discovery_with_real_clients(api: Any) -> None:
    assert kubernetes.client.VersionApi(api).get_code().major == "1"
    groups = {g.name: g for g in kubernetes.client.ApisApi(api).get_api_versions().groups}
    assert groups["trainer.kubeflow.org"].preferred_version.version == "v1alpha1"
    assert "jobset.x-k8s.io" in groups
    resources = kubernetes.client.CustomObjectsApi(api).get_api_resources(GROUP, VERSION)
    by_name = {r.name: r for r in resources.resources}
    assert by_name["trainjobs"].namespaced
    assert not by_name["clustertrainingruntimes"].namespaced
    assert by_name["trainjobs/status"].verbs == ["get", "patch", "update"]
    core = {r.name for r in kubernetes.client.CoreV1Api(api).get_api_resources().resources}
    assert {"pods", "pods/log", "events", "secrets", "configmaps", "namespaces"} <= core
    # The dynamic client walks /api, /apis and each group's resource list.
    dyn = kubernetes.dynamic.DynamicClient(api)
    trainjobs = dyn.resources.get(api_version=f"{GROUP}/{VERSION}", kind="TrainJob")
    assert trainjobs.get(namespace="default").items == []


# ----------------------------------------------------------------------------- custom objects


def test_trainjob_crud_with_defaults(
    api: Any, make_trainjob: Callable[..., Any], bare_kube: KubeTestServer
) -> None:
    co = custom(api)
    runtimes = co.list_cluster_custom_object(GROUP, VERSION, "clustertrainingruntimes")
    names = [r["metadata"]["name"] for r in runtimes["items"]]
    assert "torch-distributed" in names
    torch = co.get_cluster_custom_object(
        GROUP, VERSION, "clustertrainingruntimes", "torch-distributed"
    )
    assert torch["metadata"]["labels"]["trainer.kubeflow.org/webhook-validation"] == "disabled"

    created = co.create_namespaced_custom_object(
        GROUP, VERSION, "default", "trainjobs", make_trainjob("job-a")
    )
    ref = created["spec"]["runtimeRef"]
    assert ref == {"name": "torch-distributed", "apiGroup": GROUP, "kind": "ClusterTrainingRuntime"}
    assert created["metadata"]["generation"] == 1

    got = co.get_namespaced_custom_object(GROUP, VERSION, "default", "trainjobs", "job-a")
    assert got == created
    listed = co.list_namespaced_custom_object(GROUP, VERSION, "default", "trainjobs")
    assert [i["metadata"]["name"] for i in listed["items"]] == ["job-a"]
    assert listed["kind"] == "TrainJobList"
    everywhere = co.list_cluster_custom_object(GROUP, VERSION, "trainjobs")
    assert len(everywhere["items"]) == 1

    patched = co.patch_namespaced_custom_object(
        GROUP, VERSION, "default", "trainjobs", "job-a", {"spec": {"suspend": True}}
    )
    assert patched["spec"]["suspend"] is True
    assert patched["metadata"]["generation"] == 2

    deleted = co.delete_namespaced_custom_object(GROUP, VERSION, "default", "trainjobs", "job-a")
    assert deleted["status"] == "Success"
    assert deleted["details"]["kind"] == "trainjobs"
    with pytest.raises(ApiException) as exc:
        co.get_namespaced_custom_object(GROUP, VERSION, "default", "trainjobs", "job-a")
    assert exc.value.status == 404
    assert status_of(exc.value) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'trainjobs.trainer.kubeflow.org "job-a" not found',
        "reason": "NotFound",
        "details": {"name": "job-a", "group": GROUP, "kind": "trainjobs"},
        "code": 404,
    }
    assert bare_kube.store.count(CLUSTER_TRAINING_RUNTIMES) == len(names)


def test_status_subresource_semantics(api: Any, make_trainjob: Callable[..., Any]) -> None:
    co = custom(api)
    co.create_namespaced_custom_object(GROUP, VERSION, "default", "trainjobs", make_trainjob("j"))
    cond = {
        "type": "Complete",
        "status": "True",
        "reason": "JobsCompleted",
        "message": "done",
        "lastTransitionTime": "2025-01-01T00:00:00Z",
    }
    updated = co.patch_namespaced_custom_object_status(
        GROUP, VERSION, "default", "trainjobs", "j", {"status": {"conditions": [cond]}}
    )
    assert updated["status"]["conditions"] == [cond]
    assert updated["metadata"]["generation"] == 1
    # Status sent to the main resource is ignored.
    main = co.patch_namespaced_custom_object(
        GROUP,
        VERSION,
        "default",
        "trainjobs",
        "j",
        {"status": {"conditions": []}, "metadata": {"labels": {"a": "b"}}},
    )
    assert main["status"]["conditions"] == [cond]
    assert main["metadata"]["labels"] == {"a": "b"}
    got = co.get_namespaced_custom_object_status(GROUP, VERSION, "default", "trainjobs", "j")
    assert got["status"]["conditions"] == [cond]


def test_conflicts_and_already_exists(api: Any, make_trainjob: Callable[..., Any]) -> None:
    co = custom(api)
    first = co.create_namespaced_custom_object(
        GROUP, VERSION, "default", "trainjobs", make_trainjob("j")
    )
    with pytest.raises(ApiException) as exc:
        co.create_namespaced_custom_object(
            GROUP, VERSION, "default", "trainjobs", make_trainjob("j")
        )
    assert (exc.value.status, status_of(exc.value)["reason"]) == (409, "AlreadyExists")
    co.patch_namespaced_custom_object(
        GROUP, VERSION, "default", "trainjobs", "j", {"metadata": {"labels": {"v": "2"}}}
    )
    first["spec"]["suspend"] = True
    with pytest.raises(ApiException) as exc:
        co.replace_namespaced_custom_object(GROUP, VERSION, "default", "trainjobs", "j", first)
    body = status_of(exc.value)
    assert (exc.value.status, body["reason"]) == (409, "Conflict")
    assert body["message"] == (
        'Operation cannot be fulfilled on trainjobs.trainer.kubeflow.org "j": the object has '
        "been modified; please apply your changes to the latest version and try again"
    )
    fresh = co.get_namespaced_custom_object(GROUP, VERSION, "default", "trainjobs", "j")
    fresh["spec"]["suspend"] = True
    replaced = co.replace_namespaced_custom_object(
        GROUP, VERSION, "default", "trainjobs", "j", fresh
    )
    assert replaced["spec"]["suspend"] is True


def test_validation_errors(
    api: Any, make_trainjob: Callable[..., Any], bare_kube: KubeTestServer
) -> None:
    if not bare_kube.validates:
        pytest.skip("upstream CRDs not found")
    co = custom(api)
    with pytest.raises(ApiException) as exc:
        co.create_namespaced_custom_object(
            GROUP, VERSION, "default", "trainjobs", make_trainjob("bad", num_nodes="x")
        )
    body = status_of(exc.value)
    assert exc.value.status == 422
    assert body["reason"] == "Invalid"
    assert body["message"].startswith('TrainJob.trainer.kubeflow.org "bad" is invalid: ')
    assert body["details"]["kind"] == "TrainJob"
    cause = body["details"]["causes"][0]
    assert cause["field"] == "spec.trainer.numNodes"
    assert cause["reason"] == "FieldValueTypeInvalid"

    co.create_namespaced_custom_object(GROUP, VERSION, "default", "trainjobs", make_trainjob("ok"))
    with pytest.raises(ApiException) as exc:
        co.patch_namespaced_custom_object(
            GROUP,
            VERSION,
            "default",
            "trainjobs",
            "ok",
            {"spec": {"runtimeRef": {"name": "other"}}},
        )
    body = status_of(exc.value)
    assert exc.value.status == 422
    assert body["details"]["causes"] == [
        {
            "reason": "FieldValueInvalid",
            "field": "spec.runtimeRef",
            "message": "Invalid value: field is immutable",
        }
    ]

    strict = make_trainjob("strict", foo=1, bar={"x": 1})
    with pytest.raises(ApiException) as exc:
        co.create_namespaced_custom_object(
            GROUP, VERSION, "default", "trainjobs", strict, field_validation="Strict"
        )
    assert exc.value.status == 400
    message = status_of(exc.value)["message"]
    assert message == (
        'TrainJob in version "v1alpha1" cannot be handled as a TrainJob: strict decoding '
        'error: unknown field "spec.bar", unknown field "spec.foo"'
    )

    data, code, headers = co.create_namespaced_custom_object_with_http_info(
        GROUP, VERSION, "default", "trainjobs", make_trainjob("warned", foo=1)
    )
    assert code == 201
    assert headers["Warning"] == '299 - "unknown field \\"spec.foo\\""'
    assert "foo" not in data["spec"]  # pruned

    dry = co.create_namespaced_custom_object(
        GROUP, VERSION, "default", "trainjobs", make_trainjob("dry"), dry_run="All"
    )
    assert dry["metadata"]["name"] == "dry"
    assert bare_kube.store.try_get(TRAINJOBS, "default", "dry") is None


def test_strategic_patch_on_custom_resource_is_415(
    api: Any, make_trainjob: Callable[..., Any]
) -> None:
    custom(api).create_namespaced_custom_object(
        GROUP, VERSION, "default", "trainjobs", make_trainjob("j")
    )
    with pytest.raises(ApiException) as exc:
        api.call_api(
            f"/apis/{GROUP}/{VERSION}/namespaces/default/trainjobs/j",
            "PATCH",
            header_params={
                "Content-Type": "application/strategic-merge-patch+json",
                "Accept": "application/json",
            },
            body={"spec": {"suspend": True}},
            response_type="object",
            _return_http_data_only=True,
        )
    assert exc.value.status == 415
    assert status_of(exc.value)["reason"] == "UnsupportedMediaType"


def test_namespace_must_exist(api: Any, make_trainjob: Callable[..., Any]) -> None:
    with pytest.raises(ApiException) as exc:
        custom(api).create_namespaced_custom_object(
            GROUP, VERSION, "nowhere", "trainjobs", make_trainjob("j")
        )
    assert exc.value.status == 404
    assert status_of(exc.value)["message"] == 'namespaces "nowhere" not found'


# ----------------------------------------------------------------------------- core objects


def test_core_pods_events_secrets(
    api: Any, make_pod: Callable[..., Any], bare_kube: KubeTestServer
) -> None:
    v1 = kubernetes.client.CoreV1Api(api)
    created = v1.create_namespaced_pod(
        "default", make_pod("job-a-node-0-0", labels={"jobset.sigs.k8s.io/jobset-name": "job-a"})
    )
    assert created.status.phase == "Pending"
    v1.create_namespaced_pod("default", make_pod("other-0", labels={"app": "x"}))
    v1.patch_namespaced_pod_status("job-a-node-0-0", "default", {"status": {"phase": "Running"}})

    selected = v1.list_namespaced_pod(
        "default", label_selector="jobset.sigs.k8s.io/jobset-name=job-a"
    )
    assert [p.metadata.name for p in selected.items] == ["job-a-node-0-0"]
    running = v1.list_pod_for_all_namespaces(field_selector="status.phase=Running")
    assert [p.metadata.name for p in running.items] == ["job-a-node-0-0"]
    patched = v1.patch_namespaced_pod("other-0", "default", {"metadata": {"labels": {"b": "c"}}})
    assert patched.metadata.labels == {"app": "x", "b": "c"}

    event = {
        "metadata": {"name": "job-a.1"},
        "involvedObject": {
            "kind": "TrainJob",
            "name": "job-a",
            "namespace": "default",
            "apiVersion": f"{GROUP}/{VERSION}",
        },
        "reason": "Created",
        "message": "created jobset",
        "type": "Normal",
    }
    v1.create_namespaced_event("default", event)
    events = v1.list_namespaced_event("default", field_selector="involvedObject.name=job-a")
    assert [e.reason for e in events.items] == ["Created"]
    # events.k8s.io/v1 shows the same objects; like the apiserver it sends eventTime null
    # for events created through core/v1, which the generated model refuses: read raw.
    raw = kubernetes.client.EventsV1Api(api).list_namespaced_event(
        "default", field_selector="regarding.name=job-a", _preload_content=False
    )
    v1event = json.loads(raw.data)["items"][0]
    assert v1event["note"] == "created jobset"
    assert v1event["regarding"]["kind"] == "TrainJob"
    assert v1event["eventTime"] is None

    v1.create_namespaced_secret("default", {"metadata": {"name": "s"}, "stringData": {"a": "b"}})
    assert v1.read_namespaced_secret("s", "default").metadata.name == "s"
    assert [n.metadata.name for n in v1.list_namespace().items] == ["default", "kf-test"]

    deleted = v1.delete_namespaced_pod("other-0", "default")
    assert deleted.metadata.name == "other-0"  # pods answer with the deleted object
    with pytest.raises(ApiException) as exc:
        v1.delete_namespaced_pod("other-0", "default")
    assert exc.value.status == 404
    assert bare_kube.store.count(PODS) == 1


def test_delete_cascades_to_owned_objects(
    api: Any,
    make_trainjob: Callable[..., Any],
    make_pod: Callable[..., Any],
    bare_kube: KubeTestServer,
) -> None:
    co = custom(api)
    job = co.create_namespaced_custom_object(
        GROUP, VERSION, "default", "trainjobs", make_trainjob("j")
    )
    ref = {
        "apiVersion": job["apiVersion"],
        "kind": "TrainJob",
        "name": "j",
        "uid": job["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    kubernetes.client.CoreV1Api(api).create_namespaced_pod("default", make_pod("j-0", owner=ref))
    co.delete_namespaced_custom_object(
        GROUP, VERSION, "default", "trainjobs", "j", propagation_policy="Foreground"
    )
    assert bare_kube.store.count(PODS) == 0
    assert bare_kube.store.count(JOBSETS) == 0


def test_pagination(api: Any) -> None:
    v1 = kubernetes.client.CoreV1Api(api)
    for i in range(7):
        v1.create_namespaced_config_map("default", {"metadata": {"name": f"cm-{i}"}})
    page = v1.list_namespaced_config_map("default", limit=3)
    names = [c.metadata.name for c in page.items]
    assert page.metadata.remaining_item_count == 4
    rv = page.metadata.resource_version
    v1.create_namespaced_config_map("default", {"metadata": {"name": "cm-late"}})
    while page.metadata._continue:
        page = v1.list_namespaced_config_map("default", limit=3, _continue=page.metadata._continue)
        names += [c.metadata.name for c in page.items]
        assert page.metadata.resource_version == rv  # one consistent snapshot
    assert names == [f"cm-{i}" for i in range(7)]
    exact = v1.list_namespaced_config_map(
        "default", resource_version=rv, resource_version_match="Exact"
    )
    assert len(exact.items) == 7
    with pytest.raises(ApiException) as exc:
        v1.list_namespaced_config_map("default", _continue="garbage!")
    assert exc.value.status == 400


# ----------------------------------------------------------------------------- pod logs


def _running(v1: Any, name: str, *containers: str) -> None:
    v1.patch_namespaced_pod_status(
        name,
        "default",
        {
            "status": {
                "phase": "Running",
                "containerStatuses": [
                    {
                        "name": c,
                        "ready": True,
                        "restartCount": 0,
                        "image": "busybox",
                        "imageID": "",
                        "state": {"running": {}},
                    }
                    for c in containers
                ],
            }
        },
    )


def test_pod_logs_options_and_errors(
    api: Any, make_pod: Callable[..., Any], bare_kube: KubeTestServer
) -> None:
    v1 = kubernetes.client.CoreV1Api(api)
    v1.create_namespaced_pod("default", make_pod("p"))
    with pytest.raises(ApiException) as exc:
        v1.read_namespaced_pod_log("p", "default")
    assert exc.value.status == 400
    assert status_of(exc.value)["message"] == (
        'container "node" in pod "p" is waiting to start: ContainerCreating'
    )
    v1.patch_namespaced_pod_status(
        "p",
        "default",
        {
            "status": {
                "containerStatuses": [
                    {
                        "name": "node",
                        "ready": False,
                        "restartCount": 0,
                        "image": "x",
                        "imageID": "",
                        "state": {"waiting": {"reason": "ImagePullBackOff"}},
                    }
                ]
            }
        },
    )
    with pytest.raises(ApiException) as exc:
        v1.read_namespaced_pod_log("p", "default")
    assert status_of(exc.value)["message"] == (
        'container "node" in pod "p" is waiting to start: trying and failing to pull image'
    )

    _running(v1, "p", "node")
    t0 = datetime.now(timezone.utc) - timedelta(minutes=10)
    bare_kube.logs.append("default", "p", "node", "old line", timestamp=t0)
    bare_kube.logs.append("default", "p", "node", "epoch 1\nepoch 2\n")
    assert v1.read_namespaced_pod_log("p", "default") == "old line\nepoch 1\nepoch 2\n"
    assert v1.read_namespaced_pod_log("p", "default", tail_lines=1) == "epoch 2\n"
    assert v1.read_namespaced_pod_log("p", "default", since_seconds=60) == "epoch 1\nepoch 2\n"
    assert v1.read_namespaced_pod_log("p", "default", limit_bytes=4) == "old "
    since = (t0 + timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%SZ")
    by_time = api.call_api(
        "/api/v1/namespaces/default/pods/p/log",
        "GET",
        query_params=[("sinceTime", since)],
        response_type="str",
        _return_http_data_only=True,
    )
    assert by_time == "epoch 1\nepoch 2\n"
    stamped = v1.read_namespaced_pod_log("p", "default", timestamps=True).splitlines()
    assert stamped[0].startswith(t0.strftime("%Y-%m-%dT%H:%M:%S"))
    assert stamped[0].endswith("Z old line")
    with pytest.raises(ApiException) as exc:
        v1.read_namespaced_pod_log("p", "default", previous=True)
    assert status_of(exc.value)["message"] == (
        'previous terminated container "node" in pod "p" not found'
    )

    v1.create_namespaced_pod("default", make_pod("two", containers=("node", "sidecar")))
    with pytest.raises(ApiException) as exc:
        v1.read_namespaced_pod_log("two", "default")
    assert status_of(exc.value)["message"] == (
        "a container name must be specified for pod two, choose one of: [node sidecar]"
    )
    with pytest.raises(ApiException) as exc:
        v1.read_namespaced_pod_log("missing", "default")
    assert exc.value.status == 404


def test_pod_log_follow_streams_until_closed(
    api: Any, make_pod: Callable[..., Any], bare_kube: KubeTestServer
) -> None:
    v1 = kubernetes.client.CoreV1Api(api)
    v1.create_namespaced_pod("default", make_pod("p"))
    _running(v1, "p", "node")
    bare_kube.logs.append("default", "p", "node", "first")

    def writer() -> None:
        for i in range(5):
            time.sleep(0.02)
            bare_kube.logs.append("default", "p", "node", f"line {i}")
        bare_kube.logs.close("default", "p", "node")

    thread = threading.Thread(target=writer)
    resp = v1.read_namespaced_pod_log("p", "default", follow=True, _preload_content=False)
    thread.start()
    lines = [raw.decode() for raw in resp.stream()]
    thread.join()
    assert "".join(lines) == "first\n" + "".join(f"line {i}\n" for i in range(5))

    # kubernetes.watch streams log lines too (the follow=True form).
    bare_kube.logs.append("default", "p", "node", "after restart")
    bare_kube.logs.close("default", "p", "node")
    got = list(
        kubernetes.watch.Watch().stream(v1.read_namespaced_pod_log, name="p", namespace="default")
    )
    assert got == ["after restart"]
    previous = v1.read_namespaced_pod_log("p", "default", previous=True)
    assert previous.endswith("line 4\n")


# ----------------------------------------------------------------------------- auth + accounting


def test_require_token(bare_kube: KubeTestServer, tmp_path: Path) -> None:
    bare_kube.require_token({"good"})
    bad = kubernetes.config.new_client_from_config(
        config_file=str(bare_kube.kubeconfig(tmp_path / "bad", token="stale"))
    )
    good = kubernetes.config.new_client_from_config(
        config_file=str(bare_kube.kubeconfig(tmp_path / "good", token="good"))
    )
    try:
        with pytest.raises(ApiException) as exc:
            kubernetes.client.CoreV1Api(bad).list_namespace()
        assert exc.value.status == 401
        assert status_of(exc.value) == {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": "Unauthorized",
            "reason": "Unauthorized",
            "code": 401,
        }
        assert kubernetes.client.CoreV1Api(good).list_namespace().items
    finally:
        bad.close()
        good.close()


def test_request_accounting(
    api: Any,
    make_trainjob: Callable[..., Any],
    make_pod: Callable[..., Any],
    bare_kube: KubeTestServer,
) -> None:
    co = custom(api)
    v1 = kubernetes.client.CoreV1Api(api)
    bare_kube.requests.clear()
    co.create_namespaced_custom_object(
        GROUP, VERSION, "default", "trainjobs", make_trainjob("job-a")
    )
    co.create_namespaced_custom_object(
        GROUP, VERSION, "default", "trainjobs", make_trainjob("job-b")
    )
    co.get_namespaced_custom_object(GROUP, VERSION, "default", "trainjobs", "job-a")
    v1.create_namespaced_pod("default", make_pod("job-a-node-0-0"))
    v1.list_namespaced_pod("default", label_selector="trainer.kubeflow.org/trainjob-name=job-a")
    v1.list_namespaced_event("default", field_selector="involvedObject.name=job-a")
    with pytest.raises(ApiException):
        v1.read_namespaced_pod_log("job-a-node-0-0", "default")
    co.list_namespaced_custom_object(GROUP, VERSION, "default", "trainjobs")

    reqs = bare_kube.requests
    assert reqs.count(job="job-a") == 6
    assert reqs.count(job="job-b") == 1
    assert reqs.count(verb="create", resource="trainjobs") == 2
    assert reqs.count(job="job-a", resource="pods") == 3
    assert reqs.count(resource="pods/log") == 1
    assert reqs.count(verb="list") == 3
    record = reqs.filter(verb="get", resource="pods/log")[0]
    assert (record.status, record.subresource, record.namespace) == (400, "log", "default")
    assert record.user_agent.startswith("OpenAPI-Generator")
    reqs.clear()
    assert len(reqs) == 0


def test_plugin_fixtures(kube: KubeTestServer, kubeconfig_path: Path) -> None:
    client = kubernetes.config.new_client_from_config(config_file=str(kubeconfig_path))
    try:
        namespaces = kubernetes.client.CoreV1Api(client).list_namespace()
        assert {"default", "kf-test"} <= {n.metadata.name for n in namespaces.items}
    finally:
        client.close()
    assert kube.requests.count(verb="list", resource="namespaces") == 1


# ----------------------------------------------------------------------------- asyncio client


async def test_async_client_crud_errors_and_logs(
    aapi: Any,
    make_trainjob: Callable[..., Any],
    make_pod: Callable[..., Any],
    bare_kube: KubeTestServer,
) -> None:
    co = kubernetes_asyncio.client.CustomObjectsApi(aapi)
    v1 = kubernetes_asyncio.client.CoreV1Api(aapi)
    created = await co.create_namespaced_custom_object(
        GROUP, VERSION, "default", "trainjobs", make_trainjob("aj")
    )
    assert created["spec"]["runtimeRef"]["kind"] == "ClusterTrainingRuntime"
    listed = await co.list_namespaced_custom_object(GROUP, VERSION, "default", "trainjobs")
    assert [i["metadata"]["name"] for i in listed["items"]] == ["aj"]
    # kubernetes_asyncio labels a dict body for custom objects as a JSON patch (its first
    # content type); the apiserver cannot decode that, so callers must choose merge.
    with pytest.raises(kubernetes_asyncio.client.ApiException) as exc:
        await co.patch_namespaced_custom_object_status(
            GROUP, VERSION, "default", "trainjobs", "aj", {"status": {"conditions": []}}
        )
    assert exc.value.status == 400
    status = await co.patch_namespaced_custom_object_status(
        GROUP,
        VERSION,
        "default",
        "trainjobs",
        "aj",
        {"status": {"conditions": []}},
        _content_type="application/merge-patch+json",
    )
    assert status["status"] == {"conditions": []}
    with pytest.raises(kubernetes_asyncio.client.ApiException) as exc:
        await co.get_namespaced_custom_object(GROUP, VERSION, "default", "trainjobs", "nope")
    assert exc.value.status == 404
    if bare_kube.validates:
        with pytest.raises(kubernetes_asyncio.client.ApiException) as exc:
            await co.create_namespaced_custom_object(
                GROUP, VERSION, "default", "trainjobs", make_trainjob("bad", num_nodes="x")
            )
        assert exc.value.status == 422
    await co.delete_namespaced_custom_object(GROUP, VERSION, "default", "trainjobs", "aj")

    await v1.create_namespaced_pod("default", make_pod("ap"))
    await v1.patch_namespaced_pod_status("ap", "default", {"status": {"phase": "Running"}})
    bare_kube.logs.append("default", "ap", "node", "hello")

    def later() -> None:
        time.sleep(0.05)
        bare_kube.logs.append("default", "ap", "node", "world")
        bare_kube.logs.close("default", "ap", "node")

    threading.Thread(target=later).start()
    resp = await v1.read_namespaced_pod_log("ap", "default", follow=True, _preload_content=False)
    lines = []
    while line := await resp.content.readline():
        lines.append(line.decode())
    resp.release()
    assert lines == ["hello\n", "world\n"]
    text = await v1.read_namespaced_pod_log("ap", "default", tail_lines=1)
    assert text == "world\n"


def test_a_named_upstream_folder_that_is_absent_warns_and_uses_the_builtin_level(
    tmp_path: Path, make_trainjob: Callable[..., Any]
) -> None:
    with pytest.warns(RuntimeWarning, match="upstream CRDs .* does not exist"):
        server = KubeTestServer(upstream=tmp_path / "absent")
    with server:
        assert server.fidelity == "builtin"
        assert server.validates
        client = kubernetes.config.new_client_from_config(
            config_file=str(server.kubeconfig(tmp_path / "k"))
        )
        try:
            co = custom(client)
            runtimes = co.list_cluster_custom_object(GROUP, VERSION, "clustertrainingruntimes")
            assert "torch-distributed" in {r["metadata"]["name"] for r in runtimes["items"]}
            # The built-in schema checks types: numNodes "x" is refused.
            with pytest.raises(kubernetes.client.ApiException) as refused:
                co.create_namespaced_custom_object(
                    GROUP, VERSION, "default", "trainjobs", make_trainjob("j", num_nodes="x")
                )
            assert refused.value.status == 422
        finally:
            client.close()


def test_delete_collection_and_apply_patch(
    api: Any, make_pod: Callable[..., Any], bare_kube: KubeTestServer
) -> None:
    v1 = kubernetes.client.CoreV1Api(api)
    for name, job in [("a-0", "a"), ("a-1", "a"), ("b-0", "b")]:
        v1.create_namespaced_pod("default", make_pod(name, labels={"job": job}))
    v1.delete_collection_namespaced_pod("default", label_selector="job=a")
    assert [p.metadata.name for p in v1.list_namespaced_pod("default").items] == ["b-0"]

    # Server-side apply (approximated as create-or-merge); fieldManager is required.
    path = "/api/v1/namespaces/default/configmaps/applied"
    headers = {"Content-Type": "application/apply-patch+yaml", "Accept": "application/json"}
    with pytest.raises(ApiException) as exc:
        api.call_api(
            path,
            "PATCH",
            header_params=headers,
            body={"data": {"a": "1"}},
            response_type="object",
            _return_http_data_only=True,
        )
    assert exc.value.status == 422
    made = api.call_api(
        path,
        "PATCH",
        header_params=headers,
        body={"data": {"a": "1"}},
        query_params=[("fieldManager", "test")],
        response_type="object",
        _return_http_data_only=True,
    )
    assert made["data"] == {"a": "1"}
    assert bare_kube.requests.filter(verb="patch", resource="configmaps")[-1].status == 201


def test_log_follow_ends_when_pod_is_deleted(
    api: Any, make_pod: Callable[..., Any], bare_kube: KubeTestServer
) -> None:
    v1 = kubernetes.client.CoreV1Api(api)
    v1.create_namespaced_pod("default", make_pod("p"))
    _running(v1, "p", "node")
    bare_kube.logs.append("default", "p", "node", "only line")

    def delete_later() -> None:
        time.sleep(0.1)
        bare_kube.store.delete(PODS, "default", "p")  # as the controller would

    thread = threading.Thread(target=delete_later)
    thread.start()
    resp = v1.read_namespaced_pod_log("p", "default", follow=True, _preload_content=False)
    assert b"".join(resp.stream()) == b"only line\n"
    thread.join()
