"""Bad specs are rejected before submission, each with a message that names the field
and the fix."""

from __future__ import annotations

from typing import Any

import pytest
from spec_table import pod_patch

from kf_trainer_core.errors import SpecError
from kf_trainer_core.manifest.builder import build_trainjob
from kf_trainer_core.spec import ContainerPatch, CustomTrainerContainer, TrainJobSpec

FUNC = "def train():\n    return 1\n"


def custom(**kw: Any) -> dict[str, Any]:
    return {"trainer": {"type": "CustomTrainer", "func": FUNC, **kw}}


def patched(**pod: Any) -> dict[str, Any]:
    return {**custom(), "options": [pod_patch(**pod).model_dump()]}


# (id, spec as JSON-like data (or a function building it, for specs whose parts
# already fail when built), build kwargs, field named, words of the fix)
BAD: list[tuple[str, Any, dict[str, Any], str, str]] = [
    ("zero-nodes", custom(num_nodes=0), {}, "trainer.num_nodes", "num_nodes >= 1"),
    ("nodes-not-int", custom(num_nodes="two"), {}, "trainer.num_nodes", "give a number"),
    ("typo-field", custom(num_node=2), {}, "trainer.num_node", "Did you mean `num_nodes`"),
    (
        "unknown-trainer-type",
        {"trainer": {"type": "Custom", "image": "x"}},
        {},
        "trainer",
        "set `type`",
    ),
    ("missing-func", {"trainer": {"type": "CustomTrainer"}}, {}, "trainer.func", "set `func`"),
    (
        "func-syntax-error",
        custom(func="def train(:\n  pass"),
        {},
        "trainer.func",
        "complete source",
    ),
    (
        "func-async",
        custom(func="async def train():\n    pass\n"),
        {},
        "trainer.func",
        "plain `def`",
    ),
    ("func-args-not-json", custom(func_args={"when": object()}), {}, "trainer.func_args", "JSON"),
    (
        "unknown-resource",
        custom(resources_per_node={"gpus": 1}),
        {},
        "trainer.resources_per_node",
        "gpu, cpu",
    ),
    (
        "bad-quantity",
        custom(resources_per_node={"memory": "16 GB"}),
        {},
        "trainer.resources_per_node",
        "16Gi",
    ),
    # A quantity past Decimal's range raised decimal.Overflow, no SpecError; one past a
    # float's (or NaN, inf) was taken, and the local backend's int() of it raised.
    (
        "gpu-past-decimal",
        custom(resources_per_node={"gpu": "1e1000000"}),
        {},
        "trainer.resources_per_node",
        "finite amount",
    ),
    (
        "memory-past-int64",
        custom(resources_per_node={"memory": "1e999999"}),
        {},
        "trainer.resources_per_node",
        "finite amount",
    ),
    (
        "cpu-nan",
        custom(resources_per_node={"cpu": float("nan")}),
        {},
        "trainer.resources_per_node",
        "finite amount",
    ),
    (
        "gpu-and-mig",
        custom(resources_per_node={"gpu": 1, "mig-1g.5gb": 1}),
        {},
        "trainer.resources_per_node",
        "drop one",
    ),
    (
        "two-migs",
        custom(resources_per_node={"mig-1g.5gb": 1, "mig-2g.10gb": 1}),
        {},
        "trainer.resources_per_node",
        "request one",
    ),
    ("reserved-env", custom(env={"PET_NNODES": "4"}), {}, "trainer.env", "num_nodes"),
    ("bad-env-name", custom(env={"1BAD": "x"}), {}, "trainer.env", "not starting with a digit"),
    ("empty-index-urls", custom(pip_index_urls=[]), {}, "trainer.pip_index_urls", "leave it out"),
    (
        "bad-runtime-name",
        {"runtime": "Torch_Distributed"},
        {},
        "runtime.name",
        "kf-trainer runtimes list",
    ),
    (
        "bad-runtime-kind",
        {"runtime": {"name": "x", "kind": "Runtime"}},
        {},
        "runtime.kind",
        "use one of",
    ),
    (
        "command-with-function",
        {**custom(), "options": [{"type": "TrainerCommand", "command": ["x"]}]},
        {},
        "options[0]",
        "CustomTrainerContainer",
    ),
    (
        "args-with-builtin",
        {
            "runtime": "torchtune-llama3.2-1b",
            "trainer": {"type": "BuiltinTrainer", "config": {}},
            "options": [{"type": "TrainerArgs", "args": ["x"]}],
        },
        {},
        "options[0]",
        "drop the option",
    ),
    (
        "two-names",
        {**custom(), "options": [{"type": "Name", "name": "a"}, {"type": "Name", "name": "b"}]},
        {},
        "options[1]",
        "keep one",
    ),
    (
        "deadline-zero",
        {**custom(), "options": [{"type": "ActiveDeadlineSeconds", "seconds": 0}]},
        {},
        "options[0].seconds",
        "1 or more",
    ),
    (
        "bad-label-key",
        {**custom(), "options": [{"type": "Labels", "labels": {"bad key": "v"}}]},
        {},
        "options[0].labels",
        "DNS-subdomain prefix",
    ),
    (
        "bad-label-value",
        {**custom(), "options": [{"type": "Labels", "labels": {"k": "has spaces"}}]},
        {},
        "options[0].labels",
        "annotation for free text",
    ),
    (
        "bad-managed-by",
        {**custom(), "options": [{"type": "ManagedBy", "managed_by": "me"}]},
        {},
        "options[0].managed_by",
        "use one of",
    ),
    (
        "bad-queue",
        {**custom(), "options": [{"type": "QueueName", "queue": "Team A"}]},
        {},
        "options[0].queue",
        "queue's name",
    ),
    (
        "hf-token-in-clear",
        {
            "initializer": {
                "dataset": {
                    "type": "HuggingFaceDatasetInitializer",
                    "storage_uri": "hf://a/b",
                    "access_token": "hf_x",
                }
            }
        },
        {},
        "initializer.dataset.access_token",
        "secret_ref",
    ),
    (
        "s3-key-in-clear",
        {
            "initializer": {
                "model": {
                    "type": "S3ModelInitializer",
                    "storage_uri": "s3://b/m",
                    "secret_access_key": "k",
                }
            }
        },
        {},
        "initializer.model.secret_access_key",
        "SECRET_ACCESS_KEY",
    ),
    (
        "s3-wrong-scheme",
        {"initializer": {"dataset": {"type": "S3DatasetInitializer", "storage_uri": "gs://b/p"}}},
        {},
        "initializer.dataset.storage_uri",
        "s3://<bucket>",
    ),
    (
        "cache-one-node",
        {
            "initializer": {
                "dataset": {
                    "type": "DataCacheInitializer",
                    "storage_uri": "cache://a/b",
                    "metadata_loc": "s3://m",
                    "num_data_nodes": 1,
                }
            }
        },
        {},
        "initializer.dataset.num_data_nodes",
        "2 or more",
    ),
    (
        "cache-bad-uri",
        {
            "initializer": {
                "dataset": {
                    "type": "DataCacheInitializer",
                    "storage_uri": "cache://a",
                    "metadata_loc": "s3://m",
                    "num_data_nodes": 2,
                }
            }
        },
        {},
        "initializer.dataset.storage_uri",
        "one schema and one table",
    ),
    (
        "generic-not-uri",
        {"initializer": {"dataset": {"type": "DatasetInitializer", "storage_uri": "/data"}}},
        {},
        "initializer.dataset.storage_uri",
        "file:///data",
    ),
    (
        "bad-column-map",
        {
            "runtime": "torchtune-llama3.2-1b",
            "trainer": {
                "type": "BuiltinTrainer",
                "config": {"dataset_preprocess_config": {"column_map": {"prompt": "q"}}},
            },
        },
        {},
        "trainer.config.dataset_preprocess_config.column_map",
        "'input'/'output'",
    ),
    (
        "bad-lora-module",
        {
            "runtime": "torchtune-llama3.2-1b",
            "trainer": {
                "type": "BuiltinTrainer",
                "config": {"peft_config": {"lora_attn_modules": ["q"]}},
            },
        },
        {},
        "trainer.config.peft_config.lora_attn_modules",
        "q_proj",
    ),
    (
        "same-patch-manager",
        {
            **custom(),
            "options": [
                pod_patch(node_selector={"a": "b"}).model_dump(),
                pod_patch(node_selector={"c": "d"}).model_dump(),
            ],
        },
        {},
        "options[1].manager",
        "own `manager`",
    ),
    (
        "patch-bad-mount",
        lambda: patched(
            containers=[
                ContainerPatch(name="node", volume_mounts=[{"name": "d", "mountPath": "data"}])
            ]
        ),
        {},
        "volume_mounts",
        "'/data'",
    ),
    (
        "patch-metadata-name",
        lambda: patched(metadata={"name": "x"}),
        {},
        "metadata",
        "labels and annotations",
    ),
    # Caught by the builder, which knows the runtime.
    ("name-not-dns", custom(), {"name": "My_Job"}, "name", "'my-job'"),
    (
        "name-too-long-for-runtime",
        {
            "runtime": "torchtune-llama3.2-1b",
            "trainer": {"type": "BuiltinTrainer", "config": {}},
            "initializer": {
                "dataset": {"type": "HuggingFaceDatasetInitializer", "storage_uri": "hf://a/b"}
            },
            "options": [{"type": "Name", "name": "a-very-long-fine-tuning-job-name-x"}],
        },
        {},
        "options.Name",
        "shorten it to 33",
    ),
    ("name-too-long-node-only", custom(), {"name": "n" * 49}, "name", "shorten it to 48"),
    (
        "builtin-on-torch-runtime",
        {"trainer": {"type": "BuiltinTrainer", "config": {}}},
        {},
        "trainer",
        "torchtune-llama3.2-1b",
    ),
    (
        "function-on-torchtune-runtime",
        {"runtime": "torchtune-llama3.2-1b", **custom()},
        {},
        "trainer",
        "BuiltinTrainer",
    ),
    (
        "initializer-runtime-lacks-step",
        {
            **custom(),
            "initializer": {
                "dataset": {"type": "HuggingFaceDatasetInitializer", "storage_uri": "hf://a/b"}
            },
        },
        {},
        "initializer.dataset",
        "runtime with that step",
    ),
    (
        "patch-unknown-replicated-job",
        {**custom(), "options": [pod_patch(rjob="worker", node_selector={"a": "b"}).model_dump()]},
        {},
        "replicated_jobs[0].name",
        "patch one of those",
    ),
    (
        "patch-pet-env-on-node",
        patched(containers=[ContainerPatch(name="node", env={"PET_NODE_RANK": "0"})]),
        {},
        "containers[0].env",
        "num_proc_per_node",
    ),
    (
        "patch-env-on-node",
        patched(containers=[ContainerPatch(name="node", env={"LR": "0.1"})]),
        {},
        "containers[0].env",
        "trainer's `env`",
    ),
    (
        "patch-env-on-initializer",
        {
            "runtime": "torchtune-llama3.2-1b",
            "trainer": {"type": "BuiltinTrainer", "config": {}},
            "options": [
                pod_patch(
                    rjob="dataset-initializer",
                    containers=[ContainerPatch(name="dataset-initializer", env={"X": "1"})],
                ).model_dump()
            ],
        },
        {},
        "containers[0].env",
        "dataset initializer's `env`",
    ),
    # Issue 14, "Bad input": each was accepted (or reported under a lost path) before.
    (
        "gpu-fraction",
        custom(resources_per_node={"gpu": 0.5}),
        {},
        "trainer.resources_per_node",
        "MIG",
    ),
    ("image-with-space", custom(image="my image:latest"), {}, "trainer.image", "without spaces"),
    ("func-args-unknown", custom(func_args={"lr": 1}), {}, "trainer.func_args", "drop it"),
    ("func-dotted-path", custom(func="os.path.join"), {}, "trainer.func", "'os.path:join'"),
    ("env-key-kept", custom(env={"HF_HOME": 5j}), {}, "trainer.env.HF_HOME", "give a string"),
    (
        "pip-option",
        custom(packages_to_install=["-r/etc/passwd"]),
        {},
        "packages_to_install[0]",
        "numpy",
    ),
    (
        "index-no-scheme",
        custom(pip_index_urls=["pypi.org/simple"]),
        {},
        "pip_index_urls[0]",
        "https://",
    ),
    (
        "annotation-too-large",
        {**custom(), "options": [{"type": "Annotations", "annotations": {"a": "x" * 300 * 1024}}]},
        {},
        "options[0].annotations",
        "ConfigMap",
    ),
    (
        "program-too-large",
        custom(func="def train(blob):\n    return 1\n", func_args={"blob": "x" * 140_000}),
        {},
        "trainer.func",
        "embed=False",
    ),
]


