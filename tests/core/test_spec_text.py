"""``TrainJobSpec.parse`` reads the text of a spec file like every other entry point
(issue 35, item 5): the CLI and the Airflow operator took YAML that ``parse`` refused,
echoing the whole file in its error."""

from __future__ import annotations

import json

import pytest
import yaml

from kf_trainer_core.errors import SpecError
from kf_trainer_core.spec import TrainJobSpec

SPEC = {
    "runtime": "torch-distributed",
    "trainer": {"type": "CustomTrainerContainer", "image": "busybox", "num_nodes": 2},
    "options": [{"type": "Labels", "labels": {"team": "ml"}}],
}


def test_yaml_json_and_a_dict_are_the_same_spec() -> None:
    expected = TrainJobSpec.parse(SPEC)
    assert TrainJobSpec.parse(yaml.safe_dump(SPEC)) == expected
    assert TrainJobSpec.parse(yaml.safe_dump(SPEC).encode()) == expected
    assert TrainJobSpec.parse(json.dumps(SPEC)) == expected
    assert TrainJobSpec.parse(expected) is expected


@pytest.mark.parametrize(
    "text",
    [
        "runtime: torch-distributed\ntrainer: [unclosed\n# password: hunter2\n",
        '{"runtime": "torch-distributed", "trainer": 3, "password": "hunter2"',
    ],
)
def test_text_that_cannot_be_read_is_named_by_position_never_quoted(text: str) -> None:
    with pytest.raises(SpecError) as caught:
        TrainJobSpec.parse(text)
    message = str(caught.value)
    assert "hunter2" not in message
    assert "torch-distributed" not in message
    assert "line" in message
    assert "Fix:" in message


def test_a_text_that_is_no_mapping_says_so() -> None:
    with pytest.raises(SpecError, match="holds a list, not a mapping"):
        TrainJobSpec.parse("- runtime: torch-distributed\n")


def test_a_bad_field_in_yaml_is_named_as_in_a_dict() -> None:
    bad = {**SPEC, "trainer": {**SPEC["trainer"], "num_node": 2}}
    with pytest.raises(SpecError) as caught:
        TrainJobSpec.parse(yaml.safe_dump(bad))
    assert caught.value.fields == ["trainer.num_node"]
    assert "Did you mean `num_nodes`?" in str(caught.value)
