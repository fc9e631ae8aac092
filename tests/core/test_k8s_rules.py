"""The core's Kubernetes rules that the test server, the local backend and the informer
share: one selector grammar, one patch implementation, one runtime loader."""

from __future__ import annotations

import pytest

from kf_trainer_core.backends.local.store import Selector
from kf_trainer_core.k8s.patch import apply_json_patch
from kf_trainer_core.k8s.selectors import LabelSelector
from kf_trainer_core.k8s.status import StatusError
from kf_trainer_core.programs.informer import label_predicate
from kf_trainer_core.testing.crd import find_upstream
from kf_trainer_core.testing.runtimes import install_runtimes, load_upstream_runtimes
from kf_trainer_core.testing.store import CLUSTER_TRAINING_RUNTIMES, Store

OBJECTS = [
    {"metadata": {"labels": {"team": "a", "tier": "gold"}}},
    {"metadata": {"labels": {"team": "b"}}},
    {"metadata": {"labels": {}}},
    {"metadata": {}},
]


@pytest.mark.parametrize(
    "selector",
    ["team=a", "team==a", "team!=a", "team in (a,b)", "team notin (a)", "tier", "!tier", ""],
)
def test_informer_predicate_decides_as_the_server(selector: str) -> None:
    # The informer once split on "=" only: "team!=a" became key "team!" and matched none.
    server = LabelSelector.parse(selector)
    predicate = label_predicate(selector)
    for obj in OBJECTS:
        assert predicate(obj) == server.matches(obj["metadata"].get("labels")), obj


@pytest.mark.parametrize("selector", ["a=b,", "a b", "a=b c", "-a=b"])
def test_local_backend_rejects_malformed_selectors_as_the_server(selector: str) -> None:
    with pytest.raises(StatusError) as local:
        Selector.parse("default", selector, None)
    with pytest.raises(StatusError) as server:
        LabelSelector.parse(selector)
    assert local.value.code == 400
    assert local.value.message == server.value.message


def test_json_patch_failures_quote_no_document_values() -> None:
    doc = {"data": {"token": "s3cret-value"}, "items": [1]}
    failing = [
        [{"op": "replace", "path": "/data/missing/x", "value": "s3cret-value"}],
        [{"op": "add", "value": "s3cret-value"}],
        [{"op": "test", "path": "/data/token", "value": "other"}],
        [{"op": "move", "from": "/data/nope", "path": "/x"}],
        [{"op": "add", "path": "/items/9", "value": "s3cret-value"}],
    ]
    for ops in failing:
        with pytest.raises(ValueError) as exc:
            apply_json_patch(doc, ops)
        assert "s3cret" not in str(exc.value), ops
    assert doc == {"data": {"token": "s3cret-value"}, "items": [1]}  # input untouched


def test_one_runtime_loader_for_server_and_controller() -> None:
    upstream = find_upstream()
    if upstream is None:
        pytest.skip("no upstream data folder")
    loaded = load_upstream_runtimes(upstream)
    assert loaded, "the upstream runtimes were not found"
    loaded[0]["metadata"]["name"] = "edited"  # callers get copies
    assert load_upstream_runtimes(upstream)[0]["metadata"]["name"] != "edited"
    store = Store()
    names = install_runtimes(store, upstream)
    stored = {o["metadata"]["name"]: o for o in store.list(CLUSTER_TRAINING_RUNTIMES)[0]}
    assert set(names) == set(stored)
    images = [
        c["image"]
        for o in stored.values()
        for rj in o["spec"]["template"]["spec"]["replicatedJobs"]
        for c in rj["template"]["spec"]["template"]["spec"].get("containers") or []
    ]
    # The release overlay pins Trainer's own images; none is left untagged.
    assert all(":" in i.rpartition("/")[2] for i in images if "ghcr.io/kubeflow/trainer" in i)
    for obj in stored.values():
        assert obj["metadata"]["labels"]["trainer.kubeflow.org/webhook-validation"] == "disabled"
