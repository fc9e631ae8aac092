"""One voice (issue 26, item 6): backend configuration errors say so, misspelt literal
values get a suggestion, a container backend without an image or engine is bad input
naming the key a command-line user sets, and every backend is documented."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from cli_support import run_main

from kf_trainer_core.cli import Exit
from kf_trainer_core.config import LocalConfig, parse_backend
from kf_trainer_core.errors import SpecError

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_a_misspelt_backend_field_is_a_backend_configuration_error() -> None:
    with pytest.raises(SpecError) as caught:
        LocalConfig.parse({"backend": "local", "state_dri": "x"})
    text = str(caught.value)
    assert text.startswith("Invalid backend configuration: ")
    assert "training spec" not in text
    assert "Did you mean `state_dir`?" in text


def test_misspelt_literals_get_a_suggestion() -> None:
    with pytest.raises(SpecError, match=r"Did you mean `local`\?"):
        parse_backend({"backend": "lcoal"})
    with pytest.raises(SpecError, match=r"Did you mean `fail`\?"):
        LocalConfig(on_missing_resources="fial")  # type: ignore[arg-type]


def test_the_prefect_block_suggests_the_backend() -> None:
    pytest.importorskip("prefect")
    from pydantic import ValidationError

    from kf_trainer_prefect import KubeflowTrainerCredentials

    with pytest.raises(ValidationError, match=r"Did you mean `local`\?"):
        KubeflowTrainerCredentials(backend="lcoal")  # type: ignore[arg-type]


def test_a_container_backend_without_image_or_engine_is_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "runtime": "torch-distributed",
                "trainer": {"type": "CustomTrainer", "func": "def train():\n    return 1\n"},
            }
        )
    )
    # No engine can answer at this address, and no image is configured.
    backend = {"backend": "container", "host": f"unix://{tmp_path}/none.sock"}
    monkeypatch.setenv("KF_TRAINER_BACKEND", json.dumps(backend))
    got = run_main(capsys, "run", str(spec), "--state-dir", str(tmp_path / "st"))
    assert got.code == Exit.BAD_INPUT, got.err
    assert "API server" not in got.err
    assert '"image"' in got.err
    assert '"host"' in got.err


def test_warnings_speak_as_kf_trainer() -> None:
    src = Path(__file__).resolve().parents[2] / "src"
    offenders = [
        str(p) for p in src.rglob("*.py") if "kf-trainer-local: " in p.read_text(encoding="utf-8")
    ]
    assert offenders == []


def test_the_cli_page_documents_every_backend() -> None:
    from kf_trainer_core.cli._where import backend_models

    page = (DOCS / "cli.md").read_text(encoding="utf-8")
    [row] = [ln for ln in page.splitlines() if ln.startswith("| `--backend ")]
    flag = row.split("`")[1]
    assert sorted(flag.removeprefix("--backend ").split("\\|")) == sorted(backend_models())
