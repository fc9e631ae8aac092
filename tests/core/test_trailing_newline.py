"""A value that ends in a newline is refused wherever a pattern guards input (issue 24,
defect 8): Python's ``$`` matches before a final ``\\n``, so every guard anchors with
``\\Z``. One test per entry point, and a sweep that keeps ``$`` out of the patterns."""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path
from typing import Any

import pytest

from kf_trainer_core import checkpoints as ck
from kf_trainer_core.backends.local.admission import validate_trainjob
from kf_trainer_core.errors import SpecError
from kf_trainer_core.fields import checks, names
from kf_trainer_core.k8s.selectors import valid_label_value
from kf_trainer_core.manifest.builder import build_trainjob
from kf_trainer_core.spec import TrainJobSpec
from kf_trainer_core.spec.checkpoint_storage import Checkpoints

SRC = Path(__file__).resolve().parents[2] / "src"
FUNC = "def train():\n    return 1\n"


def _spec(**extra: Any) -> dict[str, Any]:
    trainer = {"type": "CustomTrainer", "func": FUNC, **extra.pop("trainer", {})}
    return {"trainer": trainer, **extra}


@pytest.mark.parametrize(
    "data",
    [
        _spec(options=[{"type": "Name", "name": "job\n"}]),
        _spec(options=[{"type": "Labels", "labels": {"team": "a\n"}}]),
        _spec(options=[{"type": "Labels", "labels": {"team\n": "a"}}]),
        _spec(options=[{"type": "QueueName", "name": "q\n"}]),
        _spec(trainer={"env": {"NAME\n": "v"}}),
        _spec(trainer={"image": "python:3.12\n"}),
        _spec(trainer={"resources_per_node": {"cpu": "2\n"}}),
        _spec(options=[{"type": "Checkpoints", "pvc": "claim\n"}]),
        _spec(options=[{"type": "Checkpoints", "uri": "s3://bucket/x\n"}]),
    ],
    ids=["name", "label-value", "label-key", "queue", "env-name", "image", "qty", "pvc", "uri"],
)
def test_spec_fields_ending_in_a_newline_are_refused(data: dict[str, Any]) -> None:
    with pytest.raises((SpecError, ValueError)):
        build_trainjob(TrainJobSpec.parse(data), namespace="team-a")


def test_the_guards_refuse_a_final_newline() -> None:
    assert names.name_problem("job\n") is not None
    with pytest.raises((SpecError, ValueError)):
        names.require_job_name("job\n")
    assert checks.namespace_problem("local\n") is not None
    assert checks.image_problem("python\n") is not None
    assert checks.step_problem("node-0\n") is not None
    assert checks.QUANTITY.match("1Gi\n") is None
    assert not valid_label_value("v\n")
    with pytest.raises(Exception):  # noqa: B017 - the local API server's admission
        validate_trainjob({"metadata": {"name": "job\n"}, "spec": {}})
    assert ck.latest(Path("/nonexistent")) is None
    with pytest.raises(ValueError):
        Checkpoints(pvc="c\n")


def _dollar_anchors() -> list[str]:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        text = path.read_text()
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type != tokenize.STRING or tok.string[:1] not in "rR":
                continue
            # An unescaped $ outside a character class: an end anchor that lets "\n" by.
            body = re.sub(r"\\.|\[(?:\\.|[^\]])*\]", "", tok.string)
            if "$" in body:
                found.append(f"{path.relative_to(SRC)}:{tok.start[0]}")
    return found


def test_no_pattern_in_the_suite_anchors_with_dollar() -> None:
    assert _dollar_anchors() == []
