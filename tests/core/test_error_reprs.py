"""Errors quote values to name them, not to print them (issue 35, item 5): an
``InvalidNameError`` for an argument of the wrong type printed the whole ``repr`` of a
``Submitted`` — its whole generated program, thousands of characters. Every value an
error of the suite quotes goes through ``base.quoting.shown``: cut, credentials masked."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from kf_trainer_core.base.quoting import SHOWN_LIMIT, shown
from kf_trainer_core.client import TrainerClient
from kf_trainer_core.config import LocalConfig
from kf_trainer_core.errors import InvalidNameError, SpecError
from kf_trainer_core.spec import CustomTrainer, TrainJobSpec

SRC = Path(__file__).resolve().parents[2] / "src"

#: Calls that build an error's message from its parts.
MESSAGE_CALLS = {"fix", "FieldProblem", "single"}


def _quoting_sites(tree: ast.AST) -> list[tuple[int, str]]:
    """``{value!r}`` inside a ``raise`` or a message-building call."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Raise) and node.exc is not None:
            scope: ast.AST | None = node.exc
        elif isinstance(node, ast.Call) and (
            getattr(node.func, "id", None) in MESSAGE_CALLS
            or getattr(node.func, "attr", None) in MESSAGE_CALLS
        ):
            scope = node
        else:
            scope = None
        if scope is None:
            continue
        for sub in ast.walk(scope):
            if isinstance(sub, ast.FormattedValue) and sub.conversion == ord("r"):
                found.append((sub.lineno, ast.unparse(sub.value)))
    return found


def test_no_error_message_of_the_suite_quotes_a_raw_repr() -> None:
    # The test bed answers as the API server does; checkpoints.py runs in pods without the
    # suite (it cuts with a copy of shown's rule).
    bad = {}
    for path in SRC.rglob("*.py"):
        if "testing" in path.parts:
            continue
        sites = _quoting_sites(ast.parse(path.read_text(encoding="utf-8")))
        if sites:
            bad[str(path.relative_to(SRC))] = sites
    assert not bad, f"quote these with base.quoting.shown(...): {bad}"


def test_shown_cuts_a_long_repr_and_says_how_long_it_was() -> None:
    value = "x" * 10_000
    text = shown(value)
    assert len(text) <= SHOWN_LIMIT
    assert text.endswith("… [str, 10,002 characters]")
    assert shown("short") == "'short'"
    assert shown(3) == "3"


def test_shown_masks_credentials_even_where_it_cuts() -> None:
    token = "hf_" + "a" * 40
    assert token not in shown(f"https://user:hunter2@host/{token}")
    assert "hunter2" not in shown("https://user:hunter2@host/x")
    assert token[:12] not in shown("y" * 150 + token + "z" * 1000)


def test_shown_survives_a_repr_that_raises() -> None:
    class Hostile:
        def __repr__(self) -> str:
            raise RuntimeError("no")

    assert shown(Hostile()) == "<Hostile object>"


def test_a_wrong_argument_type_is_named_in_a_short_line(tmp_path: Path) -> None:
    client = TrainerClient(LocalConfig(state_dir=str(tmp_path / "state")))

    def train() -> int:
        return 1

    submitted = client.submit(TrainJobSpec(trainer=CustomTrainer(train)), name="short-one")
    assert len(repr(submitted)) > 2 * SHOWN_LIMIT  # what used to be printed whole
    with pytest.raises(InvalidNameError) as caught:
        client.get_job(submitted)  # type: ignore[arg-type]
    text = str(caught.value)
    assert "is a Submitted, not a TrainJob name" in text
    assert len(text) < SHOWN_LIMIT + 200, text
    client.delete_job("short-one")


def test_a_spec_error_quotes_a_long_value_cut() -> None:
    with pytest.raises(SpecError) as caught:
        TrainJobSpec.parse(
            {"trainer": {"type": "CustomTrainerContainer", "image": "i", "num_nodes": "x" * 5000}}
        )
    text = str(caught.value)
    assert "trainer.num_nodes" in text
    assert "characters]" in text
    assert len(text) < 1000, text
