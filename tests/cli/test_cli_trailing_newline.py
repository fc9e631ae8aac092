"""``run --name $'job\\n'`` and ``-n $'local\\n'`` are refused before anything is
submitted (issue 24, defect 8)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from cli_support import run_main

FUNC = "def train():\n    return 1\n"


def test_cli_run_refuses_a_name_and_namespace_ending_in_a_newline(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({"trainer": {"type": "CustomTrainer", "func": FUNC}}))
    local = ["--backend", "local", "--state-dir", str(tmp_path / "state")]
    named = run_main(capsys, *local, "run", str(spec), "--name", "job\n")
    assert named.code == 2, named.out
    spaced = run_main(capsys, *local, "-n", "local\n", "run", str(spec))
    assert spaced.code == 2, spaced.out
    assert not (tmp_path / "state").exists() or not list((tmp_path / "state").rglob("*.json"))
