"""Lineage as plain data: storage URIs → OpenLineage (namespace, name), credentials
removed, and the inputs stamped onto the TrainJob as an annotation."""

from __future__ import annotations

import json

import pytest

from kf_trainer_core.manifest.builder import SPEC_HASH_ANNOTATION, build_trainjob, spec_hash
from kf_trainer_core.manifest.lineage import (
    LINEAGE_INPUTS_ANNOTATION,
    dataset_of_uri,
    redact_uri,
    result_outputs,
    run_facet,
    spec_inputs,
)
from kf_trainer_core.spec import (
    BuiltinTrainer,
    CustomTrainer,
    DataCacheInitializer,
    DatasetInitializer,
    HuggingFaceDatasetInitializer,
    HuggingFaceModelInitializer,
    Initializer,
    ModelInitializer,
    S3DatasetInitializer,
    S3ModelInitializer,
    TorchTuneConfig,
    TrainJobSpec,
)


def train() -> dict[str, str]:
    return {"model_uri": "s3://models/run-7"}


@pytest.mark.parametrize(
    ("uri", "role", "namespace", "name"),
    [
        ("s3://bucket/data/day-1", "dataset", "s3://bucket", "data/day-1"),
        ("s3://bucket", "dataset", "s3://bucket", "/"),
        ("gs://b/p/q", "model", "gs://b", "p/q"),
        ("hf://tatsu-lab/alpaca", "dataset", "https://huggingface.co", "datasets/tatsu-lab/alpaca"),
        (
            "hf://meta-llama/Llama-3.2-1B",
            "model",
            "https://huggingface.co",
            "meta-llama/Llama-3.2-1B",
        ),
        ("pvc://models/run-7", "model", "pvc://team-a/models", "run-7"),
        ("file:///data/train", "dataset", "file", "/data/train"),
        ("hdfs://nn:8020/warehouse/t", "dataset", "hdfs://nn:8020", "/warehouse/t"),
    ],
)
def test_storage_uris_follow_the_naming_spec(
    uri: str, role: str, namespace: str, name: str
) -> None:
    found = dataset_of_uri(uri, role=role, source="x", k8s_namespace="team-a")
    assert (found.namespace, found.name) == (namespace, name)


def test_a_claim_without_a_known_namespace() -> None:
    assert dataset_of_uri("pvc://models/a", role="model", source="x").namespace == "pvc://models"


@pytest.mark.parametrize(
    "uri",
    [
        "https://user:s3cr3t-pass@data.example.com/train.tar?X-Amz-Signature=abcdef123#frag",
        "s3://AKIAABCDEFGHIJKLMNOP:s3cr3t-pass@bucket/x?X-Amz-Signature=abcdef123",
    ],
)
def test_credentials_never_reach_lineage(uri: str) -> None:
    found = dataset_of_uri(uri, role="dataset", source="x")
    text = json.dumps(found.as_dict())
    for secret in ("s3cr3t-pass", "abcdef123", "AKIAABCDEFGHIJKLMNOP", "user:", "frag"):
        assert secret not in text
    assert redact_uri(uri).endswith(("/train.tar", "/x"))


def test_spec_inputs_from_both_initializers() -> None:
    spec = TrainJobSpec(
        runtime="torchtune-llama3.2-1b",
        trainer=BuiltinTrainer(config=TorchTuneConfig()),
        initializer=Initializer(
            dataset=HuggingFaceDatasetInitializer(storage_uri="hf://tatsu-lab/alpaca"),
            model=HuggingFaceModelInitializer(
                storage_uri="meta-llama/Llama-3.2-1B-Instruct",
                env={"HF_ENDPOINT": "https://hub.internal"},
            ),
        ),
    )
    found = [d.as_dict() for d in spec_inputs(spec)]
    assert found == [
        {
            "namespace": "https://huggingface.co",
            "name": "datasets/tatsu-lab/alpaca",
            "uri": "hf://tatsu-lab/alpaca",
            "role": "dataset",
            "source": "HuggingFaceDatasetInitializer",
        },
        {
            "namespace": "https://hub.internal",
            "name": "meta-llama/Llama-3.2-1B-Instruct",
            "uri": "hf://meta-llama/Llama-3.2-1B-Instruct",
            "role": "model",
            "source": "HuggingFaceModelInitializer",
        },
    ]


def test_s3_and_generic_initializers() -> None:
    spec = TrainJobSpec(
        trainer=CustomTrainer(train),
        initializer=Initializer(
            dataset=S3DatasetInitializer(storage_uri="s3://data/day-1", secret_ref="s3-keys"),
            model=S3ModelInitializer(storage_uri="s3://models/base"),
        ),
    )
    assert [(d.namespace, d.name, d.role) for d in spec_inputs(spec)] == [
        ("s3://data", "day-1", "dataset"),
        ("s3://models", "base", "model"),
    ]
    generic = TrainJobSpec(
        trainer=CustomTrainer(train),
        initializer=Initializer(
            dataset=DatasetInitializer(storage_uri="pvc://shared/day-1"),
            model=ModelInitializer(storage_uri="file:///models/base"),
        ),
    )
    assert [(d.namespace, d.name) for d in spec_inputs(generic, k8s_namespace="team-a")] == [
        ("pvc://team-a/shared", "day-1"),
        ("file", "/models/base"),
    ]


