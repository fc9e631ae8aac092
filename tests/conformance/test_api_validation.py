"""What the API server itself says about a TrainJob, before any controller sees it:
strict decoding (400 for an unknown field), the CRD's schema and CEL rules (422 with the
rule's message: name format and length, ``managedBy``, immutable fields). The same
answer, code, reason and message, from the test bed and the real kube-apiserver."""

from __future__ import annotations

import json
from typing import Any

import pytest
from conformance_support import Cluster
from kubernetes import client as k8s

GROUP, VERSION, PLURAL = "trainer.kubeflow.org", "v1alpha1", "trainjobs"


def _job(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TrainJob",
        "metadata": {"name": name},
        # Suspended: no controller acts on it (nothing to clean up, nothing to wait for).
        "spec": {"runtimeRef": {"name": "torch-distributed"}, "suspend": True, **spec},
    }


def _create(cluster: Cluster, body: dict[str, Any]) -> dict[str, Any]:
    api = k8s.CustomObjectsApi(cluster.api())
    return dict(
        api.create_namespaced_custom_object(
            GROUP, VERSION, cluster.namespace, PLURAL, body, field_validation="Strict"
        )
    )


def _refused(cluster: Cluster, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    with pytest.raises(k8s.ApiException) as info:
        _create(cluster, body)
    return info.value.status, json.loads(info.value.body)


def test_an_unknown_spec_field_is_400_naming_it(cluster: Cluster) -> None:
    code, status = _refused(cluster, _job("unknown-field", numNode=2))
    assert code == 400
    assert status["reason"] == "BadRequest"
    assert 'unknown field "spec.numNode"' in status["message"]


def test_an_unknown_nested_field_is_400_naming_its_path(cluster: Cluster) -> None:
    code, status = _refused(cluster, _job("unknown-nested", trainer={"numNode": 2}))
    assert code == 400
    assert 'unknown field "spec.trainer.numNode"' in status["message"]


@pytest.mark.parametrize(
    ("name", "rule"),
    [
        ("a" * 64, "metadata.name must be no more than 63 characters"),
        ("9starts-with-a-digit", "metadata.name must match RFC 1035 DNS label format"),
        ("has.a.dot", "metadata.name must match RFC 1035 DNS label format"),
    ],
)
def test_a_bad_name_is_422_with_the_rule(cluster: Cluster, name: str, rule: str) -> None:
    code, status = _refused(cluster, _job(name))
    assert code == 422
    assert status["reason"] == "Invalid"
    assert rule in status["message"]


def test_a_63_character_name_is_accepted(cluster: Cluster) -> None:
    created = _create(cluster, _job("a" * 63))
    assert created["metadata"]["name"] == "a" * 63


def test_an_unknown_managed_by_is_422(cluster: Cluster) -> None:
    code, status = _refused(cluster, _job("managed-elsewhere", managedBy="example.com/other"))
    assert code == 422
    assert "ManagedBy must be trainer.kubeflow.org/trainjob-controller" in status["message"]


def test_a_wrong_type_is_422_naming_the_field(cluster: Cluster) -> None:
    code, status = _refused(cluster, _job("wrong-type", trainer={"numNodes": "two"}))
    assert code == 422
    assert "spec.trainer.numNodes" in status["message"]


def test_managed_by_is_immutable(cluster: Cluster) -> None:
    name = "immutable-managed-by"
    _create(cluster, _job(name, managedBy="trainer.kubeflow.org/trainjob-controller"))
    api = k8s.CustomObjectsApi(cluster.api())
    with pytest.raises(k8s.ApiException) as info:
        api.patch_namespaced_custom_object(
            GROUP,
            VERSION,
            cluster.namespace,
            PLURAL,
            name,
            {"spec": {"managedBy": "kueue.x-k8s.io/multikueue"}},
        )
    assert info.value.status == 422
    assert "field is immutable" in json.loads(info.value.body)["message"]


# -- the 422 body, cause by cause (kube-apiserver 1.36's words) ---------------------
NOT_CHECKED = {
    "reason": "FieldValueInvalid",
    "field": "<nil>",
    "message": "Invalid value: null: some validation rules were not checked because the "
    "object was invalid; correct the existing errors to complete validation",
}
MANAGED_BY_RULE = (
    "ManagedBy must be trainer.kubeflow.org/trainjob-controller or kueue.x-k8s.io/multikueue if set"
)


def _patch(cluster: Cluster, name: str, body: Any, **kw: Any) -> dict[str, Any]:
    api = k8s.CustomObjectsApi(cluster.api())
    return dict(
        api.patch_namespaced_custom_object(
            GROUP, VERSION, cluster.namespace, PLURAL, name, body, **kw
        )
    )


def _patch_refused(cluster: Cluster, name: str, body: Any, **kw: Any) -> tuple[int, Any]:
    with pytest.raises(k8s.ApiException) as info:
        _patch(cluster, name, body, **kw)
    return info.value.status, json.loads(info.value.body)


def test_a_rule_on_a_string_shows_the_value(cluster: Cluster) -> None:
    # Not its schema type ("string"), which is what an older apiserver printed.
    code, status = _refused(cluster, _job("bad-managed-by", managedBy="x/y"))
    assert code == 422
    assert status["details"]["causes"] == [
        {
            "reason": "FieldValueInvalid",
            "field": "spec.managedBy",
            "message": f'Invalid value: "x/y": {MANAGED_BY_RULE}',
        }
    ]
    assert status["message"] == (
        'TrainJob.trainer.kubeflow.org "bad-managed-by" is invalid: spec.managedBy: '
        f'Invalid value: "x/y": {MANAGED_BY_RULE}'
    )


@pytest.mark.parametrize(
    ("field", "change", "shown"),
    [
        ("activeDeadlineSeconds", 200, "Invalid value: 200: field is immutable"),
        ("runtimeRef", {"name": "other"}, "Invalid value: field is immutable"),
        ("trainer", {"numNodes": 3}, "Invalid value: field is immutable"),
        (
            "initializer",
            {"dataset": {"storageUri": "hf://other"}},
            "Invalid value: field is immutable",
        ),
    ],
)
def test_an_immutable_field_names_a_scalar_value_and_no_object(
    cluster: Cluster, field: str, change: Any, shown: str
) -> None:
    name = f"immutable-{field.lower()}"
    _create(
        cluster,
        _job(
            name,
            activeDeadlineSeconds=100,
            trainer={"numNodes": 1},
            initializer={"dataset": {"storageUri": "hf://data"}},
        ),
    )
    code, status = _patch_refused(cluster, name, {"spec": {field: change}})
    assert code == 422
    assert status["details"]["causes"] == [
        {"reason": "FieldValueInvalid", "field": f"spec.{field}", "message": shown}
    ]


def test_a_rule_on_the_object_itself_names_the_field_nil(cluster: Cluster) -> None:
    code, status = _refused(cluster, _job("has.a.dot"))
    assert code == 422
    assert status["details"]["causes"] == [
        {
            "reason": "FieldValueInvalid",
            "field": "<nil>",
            "message": "Invalid value: metadata.name must match RFC 1035 DNS label format",
        }
    ]


@pytest.mark.parametrize(
    ("spec", "first"),
    [
        (
            {"trainer": {"numNodes": "two"}},
            {
                "reason": "FieldValueTypeInvalid",
                "field": "spec.trainer.numNodes",
                "message": 'Invalid value: "string": spec.trainer.numNodes in body must be '
                'of type integer: "string"',
            },
        ),
        # A missing required field stops the rules too.
        (
            {"runtimeRef": {"kind": "ClusterTrainingRuntime"}},
            {
                "reason": "FieldValueRequired",
                "field": "spec.runtimeRef.name",
                "message": "Required value",
            },
        ),
    ],
)
def test_rules_not_checked_after_a_blocking_error(
    cluster: Cluster, spec: dict[str, Any], first: dict[str, str]
) -> None:
    code, status = _refused(cluster, _job("blocked", **spec))
    assert code == 422
    assert status["details"]["causes"] == [first, NOT_CHECKED]


def test_a_duplicate_key_is_shown_as_json(cluster: Cluster) -> None:
    env = [{"name": "<a>&", "value": "1"}, {"name": "<a>&", "value": "2"}]
    code, status = _refused(cluster, _job("duplicate-env", trainer={"env": env}))
    assert code == 422
    assert status["details"]["causes"] == [
        {
            "reason": "FieldValueDuplicate",
            "field": "spec.trainer.env[1]",
            "message": 'Duplicate value: {"name":"\\u003ca\\u003e\\u0026"}',
        }
    ]


def test_a_null_field_is_dropped_not_refused(cluster: Cluster) -> None:
    # A client that writes absent fields as null (a model dumped without exclude_none)
    # gets its job: the apiserver drops the nulls of fields that are neither nullable
    # nor defaulted, a map's entries too, before validating.
    body = _job(
        "nulls",
        initializer=None,
        trainer={"numNodes": None, "resourcesPerNode": {"limits": {"cpu": None, "memory": "1Gi"}}},
    )
    created = _create(cluster, body)
    assert "initializer" not in created["spec"]
    assert created["spec"]["trainer"] == {"resourcesPerNode": {"limits": {"memory": "1Gi"}}}


# -- unknown fields under strict validation --------------------------------------------
def test_unknown_fields_are_listed_metadata_first_then_sorted(cluster: Cluster) -> None:
    body = _job("unknown-order", zz=1, trainer={"zz": 1, "aa": 1}, aa=1)
    body["metadata"].update(zz=1, aa=1)
    body["zz"] = 1
    code, status = _refused(cluster, body)
    assert code == 400
    assert status["reason"] == "BadRequest"
    assert status["message"] == (
        'TrainJob in version "v1alpha1" cannot be handled as a TrainJob: strict decoding '
        'error: unknown field "metadata.aa", unknown field "metadata.zz", unknown field '
        '"spec.aa", unknown field "spec.trainer.aa", unknown field "spec.trainer.zz", '
        'unknown field "spec.zz", unknown field "zz"'
    )


@pytest.mark.parametrize("patch_type", ["merge", "json"])
def test_a_patch_adding_an_unknown_field_is_422_naming_the_patch(
    cluster: Cluster, patch_type: str
) -> None:
    # Decoded whole, a body with an unknown field is a 400; patched in, the patched
    # object is invalid: 422, the field "patch", its value the patched object.
    name = f"strict-{patch_type}"
    _create(cluster, _job(name))
    api = cluster.api()
    body: Any = (
        {"spec": {"nope": 1}}
        if patch_type == "merge"
        else [{"op": "add", "path": "/spec/nope", "value": 1}]
    )
    content = f"application/{patch_type}-patch+json"
    with pytest.raises(k8s.ApiException) as info:
        api.call_api(
            f"/apis/{GROUP}/{VERSION}/namespaces/{cluster.namespace}/{PLURAL}/{name}",
            "PATCH",
            query_params=[("fieldValidation", "Strict")],
            header_params={"Content-Type": content, "Accept": "application/json"},
            body=body,
            response_type="object",
            auth_settings=["BearerToken"],
        )
    assert info.value.status == 422
    status = json.loads(info.value.body)
    assert status["reason"] == "Invalid"
    (cause,) = status["details"]["causes"]
    assert set(status["details"]) == {"causes"}
    assert cause["field"] == "patch"
    assert cause["reason"] == "FieldValueInvalid"
    suffix = ': strict decoding error: unknown field "spec.nope"'
    assert cause["message"].startswith('Invalid value: "{')
    assert cause["message"].endswith(suffix)
    shown = json.loads(
        json.loads(cause["message"].removeprefix("Invalid value: ").removesuffix(suffix))
    )
    assert shown["metadata"]["name"] == name
    assert shown["spec"]["nope"] == 1
    assert status["message"] == ' "" is invalid: patch: ' + cause["message"]
    # Not applied; without Strict it is applied, the field pruned.
    assert "nope" not in _patch(cluster, name, {"spec": {"suspend": True}})["spec"]
    assert "nope" not in _patch(cluster, name, {"spec": {"nope": 1}})["spec"]
