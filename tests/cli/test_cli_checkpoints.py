"""``kf-trainer jobs checkpoints where|clean`` on the local backend: an identity's
checkpoint directory is shown, and removed only when asked, only that identity's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from cli_support import run_main

from kf_trainer_core.checkpoints import latest

SAVES = """\
def train():
    from kf_trainer_core.checkpoints import save_json
    save_json(0, {"w": 1})
    return "saved"
"""


def test_where_and_clean(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    local = ["--backend", "local", "--state-dir", str(tmp_path / "state")]
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({"trainer": {"type": "CustomTrainer", "func": SAVES}}))
    for identity in ("nightly/train/day-1", "nightly/train/day-2"):
        done = run_main(capsys, *local, "run", str(spec), "--identity", identity)
        assert done.code == 0, done.err
    found = run_main(
        capsys, "jobs", "checkpoints", "where", "nightly/train/day-1", *local, "-o", "json"
    )
    assert found.code == 0, found.err
    day1 = Path(json.loads(found.out)["path"])
    day2 = Path(
        json.loads(
            run_main(
                capsys, "jobs", "checkpoints", "where", "nightly/train/day-2", *local, "-o", "json"
            ).out
        )["path"]
    )
    assert latest(day1) is not None
    assert latest(day2) is not None

    cleaned = run_main(capsys, "jobs", "checkpoints", "clean", "nightly/train/day-1", *local)
    assert cleaned.code == 0, cleaned.err
    assert cleaned.out.strip() == f"local nightly/train/day-1: removed {day1}"
    assert not day1.exists()
    assert latest(day2) is not None  # another identity's stay
    # Asked again, the location says that nothing is there any more.
    after = run_main(capsys, "jobs", "checkpoints", "where", "nightly/train/day-1", *local)
    assert after.out.strip() == (
        f"local nightly/train/day-1: {day1} (nothing there: no checkpoint yet, or removed by "
        "`clean`)"
    )