def test_the_table_is_broad() -> None:
    assert len(BAD) >= 25
    assert len({case[0] for case in BAD}) == len(BAD)


@pytest.mark.parametrize(
    ("data", "kwargs", "field", "fix"), [c[1:] for c in BAD], ids=[c[0] for c in BAD]
)
def test_bad_spec_is_rejected_naming_field_and_fix(
    data: Any, kwargs: dict[str, Any], field: str, fix: str
) -> None:
    with pytest.raises(SpecError) as info:
        build_trainjob(TrainJobSpec.parse(data() if callable(data) else data), **kwargs)
    err = info.value
    message = str(err)
    assert any(field in f for f in err.fields), (field, err.fields, message)
    assert "Fix:" in message
    assert fix in message, message


@pytest.mark.parametrize(
    ("build", "fix"),
    [
        # Another model's real field is no typo: it is named with the model it belongs
        # to, never "did you mean" itself.
        (
            lambda: CustomTrainerContainer(image="x:1", command=["python", "a.py"]),
            "remove `command`: it is a field of `TrainerCommand`, not of this model.",
        ),
        (
            lambda: CustomTrainerContainer(image="x:1", func_args={}),
            "remove `func_args`: it is a field of `CustomTrainer`, not of this model.",
        ),
        # A model's own field is suggested from its own fields only.
        (
            lambda: CustomTrainerContainer(image="x:1", commands=["a"]),
            "remove `commands` or correct its spelling.",
        ),
        (
            lambda: CustomTrainerContainer(imagee="x:1"),
            "Did you mean `image`?",
        ),
    ],
)
def test_unknown_field_named_with_the_model_it_belongs_to(build: Any, fix: str) -> None:
    with pytest.raises(SpecError) as err:
        build()
    text = str(err.value)
    assert text.endswith(fix) or fix + "\n" in text
    assert "Did you mean `command`" not in text
