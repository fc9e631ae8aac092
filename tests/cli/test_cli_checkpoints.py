"""``kf-trainer jobs checkpoints where|clean`` on the local backend: an identity's
checkpoint directory is shown, and removed only when asked, only that identity's."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
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


def _undeletable(path: Path) -> Callable[[], None]:
    """Make ``path`` (a file) impossible to delete for this user; returns the undo."""
    if os.geteuid() != 0:
        path.parent.chmod(0o500)
        return lambda: path.parent.chmod(0o700)
    done = subprocess.run(["chattr", "+i", str(path)], capture_output=True, check=False)
    if done.returncode != 0:
        pytest.skip("root, and no chattr here: no way to make a file undeletable")
    return lambda: subprocess.run(["chattr", "-i", str(path)], check=True)


def _run_saving(capsys: pytest.CaptureFixture[str], local: list[str], tmp_path: Path) -> Path:
    spec = tmp_path / "spec.yaml"
    trainer = {"type": "CustomTrainer", "func": SAVES}
    # The job's own env names a checkpoint URI of its own (not the option's): the
    # commands below must not read it as the suite's.
    trainer["env"] = {"KF_TRAINER_CHECKPOINT_URI": "s3://mine"}  # type: ignore[assignment]
    spec.write_text(yaml.safe_dump({"trainer": trainer}))
    done = run_main(capsys, *local, "run", str(spec), "--identity", "nightly/x")
    assert done.code == 0, done.err
    found = run_main(capsys, "jobs", "checkpoints", "where", "nightly/x", *local, "-o", "json")
    assert found.code == 0, found.err
    return Path(json.loads(found.out)["path"])


def test_clean_never_says_removed_when_something_is_left(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    local = ["--backend", "local", "--state-dir", str(tmp_path / "state")]
    where = _run_saving(capsys, local, tmp_path)
    stuck = latest(where)
    assert stuck is not None
    undo = _undeletable(stuck)
    try:
        cleaned = run_main(capsys, "jobs", "checkpoints", "clean", "nightly/x", *local)
    finally:
        undo()
    assert cleaned.code == 4, cleaned.out
    assert "removed" not in cleaned.out
    assert "were not removed" in cleaned.err
    assert stuck.name in cleaned.err  # names what is left
    again = run_main(capsys, "jobs", "checkpoints", "clean", "nightly/x", *local)
    assert again.code == 0, again.err
    assert not where.exists()


def test_clean_refuses_a_symlinked_identity_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """On a shared state directory one identity's directory (or its namespace's) made a
    link to another's: cleaning it must remove nothing."""
    local = ["--backend", "local", "--state-dir", str(tmp_path / "state")]
    where = _run_saving(capsys, local, tmp_path)
    other = tmp_path / "someone-elses"
    other.mkdir()
    (other / "step-0000000001.json").write_text("{}")
    shutil.rmtree(where)
    where.symlink_to(other)
    cleaned = run_main(capsys, "jobs", "checkpoints", "clean", "nightly/x", *local)
    assert cleaned.code == 4
    assert "symbolic link" in cleaned.err
    assert (other / "step-0000000001.json").exists()
    # The namespace's directory as a link: refused the same way.
    where.unlink()
    ns_dir = where.parent
    moved = tmp_path / "ns-elsewhere"
    ns_dir.rename(moved)
    (moved / where.name).mkdir()
    ns_dir.symlink_to(moved)
    cleaned = run_main(capsys, "jobs", "checkpoints", "clean", "nightly/x", *local)
    assert cleaned.code == 4
    assert (moved / where.name).exists()