def test_data_cache_is_named_by_its_table_location_with_a_table_symlink() -> None:
    spec = TrainJobSpec(
        trainer=CustomTrainer(train),
        initializer=Initializer(
            dataset=DataCacheInitializer(
                storage_uri="cache://sales/orders",
                metadata_loc="s3://lake/warehouse/sales/orders/metadata/00003-x.metadata.json",
                num_data_nodes=2,
            )
        ),
    )
    [found] = spec_inputs(spec, k8s_namespace="team-a")
    assert (found.namespace, found.name) == ("s3://lake", "warehouse/sales/orders")
    assert found.uri == "cache://sales/orders"
    assert found.symlinks == (("cache://team-a", "sales.orders", "TABLE"),)


def test_outputs_from_the_returned_model_uri() -> None:
    [model] = result_outputs({"model_uri": "s3://models/run-7", "loss": 0.1})
    assert (model.namespace, model.name, model.role, model.source) == (
        "s3://models",
        "run-7",
        "model",
        "result.model_uri",
    )
    for result in (None, 3.5, {"loss": 0.1}, {"model_uri": 7}, {"model_uri": "no scheme"}):
        assert result_outputs(result) == []


def test_run_facet_leaves_out_what_is_unknown() -> None:
    assert run_facet(name=None, namespace="ns", runtime="torch-distributed") == {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "namespace": "ns",
        "runtime": "torch-distributed",
    }


def test_the_builder_stamps_the_inputs_without_secrets_or_hash_change() -> None:
    spec = TrainJobSpec(
        runtime="torchtune-llama3.2-1b",
        trainer=BuiltinTrainer(config=TorchTuneConfig()),
        initializer=Initializer(
            dataset=DatasetInitializer(
                # The spec refuses a password or a signature in the URI; what it lets
                # through (a user name, any other query) stays out of the annotation too.
                storage_uri="https://s3cr3t-user@data.example.com/day-1.tar?v=abcdef123"
            )
        ),
    )
    built = build_trainjob(spec, namespace="team-a")
    annotations = built.manifest["metadata"]["annotations"]
    text = annotations[LINEAGE_INPUTS_ANNOTATION]
    assert "s3cr3t-user" not in text
    assert "abcdef123" not in text
    assert json.loads(text) == [
        {
            "namespace": "https://data.example.com",
            "name": "/day-1.tar",
            "uri": "https://data.example.com/day-1.tar",
            "role": "dataset",
            "source": "DatasetInitializer",
        }
    ]
    assert " " not in text  # compact
    # Derived from the spec: the hash of a job built before lineage existed still matches.
    without = json.loads(json.dumps(built.manifest))
    del without["metadata"]["annotations"][LINEAGE_INPUTS_ANNOTATION]
    assert spec_hash(without) == built.spec_hash == annotations[SPEC_HASH_ANNOTATION]


def test_no_initializers_no_annotation() -> None:
    built = build_trainjob(TrainJobSpec(trainer=CustomTrainer(train)), namespace="team-a")
    assert LINEAGE_INPUTS_ANNOTATION not in built.manifest["metadata"]["annotations"]


@pytest.mark.parametrize(
    ("uri", "namespace", "name"),
    [
        (
            "abfss://raw@acct.dfs.core.windows.net/data/train",
            "abfss://raw@acct.dfs.core.windows.net",
            "data/train",
        ),
        (
            "wasbs://curated@acct.blob.core.windows.net/x",
            "wasbs://curated@acct.blob.core.windows.net",
            "x",
        ),
        (
            "abfss://raw:s3cr3t-pass@acct.dfs.core.windows.net/d?sig=abcdef123",
            "abfss://raw@acct.dfs.core.windows.net",
            "d",
        ),
    ],
)
def test_azure_keeps_its_container(uri: str, namespace: str, name: str) -> None:
    """OpenLineage names an Azure data set with its container: two containers of one
    account are two data sets (issue 24, defect 9); a password still never passes."""
    found = dataset_of_uri(uri, role="dataset", source="x")
    assert (found.namespace, found.name) == (namespace, name)
    text = json.dumps(found.as_dict())
    assert "s3cr3t-pass" not in text
    assert "abcdef123" not in text
    other = dataset_of_uri(
        uri.replace("raw", "gold").replace("curated", "gold"), role="d", source="x"
    )
    assert other.namespace != found.namespace
