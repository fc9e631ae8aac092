"""The checkpoint helper (naming, latest, atomic saves), the identity's location, the
``Checkpoints`` option's checks and its manifest, and the helper carried in the program."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kf_trainer_core import checkpoints as ck
from kf_trainer_core.errors import SpecError
from kf_trainer_core.manifest import builder
from kf_trainer_core.manifest.builder import build_trainjob
from kf_trainer_core.spec import CustomTrainer, RuntimePatch, TrainJobSpec
from kf_trainer_core.spec.checkpoint_storage import Checkpoints, option_of
from kf_trainer_core.spec.function import program_for

RESUMES = """\
def train(steps: int = 3):
    from kf_trainer_core.checkpoints import latest, save_json, step_of
    last = latest()
    start = step_of(last) + 1 if last else 0
    for step in range(start, steps):
        save_json(step, {"step": step})
    return start
"""


def test_latest_follows_the_naming_convention(tmp_path: Path) -> None:
    for name in ("step-0000000002.pt", "step-0000000010", ".tmp-x-step-0000000099.pt", "notes"):
        (tmp_path / name).write_text("x")
    assert ck.latest(tmp_path) == tmp_path / "step-0000000010"
    assert [ck.step_of(p) for p in ck.checkpoints(tmp_path)] == [2, 10]
    assert ck.latest(tmp_path / "absent") is None
    with pytest.raises(ValueError, match="not a checkpoint name"):
        ck.step_of("model.pt")


def test_save_is_atomic_and_deletes_only_when_asked(tmp_path: Path) -> None:
    def broken(path: Path) -> None:
        path.write_text("half")
        raise OSError("disk full")

    with pytest.raises(OSError):
        ck.save(1, broken, directory=tmp_path)
    assert list(tmp_path.iterdir()) == []  # no partial step-*, no temp left
    for step in range(4):
        ck.save_json(step, {"s": step}, directory=tmp_path)
    assert len(ck.checkpoints(tmp_path)) == 4
    ck.save_json(4, {"s": 4}, directory=tmp_path, keep=2)
    assert [ck.step_of(p) for p in ck.checkpoints(tmp_path)] == [3, 4]

    def as_dir(path: Path) -> None:
        path.mkdir()
        (path / "weights").write_text("w")

    ck.save(5, as_dir, directory=tmp_path)
    ck.save(5, as_dir, directory=tmp_path)  # a step saved again after a resume
    assert (ck.latest(tmp_path) or tmp_path).joinpath("weights").read_text() == "w"
    assert sorted(p.name for p in tmp_path.iterdir())[-1] == "step-0000000005"


def test_only_rank_zero_saves(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "1")
    assert ck.save_json(0, {}, directory=tmp_path) is None
    assert ck.save_json(0, {}, directory=tmp_path, all_ranks=True) is not None


def test_without_a_location_the_helper_is_a_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ck.DIR_ENV, raising=False)
    assert ck.checkpoint_dir() is None
    assert ck.latest() is None
    assert ck.save_json(0, {}) is None


def test_identity_keys_are_stable_distinct_and_one_segment() -> None:
    a = ck.identity_key("dag/train/scheduled__2026-01-01T00:00:00+00:00/-1")
    assert a == ck.identity_key("dag/train/scheduled__2026-01-01T00:00:00+00:00/-1")
    assert "/" not in a
    assert a.startswith("dag-train-scheduled__2026-01-01t00-00-00-00-00")
    assert ck.identity_key("a/b") != ck.identity_key("a-b")  # same readable part
    assert ck.identity_key("../..") == ck.identity_key("../..")
    assert ".." not in ck.identity_key("../..")
    assert ck.IDENTITY_ANNOTATION == builder.IDENTITY_ANNOTATION  # kept in step


def test_the_helper_travels_in_the_program(tmp_path: Path) -> None:
    """A pod whose image lacks the suite still imports the helper, and resumes."""
    program = tmp_path / "program.py"
    program.write_text(program_for("train", RESUMES, {"steps": 3}))
    env = {"PATH": os.environ["PATH"], ck.DIR_ENV: str(tmp_path / "ckpt")}
    env["KF_TRAINER_TERMINATION_LOG"] = str(tmp_path / "term")
    runs = [
        subprocess.run(  # -I: no site-packages, no PYTHONPATH: kf_trainer_core is absent
            [sys.executable, "-I", str(program)], env=env, capture_output=True, text=True
        )
        for _ in range(2)
    ]
    assert [r.stdout.strip().split()[-1] for r in runs] == ["0", "3"], runs[0].stderr
    # Functions that do not use it keep the same program bytes.
    assert "_kf_trainer_checkpoints" not in program_for("f", "def f():\n    return 1\n", None)


def _spec(*options: object) -> TrainJobSpec:
    return TrainJobSpec(trainer=CustomTrainer(RESUMES), options=list(options))


def test_the_option_is_checked() -> None:
    with pytest.raises(SpecError) as bad:
        TrainJobSpec.parse({"options": [{"type": "Checkpoints", "pvc": "Team_X"}]})
    assert "'Team_X' is not a valid PersistentVolumeClaim name" in str(bad.value)
    assert bad.value.fields == ["options[0].pvc"]
    with pytest.raises(SpecError, match="carries credentials"):
        Checkpoints(uri="s3://key:secret@bucket/x")
    with pytest.raises(SpecError, match="enabled=False"):
        Checkpoints(enabled=False, pvc="a")
    with pytest.raises(SpecError, match="mount_path"):
        Checkpoints(pvc="a", mount_path="/workspace")
    with pytest.raises(SpecError, match="Checkpoints is given twice"):
        _spec(Checkpoints(pvc="a"), Checkpoints(pvc="b"))
    clash = RuntimePatch(manager="kf-trainer-suite/checkpoints")
    with pytest.raises(SpecError, match="another manager"):
        build_trainjob(_spec(Checkpoints(pvc="a"), clash), identity="x")
    env = TrainJobSpec(
        trainer=CustomTrainer(RESUMES, env={ck.DIR_ENV: "/x"}), options=[Checkpoints(pvc="a")]
    )
    with pytest.raises(SpecError, match=r"trainer\.env: KF_TRAINER_CHECKPOINT_DIR is set by"):
        build_trainjob(env, identity="x")


def test_the_manifest_is_the_identitys_and_reads_back() -> None:
    option = Checkpoints(pvc="ckpts", uri="s3://bucket/runs")
    one = build_trainjob(_spec(option), namespace="team-a", identity=("d", "t", "r"))
    two = build_trainjob(_spec(option), namespace="team-a", identity=("d", "t", "r"), attempt=3)
    assert one.name != two.name
    assert one.manifest["spec"]["trainer"]["env"] == two.manifest["spec"]["trainer"]["env"]
    assert one.manifest["spec"]["runtimePatches"] == two.manifest["spec"]["runtimePatches"]
    assert option_of(two.manifest) == option
    assert option_of(build_trainjob(_spec(), identity="x").manifest) is None
    off = build_trainjob(_spec(Checkpoints(enabled=False)), identity="x").manifest
    assert off["metadata"]["annotations"][ck.ANNOTATION] == "off"
    assert "env" not in off["spec"]["trainer"]


def test_keep_never_prunes_the_checkpoint_just_saved(tmp_path: Path) -> None:
    """An earlier attempt got to step 50; this attempt saves 3 with keep=2: step 3 stays
    (it is this attempt's progress), and so does the highest other step."""
    for step in (10, 20, 50):
        ck.save_json(step, {"s": step}, directory=tmp_path)
    saved = ck.save_json(3, {"s": 3}, directory=tmp_path, keep=2)
    assert saved is not None
    assert saved.exists()
    assert [ck.step_of(p) for p in ck.checkpoints(tmp_path)] == [3, 50]
    assert (
        ck.save_json(4, {"s": 4}, directory=tmp_path, keep=1) == tmp_path / "step-0000000004.json"
    )
    assert [ck.step_of(p) for p in ck.checkpoints(tmp_path)] == [4]
    with pytest.raises(ValueError, match="keep"):
        ck.save_json(5, {}, directory=tmp_path, keep=0)


@pytest.mark.parametrize("step", [10**10, 10**19, -1, 1.5, True])
def test_steps_the_naming_cannot_order_are_refused(tmp_path: Path, step: object) -> None:
    with pytest.raises(ValueError, match="step must be"):
        ck.save_json(step, {}, directory=tmp_path)  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []
    ck.save_json(ck.MAX_STEP, {}, directory=tmp_path)
    assert ck.latest(tmp_path) == tmp_path / f"step-{ck.MAX_STEP}.json"


def test_a_name_with_a_trailing_newline_is_not_a_checkpoint(tmp_path: Path) -> None:
    (tmp_path / "step-0000000007\n").write_text("x")
    assert ck.latest(tmp_path) is None


def test_the_cleaning_pod_refuses_links_and_reports_what_is_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the cluster's cleaning job runs: ``<mount>/<namespace>/<key>`` only, never
    through a link (the identity's or its namespace's), and it fails if anything stays."""
    from kf_trainer_core.programs.checkpoints import remove_checkpoints

    mount = tmp_path / "mount"
    victim = mount / "team-b" / "theirs"
    victim.mkdir(parents=True)
    (victim / "step-0000000001.json").write_text("{}")
    (mount / "team-a").mkdir()
    mine = mount / "team-a" / "mine"
    mine.symlink_to(victim)
    monkeypatch.setenv("KF_TRAINER_CLEAN_MOUNT", str(mount))
    monkeypatch.setenv("KF_TRAINER_CLEAN_PATH", str(mine))
    with pytest.raises(ValueError, match="symbolic link"):
        remove_checkpoints()
    assert (victim / "step-0000000001.json").exists()
    # The namespace directory as the link: depth after realpath looks right, still refused.
    (mount / "team-c").symlink_to(mount / "team-b")
    monkeypatch.setenv("KF_TRAINER_CLEAN_PATH", str(mount / "team-c" / "theirs"))
    with pytest.raises(ValueError, match="symbolic link"):
        remove_checkpoints()
    assert victim.exists()
    monkeypatch.setenv("KF_TRAINER_CLEAN_PATH", str(mount / "team-b"))
    with pytest.raises(ValueError, match="2 levels under"):
        remove_checkpoints()
    monkeypatch.setenv("KF_TRAINER_CLEAN_PATH", str(victim))
    assert remove_checkpoints()["existed"] is True
    assert not victim.exists()
    assert remove_checkpoints()["existed"] is False


def test_a_leftover_is_an_error_not_a_removal(tmp_path: Path) -> None:
    root = tmp_path / "root"
    target = root / "ns" / "key"
    target.mkdir(parents=True)
    stuck = target / "step-0000000001.json"
    stuck.write_text("{}")
    if os.geteuid() == 0:
        if subprocess.run(["chattr", "+i", str(stuck)], check=False).returncode != 0:
            pytest.skip("root without chattr: no undeletable file")
        undo = ["chattr", "-i", str(stuck)]
    else:
        target.chmod(0o500)
        undo = ["chmod", "700", str(target)]
    try:
        with pytest.raises(OSError, match=r"was not removed: .*step-0000000001\.json"):
            ck.remove_tree(target, root, depth=2)
    finally:
        subprocess.run(undo, check=True)
    assert ck.remove_tree(target, root, depth=2) is True


def test_a_jobs_own_checkpoint_env_is_not_read_as_the_option() -> None:
    """A job that sets KF_TRAINER_CHECKPOINT_URI itself (no option) reads back as no
    option, whatever the value; the option's own URI still reads back."""
    spec = TrainJobSpec(trainer=CustomTrainer(RESUMES, env={ck.URI_ENV: "s3://mine"}))
    job = build_trainjob(spec, identity="x").manifest
    assert option_of(job) is None
    job["spec"]["trainer"]["env"] = [{"name": ck.URI_ENV, "value": "not a uri"}]
    assert option_of(job) is None
    option = Checkpoints(uri="s3://bucket/runs")
    assert option_of(build_trainjob(_spec(option), identity="x").manifest) == option
