"""The spec speaks the SDK's vocabulary, validates on construction and round-trips
through JSON."""

from __future__ import annotations

import json
import linecache
import pickle
from typing import Any

import pytest
from spec_table import valid_specs
from train_functions import decorated, train_linear

from kf_trainer_core.errors import SpecError
from kf_trainer_core.spec import (
    ActiveDeadlineSeconds,
    CustomTrainer,
    HuggingFaceDatasetInitializer,
    Labels,
    Name,
    RuntimeKind,
    RuntimeRef,
    TrainFunction,
    TrainJobSpec,
    train_spec,
)


@pytest.mark.parametrize("key", sorted(valid_specs()))
def test_every_spec_round_trips_through_json(key: str) -> None:
    spec = valid_specs()[key]
    text = spec.model_dump_json()
    again = TrainJobSpec.parse(text)
    assert again == spec
    # And through a plain dict, as orchestrators store it (XCom, Prefect results).
    assert TrainJobSpec.parse(json.loads(text)) == spec
    assert again.model_dump_json() == text


@pytest.mark.parametrize(
    ("trainer", "kind"),
    [
        ({"func": {"name": "train", "source": "def train():\n    pass\n"}}, "CustomTrainer"),
        ({"image": "python:3.11"}, "CustomTrainerContainer"),
        ({"config": {"num_nodes": 2}}, "BuiltinTrainer"),
    ],
)
def test_a_trainer_without_its_tag_is_known_by_its_fields(
    trainer: dict[str, Any], kind: str
) -> None:
    """Hand-written JSON (a DAG's, a pipeline's, a flow's) often leaves out ``type``: the
    spec tells the trainer by what it holds, once for every adapter."""
    parsed = TrainJobSpec.parse({"trainer": trainer})
    assert type(parsed.trainer).__name__ == kind
    with pytest.raises(SpecError, match=r"trainer: .*Fix: set `type`"):
        TrainJobSpec.parse({"trainer": {"num_nodes": 2}})  # nothing to tell it by


def test_sdk_call_shapes() -> None:
    # Positional arguments as in the SDK's dataclasses.
    spec = train_spec(
        runtime="torch-distributed",
        trainer=CustomTrainer(train_linear, num_nodes=2),
        options=[Name("job-a"), Labels({"a": "b"}), ActiveDeadlineSeconds(60)],
    )
    assert spec.runtime == RuntimeRef(
        name="torch-distributed", kind=RuntimeKind.CLUSTER_TRAINING_RUNTIME
    )
    assert spec.option(Name).name == "job-a"
    assert spec.trainer is not None
    assert spec.trainer.type == "CustomTrainer"


def test_default_runtime_is_torch_distributed() -> None:
    assert TrainJobSpec().runtime.name == "torch-distributed"


def test_sdk_runtime_object_is_accepted() -> None:
    class FakeSdkRuntime:  # shaped like kubeflow.trainer.types.Runtime
        name = "deepspeed-distributed"
        kind = RuntimeKind.TRAINING_RUNTIME

    spec = TrainJobSpec(runtime=FakeSdkRuntime())
    assert spec.runtime.name == "deepspeed-distributed"
    assert spec.runtime.kind is RuntimeKind.TRAINING_RUNTIME


def test_function_object_is_captured_without_decorators() -> None:
    func = TrainFunction.parse(decorated)
    assert func.name == "decorated"
    assert func.source is not None
    assert func.source.startswith("def decorated(")
    assert "_noop_decorator" not in func.source


def test_function_reference_resolves_to_source() -> None:
    func = TrainFunction.parse("train_functions:train_linear")
    assert func.ref == "train_functions:train_linear"
    name, source, ref = func.resolved()
    assert (name, ref) == ("train_linear", None)
    assert source is not None
    assert "def train_linear" in source


def test_function_defined_in_a_notebook_cell() -> None:
    # IPython registers each cell's source with linecache under a synthetic file name;
    # inspect.getsource reads it from there. Reproduce that without IPython.
    cell = "def cell_train(n=1):\n    return n + 1\n"
    filename = "<ipython-input-7-0123456789ab>"
    linecache.cache[filename] = (len(cell), None, cell.splitlines(True), filename)
    namespace: dict[str, Any] = {}
    exec(compile(cell, filename, "exec"), namespace)
    try:
        func = TrainFunction.parse(namespace["cell_train"])
    finally:
        del linecache.cache[filename]
    assert func.name == "cell_train"
    assert func.source == cell


def test_function_source_with_several_functions_needs_a_name() -> None:
    source = "def helper():\n    return 1\n\ndef main():\n    return helper()\n"
    with pytest.raises(SpecError, match="several functions"):
        TrainFunction.parse(source)
    func = TrainFunction.parse({"source": source, "name": "main"})
    assert func.name == "main"
    assert "def helper" in (func.source or "")


def test_hub_id_gets_its_scheme() -> None:
    init = HuggingFaceDatasetInitializer(storage_uri="tatsu-lab/alpaca")
    assert init.storage_uri == "hf://tatsu-lab/alpaca"


def test_env_accepts_the_kubernetes_list_form() -> None:
    trainer = CustomTrainer(
        train_linear,
        env=[
            {"name": "A", "value": "1"},
            {"name": "B", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
        ],
    )
    assert trainer.env is not None
    assert trainer.env["A"] == "1"
    assert trainer.env["B"].name == "s"  # type: ignore[union-attr]


def test_numbers_in_env_become_strings_like_the_sdk() -> None:
    trainer = CustomTrainer(train_linear, env={"EPOCHS": 3})  # type: ignore[dict-item]
    assert trainer.env == {"EPOCHS": "3"}


def test_with_options_replaces_single_valued_options() -> None:
    spec = TrainJobSpec(
        trainer=CustomTrainer(train_linear), options=[Name("a"), Labels({"x": "y"})]
    )
    spec2 = spec.with_options(Name("b"), Labels({"z": "w"}))
    assert spec2.option(Name).name == "b"
    assert [o.type for o in spec2.options] == ["Labels", "Name", "Labels"]


def test_spec_error_is_a_value_error_and_pickles() -> None:
    with pytest.raises(ValueError, match=r"trainer\.num_nodes") as info:
        TrainJobSpec.parse(
            {"trainer": {"type": "CustomTrainer", "func": "def f(): pass", "num_nodes": 0}}
        )
    err = info.value
    assert isinstance(err, SpecError)
    again = pickle.loads(pickle.dumps(err))
    assert str(again) == str(err)
    assert again.fields == ["trainer.num_nodes"]


def test_secrets_never_appear_in_reprs_or_dumps() -> None:
    # Plain credentials are refused outright, so they cannot leak from a valid spec;
    # the refusal itself must not echo the secret either.
    with pytest.raises(SpecError) as info:
        HuggingFaceDatasetInitializer(storage_uri="hf://a/b", access_token="hf_SECRET123")
    assert "hf_SECRET123" not in str(info.value)
