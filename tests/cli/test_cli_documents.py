"""Documents from outside are read safely (issue 24, defect 7): a 583-byte spec whose
``func_args`` nest YAML aliases, a spec past the size cap, a JSON nesting too deep, a
kubeconfig or backend configuration of the same kinds: each is refused at once, with
the document named and nothing of its text quoted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_support import run_main

from kf_trainer_core.base import documents
from kf_trainer_core.config import KubernetesConfig, parse_backend
from kf_trainer_core.errors import SpecError

FUNC = "def train(**kw):\n    return 1\n"


def _bomb() -> str:
    """Nine levels of nine aliases: 9**9 (387 million) leaves once walked."""
    lines = ["trainer:", "  type: CustomTrainer", '  func: "def train(**kw):\\n  return 1\\n"']
    lines.append("  func_args:")
    lines.append('    a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]')
    for i in range(1, 9):
        refs = ", ".join([f"*a{i - 1}"] * 9)
        lines.append(f"    a{i}: &a{i} [{refs}]")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("command", ["check", "render", "run"])
def test_nested_aliases_are_refused_before_they_expand(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    spec = tmp_path / "bomb.yaml"
    spec.write_text(_bomb())
    assert len(spec.read_bytes()) < 700
    local = ["--backend", "local", "--state-dir", str(tmp_path / "state")]
    done = run_main(capsys, *local, command, str(spec))
    assert done.code == 2, done.out[:200]
    assert "alias" in done.err
    assert "line" in done.err


def test_a_spec_past_the_cap_is_refused_unread(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "huge.yaml"
    filler = "#" + "x" * 1023 + "\n"
    spec.write_text(
        "trainer:\n  type: CustomTrainer\n" + filler * (documents.MAX_SPEC_BYTES // 1024 + 1)
    )
    done = run_main(capsys, "check", str(spec))
    assert done.code == 2
    assert "at most" in done.err


def test_deep_json_is_an_error_not_a_crash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "deep.json"
    spec.write_text('{"trainer": ' + "[" * 100_000 + "]" * 100_000 + "}")
    done = run_main(capsys, "check", str(spec))
    assert done.code == 2, done.err
    assert "nests too deeply" in done.err


def test_config_documents_refuse_the_same() -> None:
    with pytest.raises(ValueError, match="nests too deeply"):
        parse_backend('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(ValueError, match="at most"):
        parse_backend(json.dumps({"backend": "local", "x": "y" * documents.MAX_CONFIG_BYTES}))
    bomb = "apiVersion: v1\nusers:\n- &u {name: a, user: {token: secret-token-value}}\n- *u\n"
    with pytest.raises(SpecError, match="alias") as info:
        KubernetesConfig(kubeconfig_content=bomb).kubeconfig_dict()
    assert "secret-token-value" not in str(info.value)


def test_the_airflow_spec_text_is_read_the_same_way() -> None:
    from kf_trainer_airflow._spec import template_form

    with pytest.raises(SpecError, match="alias"):
        template_form(_bomb(), part="spec")
