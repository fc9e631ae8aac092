"""The generic registry's rules, which the test bed and the local backend take from one
place (``kf_trainer_core.emulation``): each answer is checked on the test bed and the real
kube-apiserver, and the local backend's answer to the same request is held to it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conformance_support import Cluster
from kubernetes import client as k8s

from kf_trainer_core.backends.local.transport import LocalTransport
from kf_trainer_core.config import LocalConfig
from kf_trainer_core.k8s.calls import Create, Delete, Get, ListObjects, OpenWatch, Patch
from kf_trainer_core.k8s.errors import ApiError
from kf_trainer_core.k8s.resources import SECRETS


@pytest.fixture
def local(tmp_path: Path) -> Iterator[LocalTransport]:
    transport = LocalTransport(LocalConfig(state_dir=str(tmp_path / "local-state")))
    yield transport
    transport.close()


def _secret(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"a": "1"}}, "stringData": {"k": "v"}}


def _local_failure(local: LocalTransport, call: Any) -> tuple[int, str]:
    with pytest.raises(ApiError) as info:
        local.perform(call)
    return info.value.code, str((info.value.status or {}).get("message"))


@pytest.mark.parametrize(
    ("field", "why"),
    [("uid", "deleted and then recreated"), ("resource_version", "modified")],
)
def test_a_delete_whose_precondition_fails_is_409_in_the_apiservers_words(
    cluster: Cluster, local: LocalTransport, field: str, why: str
) -> None:
    core = k8s.CoreV1Api(cluster.api())
    meta = core.create_namespaced_secret(cluster.namespace, _secret("pre")).metadata
    options = k8s.V1DeleteOptions(preconditions=k8s.V1Preconditions(**{field: "1"}))
    with pytest.raises(k8s.ApiException) as info:
        core.delete_namespaced_secret("pre", cluster.namespace, body=options)
    body = json.loads(info.value.body)
    label = "UID" if field == "uid" else "ResourceVersion"
    have = getattr(meta, field)
    assert info.value.status == 409
    assert body["details"] == {"name": "pre", "kind": "Secret"}
    assert body["message"] == (
        f'Operation cannot be fulfilled on Secret "pre": the {label} in the precondition (1) '
        f"does not match the {label} in record ({have}). The object might have been {why}"
    )

    local_meta = local.perform(Create(SECRETS, "local", _secret("pre")))["metadata"]
    local_have = local_meta["uid" if field == "uid" else "resourceVersion"]
    with pytest.raises(ApiError) as local_info:
        local.perform(Delete(SECRETS, "local", "pre", **{field: "1"}))
    message = body["message"].replace(f"record ({have})", f"record ({local_have})")
    assert local_info.value.status == {**body, "message": message}


def test_a_patch_that_changes_nothing_keeps_the_resource_version(
    cluster: Cluster, local: LocalTransport
) -> None:
    core = k8s.CoreV1Api(cluster.api())
    before = core.create_namespaced_secret(cluster.namespace, _secret("same")).metadata
    after = core.patch_namespaced_secret(
        "same", cluster.namespace, {"metadata": {"labels": {"a": "1"}}}
    ).metadata
    assert after.resource_version == before.resource_version

    created = local.perform(Create(SECRETS, "local", _secret("same")))
    patched = local.perform(Patch(SECRETS, "local", "same", {"metadata": {"labels": {"a": "1"}}}))
    assert patched["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    assert local.perform(Get(SECRETS, "local", "same")) == patched


def test_a_malformed_name_is_422_with_the_rule_on_both(
    cluster: Cluster, local: LocalTransport
) -> None:
    core = k8s.CoreV1Api(cluster.api())
    with pytest.raises(k8s.ApiException) as info:
        core.create_namespaced_secret(cluster.namespace, _secret("Not_A_Name"))
    message = json.loads(info.value.body)["message"]
    assert info.value.status == 422
    assert "a lowercase RFC 1123 subdomain must consist of" in message

    code, local_message = _local_failure(local, Create(SECRETS, "local", _secret("Not_A_Name")))
    assert (code, local_message) == (422, message)


def test_a_field_selector_the_registry_does_not_support_is_400_on_both(
    cluster: Cluster, local: LocalTransport
) -> None:
    core = k8s.CoreV1Api(cluster.api())
    with pytest.raises(k8s.ApiException) as info:
        core.list_namespaced_secret(cluster.namespace, field_selector="data.k=v")
    message = json.loads(info.value.body)["message"]
    assert info.value.status == 400
    assert message == "field label not supported: data.k"

    local.perform(Create(SECRETS, "local", _secret("any")))
    call = ListObjects(SECRETS, "local", field_selector="data.k=v")
    assert _local_failure(local, call) == (400, message)
    # and the same for a watch: it is refused before it starts
    watch = OpenWatch(SECRETS, "local", None, field_selector="data.k=v")
    with pytest.raises(ApiError) as refused:
        local.open_stream(watch)
    assert (refused.value.code, str((refused.value.status or {}).get("message"))) == (400, message)


#: Labels in turn after the secret's creation (``a=1``), seen by a watch of ``a=1``:
#: it leaves, changes unseen, comes back, changes in view.
_RELABELS = ({"a": "2"}, {"a": "3"}, {"a": "1"}, {"a": "1", "b": "x"})
_SEEN = ["DELETED", "ADDED", "MODIFIED"]


def test_a_label_selector_watch_sees_an_object_leave_and_come_back_on_both(
    cluster: Cluster, local: LocalTransport
) -> None:
    core = k8s.CoreV1Api(cluster.api())
    start = core.create_namespaced_secret(cluster.namespace, _secret("moves"))
    for labels in _RELABELS:
        core.patch_namespaced_secret("moves", cluster.namespace, {"metadata": {"labels": labels}})
    resp = core.list_namespaced_secret(
        cluster.namespace,
        label_selector="a=1",
        watch=True,
        resource_version=start.metadata.resource_version,
        timeout_seconds=1,
        _preload_content=False,
    )
    try:
        events = [json.loads(line) for line in resp.data.decode().splitlines() if line.strip()]
    finally:
        resp.release_conn()
    assert [e["type"] for e in events] == _SEEN
    # A DELETED for an object leaving the selector carries its previous state (the
    # last one the watch selected) at the version of the change that made it leave.
    left = events[0]["object"]["metadata"]
    assert left["labels"] == {"a": "1"}
    assert int(left["resourceVersion"]) > int(start.metadata.resource_version)

    created = local.perform(Create(SECRETS, "local", _secret("moves")))
    for labels in _RELABELS:
        local.perform(Patch(SECRETS, "local", "moves", {"metadata": {"labels": labels}}))
    rv = created["metadata"]["resourceVersion"]
    stream = local.open_stream(
        OpenWatch(SECRETS, "local", rv, label_selector="a=1", timeout_seconds=1, bookmarks=False)
    )
    local_events = []
    while (line := local.read_line(stream)) is not None:
        local_events.append(json.loads(line))
    assert [e["type"] for e in local_events] == _SEEN
    local_left = local_events[0]["object"]["metadata"]
    assert local_left["labels"] == {"a": "1"}
    assert int(local_left["resourceVersion"]) > int(rv)
