"""``kf-trainer`` on the local backend (no cluster, no kubectl): the jobs a process ran
are in its state directory, and the command reads them there — submitted with ``run``,
followed with ``logs -f``, waited for, listed, explained when they fail."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from cli_support import run_main, run_script

SLOW = """\
def train(steps: int = 6):
    import time
    for i in range(steps):
        print(f"step {i}", flush=True)
        time.sleep(0.4)
    return {"steps": steps}
"""

BROKEN = """\
def train():
    print("loading data", flush=True)
    raise RuntimeError("the data bucket is empty")
"""


def write_spec(path: Path, func: str, **trainer: object) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "runtime": "torch-distributed",
                "trainer": {"type": "CustomTrainer", "func": func, **trainer},
                "options": [{"type": "Labels", "labels": {"team": "cli"}}],
            }
        )
    )
    return path


@pytest.fixture
def local(tmp_path: Path) -> list[str]:
    return ["--backend", "local", "--state-dir", str(tmp_path / "state")]


def test_run_follow_wait_list_on_the_local_backend(tmp_path: Path, local: list[str]) -> None:
    spec = write_spec(tmp_path / "slow.yaml", SLOW)
    submitted = run_script(*local, "run", str(spec), "--name", "slow-job", "--detach")
    assert submitted.code == 0, submitted.err
    assert submitted.out.strip() == "local/slow-job: created"

    followed = run_script("jobs", "logs", "slow-job", "-f", *local)
    assert followed.code == 0, followed.err
    assert [ln for ln in followed.out.splitlines() if ln.startswith("step")] == [
        f"step {i}" for i in range(6)
    ]

    # KF_TRAINER_BACKEND says the same as the flags.
    backend = json.dumps({"backend": "local", "state_dir": str(tmp_path / "state")})
    waited = run_script("jobs", "wait", "slow-job", KF_TRAINER_BACKEND=backend)
    assert waited.code == 0, waited.err
    assert "local/slow-job: Complete in" in waited.out
    assert 'result: {"steps": 6}' in waited.out

    listed = run_script("jobs", "list", "-o", "json", KF_TRAINER_BACKEND=backend)
    [job] = listed.json()
    assert (job["name"], job["namespace"], job["status"]) == ("slow-job", "local", "Complete")
    assert job["labels"]["team"] == "cli"


def test_run_a_failing_function_exits_1_and_get_explains(
    tmp_path: Path, local: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    spec = write_spec(tmp_path / "broken.yaml", BROKEN)
    ran = run_script(*local, "run", str(spec), "--name", "broken-job")
    assert ran.code == 1
    assert "loading data" in ran.out
    assert "local/broken-job failed" in ran.err
    assert "the data bucket is empty" in ran.err

    got = run_main(capsys, "jobs", "get", "broken-job", *local)
    assert got.code == 0
    assert "Status:" in got.out
    assert "Failed" in got.out
    assert "the data bucket is empty" in got.out

    waited = run_main(capsys, "jobs", "wait", "broken-job", *local)
    assert waited.code == 1
    assert "the data bucket is empty" in waited.err

    failed = run_main(capsys, *local, "jobs", "list", "--status", "Failed")
    assert failed.out.splitlines()[1].split()[:3] == ["broken-job", "local", "Failed"]


def test_rerun_with_an_identity_reuses_the_finished_job(tmp_path: Path, local: list[str]) -> None:
    spec = write_spec(tmp_path / "quick.yaml", "def train():\n    print('trained')\n    return 1\n")
    first = run_script(*local, "run", str(spec), "--identity", "nightly/day-5")
    assert first.code == 0, first.err
    assert "trained" in first.out
    again = run_script(*local, "run", str(spec), "--identity", "nightly/day-5")
    assert again.code == 0, again.err
    assert "reusing the finished job local/" in again.out
    assert "trained" not in again.out  # its log is not replayed as if it trained again
    assert "result: 1" in again.out


def test_spec_file_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("runtime: torch\ntrainer: [unclosed\n")
    listing = tmp_path / "list.yaml"
    listing.write_text("- runtime: torch\n")
    for args, says in [
        (["check", str(tmp_path / "missing.yaml")], "missing.yaml: no such spec file"),
        (["check", str(bad)], "bad.yaml: not valid YAML"),
        (["render", str(bad)], "at line 3"),
        (["check", str(listing)], "a spec is a mapping (runtime, trainer, ...), not list"),
    ]:
        result = run_main(capsys, *args)
        assert result.code == 2, result.err
        assert says in result.err
        assert len(result.err.strip().splitlines()) == 1
    misspelt = tmp_path / "misspelt.yaml"
    misspelt.write_text(
        "runtime: torch-distributed\ntrainer: {type: CustomTrainer, func: 'def f(): pass', num_node: 2}\n"
    )
    result = run_main(capsys, "check", str(misspelt))
    assert result.code == 2
    assert "trainer.num_node: unknown field" in result.err
    assert "num_nodes" in result.err


def test_render_check_and_version() -> None:
    root = Path(__file__).resolve().parents[2]
    spec = str(root / "examples" / "specs" / "quickstart.yaml")
    rendered = run_script("render", spec, "-n", "team-a", "--name", "my-job")
    assert rendered.code == 0, rendered.err
    manifest = yaml.safe_load(rendered.out)
    assert manifest["metadata"] == {**manifest["metadata"], "name": "my-job", "namespace": "team-a"}
    before = run_script("-n", "team-b", "render", spec, "--name", "my-job")
    assert yaml.safe_load(before.out)["metadata"]["namespace"] == "team-b"
    checked = run_script("check", spec)
    assert checked.code == 0
    assert checked.out.startswith("ok: ")
    version = run_script("--version")
    assert version.code == 0
    assert version.out.startswith("kf-trainer, version ")
