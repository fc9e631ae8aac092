"""The kubelet's rules both emulations share (``emulation/kubelet.py``, ``emulation/logs.py``):
a container's environment, its end, and the pods/log query."""

from __future__ import annotations

import base64
import signal
from pathlib import Path
from typing import Any

import pytest

from kf_trainer_core.emulation import kubelet, logs
from kf_trainer_core.k8s.status import StatusError

POD: dict[str, Any] = {
    "metadata": {
        "name": "job-node-0-0-abcde",
        "namespace": "ns",
        "uid": "u-1",
        "labels": {"role": "node"},
        "annotations": {},
    },
    "spec": {"nodeName": "n1"},
    "status": {"podIP": "10.0.0.7", "hostIP": "172.18.0.2"},
}
SECRETS = {"creds": {"data": {"token": base64.b64encode(b"s3cr3t").decode(), "bad": "abc"}}}
MAPS = {"settings": {"data": {"MODE": "fast"}}}
SOURCES = {kubelet.SECRET: SECRETS.get, kubelet.CONFIG_MAP: MAPS.get}


def resolve(env: list[Any], env_from: list[Any] | None = None, **kw: Any) -> Any:
    container = {"name": "node", "env": env, "envFrom": env_from or []}
    return kubelet.resolve_env(container, "ns", kw.get("sources", SOURCES), POD)


def test_env_is_resolved_as_the_kubelet_does() -> None:
    env, error = resolve(
        [
            {"name": "A", "value": "a"},
            {"name": "B", "value": "$(A)-$(MODE)-$(NOPE)-$$(A)"},
            {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}},
            {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "ROLE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['role']"}}},
            {"name": "SA", "valueFrom": {"fieldRef": {"fieldPath": "spec.serviceAccountName"}}},
            {"name": "CPU", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}},
            {"value": "no name"},
        ],
        [{"configMapRef": {"name": "settings"}}, {"secretRef": {"name": "creds"}, "prefix": "S_"}],
    )
    assert error is None
    assert env == {
        "MODE": "fast",
        "S_token": "s3cr3t",  # an entry that is not base64 is left out
        "A": "a",
        "B": "a-fast-$(NOPE)-$(A)",
        "TOKEN": "s3cr3t",
        "POD": "job-node-0-0-abcde",
        "IP": "10.0.0.7",
        "ROLE": "node",
        "SA": "default",
    }


def test_a_missing_reference_is_the_kubelets_error_and_optional_ones_are_skipped() -> None:
    ref = {"secretKeyRef": {"name": "creds", "key": "other"}}
    env, error = resolve([{"name": "A", "value": "1"}, {"name": "X", "valueFrom": ref}])
    assert error == "couldn't find key other in Secret ns/creds"
    assert env == {"A": "1"}  # what can be resolved still is
    missing = {"configMapKeyRef": {"name": "absent", "key": "k"}}
    assert resolve([{"name": "X", "valueFrom": missing}])[1] == 'configmap "absent" not found'
    _, error = resolve([], [{"secretRef": {"name": "absent"}}])
    assert error == 'secret "absent" not found'
    optional = {"secretKeyRef": {"name": "absent", "key": "k", "optional": True}}
    assert resolve([{"name": "X", "valueFrom": optional}]) == ({}, None)
    # A kind this kubelet does not serve (the local store keeps no ConfigMaps): left out.
    only_secrets = {kubelet.SECRET: SECRETS.get}
    assert resolve([{"name": "X", "valueFrom": missing}], sources=only_secrets) == ({}, None)


def test_a_containers_end() -> None:
    assert kubelet.exit_status(0) == (0, None)
    assert kubelet.exit_status(3) == (3, None)
    assert kubelet.exit_status(-signal.SIGKILL) == (137, "SIGKILL")


def test_the_termination_log_is_capped(tmp_path: Path) -> None:
    path = tmp_path / "termination-log"
    assert kubelet.read_termination_log(path) is None
    assert kubelet.read_termination_log(None) is None
    path.write_bytes(b"")
    assert kubelet.read_termination_log(path) is None
    path.write_bytes("é".encode() * 4096)
    text = kubelet.read_termination_log(path)
    assert text is not None
    assert len(text.encode()) <= kubelet.TERMINATION_MESSAGE_LIMIT


def test_log_stamps() -> None:
    ns = logs.parse_stamp("2026-01-02T03:04:05.120000000Z")
    assert logs.format_stamp(ns) == "2026-01-02T03:04:05.120000000Z"
    assert logs.shown_stamp(ns) == "2026-01-02T03:04:05.12Z"
    assert logs.shown_stamp(logs.parse_stamp("2026-01-02T03:04:05Z")) == "2026-01-02T03:04:05Z"
    assert logs.parse_stamp("2026-01-02T05:04:05+02:00") == logs.parse_stamp("2026-01-02T03:04:05Z")
    with pytest.raises(StatusError) as info:
        logs.since_time("yesterday")
    assert info.value.code == 400


def test_the_log_query() -> None:
    lines = [(1, "one"), (2, "two"), (3, "three")]
    assert logs.select(lines, 2, None) == [(2, "two"), (3, "three")]
    assert logs.select(lines, None, 1) == [(3, "three")]
    assert logs.select(lines, None, 0) == []
    assert logs.render(lines[:1], False) == b"one\n"
    assert logs.render(lines[:1], True) == b"1970-01-01T00:00:00.000000001Z one\n"


def test_which_container_and_whether_it_started() -> None:
    pod = {
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "a"}, {"name": "b"}], "initContainers": [{"name": "i"}]},
        "status": {
            "containerStatuses": [
                {"name": "a", "state": {"waiting": {"reason": "ErrImagePull"}}},
                {"name": "b", "state": {"running": {}}},
            ]
        },
    }
    with pytest.raises(StatusError, match=r"choose one of: \[a b\] or one of the init"):
        logs.log_container(pod, None)
    with pytest.raises(StatusError, match="container c is not valid for pod p"):
        logs.log_container(pod, "c")
    assert logs.log_container(pod, "i") == "i"
    with pytest.raises(StatusError, match="is waiting to start: image can't be pulled"):
        logs.check_started(pod, "a", lambda: True)
    logs.check_started(pod, "b", lambda: False)
    with pytest.raises(StatusError, match="waiting to start: ContainerCreating"):
        logs.check_started({"metadata": {"name": "p"}}, "a", lambda: False)
    logs.check_started({"metadata": {"name": "p"}}, "a", lambda: True)
