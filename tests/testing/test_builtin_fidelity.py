"""The built-in level of the test bed (no folder of upstream CRDs): schemas derived from
the kubeflow-trainer-api models check fields and types, and the suite's own default
runtimes are what the builder assumes (docs/testing.md, "three levels of fidelity")."""

from __future__ import annotations

from typing import Any

import pytest

from kf_trainer_core.manifest.runtimes import DEFAULT_RUNTIMES, RuntimeInfo
from kf_trainer_core.testing.builtin_runtimes import builtin_runtimes
from kf_trainer_core.testing.crd.builtin import builtin_crds

pytest.importorskip("kubeflow_trainer_api")


def trainjob(**trainer: Any) -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "j", "namespace": "default"},
        "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": trainer},
    }


def test_the_four_crds_are_derived() -> None:
    assert sorted(builtin_crds()) == [
        "clustertrainingruntimes.trainer.kubeflow.org",
        "jobsets.jobset.x-k8s.io",
        "trainingruntimes.trainer.kubeflow.org",
        "trainjobs.trainer.kubeflow.org",
    ]


def test_fields_and_types_are_checked() -> None:
    schema = builtin_crds()["trainjobs.trainer.kubeflow.org"]
    good = trainjob(numNodes=2, resourcesPerNode={"limits": {"nvidia.com/gpu": 4, "cpu": "2"}})
    assert schema.validate(good) == []
    assert schema.unknown_fields(good) == []
    assert schema.validate(trainjob(numNodes="two"))  # a type error
    assert schema.unknown_fields(trainjob(numNode=2)) == ["spec.trainer.numNode"]


def test_every_builtin_runtime_is_valid_and_reads_back_as_the_builder_assumes() -> None:
    schema = builtin_crds()["clustertrainingruntimes.trainer.kubeflow.org"]
    runtimes = builtin_runtimes()
    assert sorted(r["metadata"]["name"] for r in runtimes) == sorted(DEFAULT_RUNTIMES)
    for manifest in runtimes:
        assert schema.validate(manifest) == [], manifest["metadata"]["name"]
        assert schema.unknown_fields(manifest) == []
        info = RuntimeInfo.from_manifest(manifest)
        expected = DEFAULT_RUNTIMES[info.name]
        assert (info.framework, info.policy, info.replicated_jobs) == (
            expected.framework,
            expected.policy,
            expected.replicated_jobs,
        )
        assert info.image  # every trainer step names its image


def test_the_builtin_runtimes_pass_the_real_crd_too() -> None:
    from kf_trainer_core.testing.crd import find_upstream, load_upstream_crds

    root = find_upstream()
    if root is None:
        pytest.skip("no folder of upstream CRDs here (KF_TRAINER_UPSTREAM)")
    schema = load_upstream_crds(root)["clustertrainingruntimes.trainer.kubeflow.org"]
    for manifest in builtin_runtimes():
        assert schema.unknown_fields(manifest) == [], manifest["metadata"]["name"]
        assert schema.validate(schema.prune(manifest)) == [], manifest["metadata"]["name"]
