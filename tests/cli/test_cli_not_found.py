"""Naming something that does not exist is an error, everywhere (exit 3 on the command
line, :class:`TrainJobNotFoundError` from the client), and reading a state directory
never creates it (issue 26, item 2)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_support import run_main

from kf_trainer_core.cli import Exit
from kf_trainer_core.client import AsyncTrainerClient, TrainerClient
from kf_trainer_core.config import LocalConfig
from kf_trainer_core.errors import TrainJobNotFoundError


@pytest.fixture
def local(tmp_path: Path) -> list[str]:
    state = tmp_path / "state"
    with TrainerClient(LocalConfig(state_dir=str(state))):
        pass  # the state directory exists: only the job is missing
    return ["--backend", "local", "--state-dir", str(state)]


@pytest.mark.parametrize(
    "command",
    [
        ["jobs", "get", "nope"],
        ["jobs", "logs", "nope"],
        ["jobs", "logs", "nope", "-f"],
        ["jobs", "events", "nope"],
        ["jobs", "wait", "nope", "--timeout", "5"],
        ["jobs", "cancel", "nope"],
        ["jobs", "cancel", "nope", "--action", "suspend"],
        ["jobs", "suspend", "nope"],
        ["jobs", "resume", "nope"],
        ["jobs", "delete", "nope"],
    ],
    ids=lambda c: " ".join(c[1:]),
)
def test_a_missing_job_exits_3_with_one_sentence_and_a_fix(
    command: list[str], local: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    got = run_main(capsys, *command, *local)
    assert got.code == Exit.NOT_FOUND, (got.out, got.err)
    assert got.out == ""
    assert "nope" in got.err
    assert "not found Fix" not in got.err  # a full stop ends the sentence before the fix


def test_the_client_refuses_logs_and_events_of_a_missing_job(tmp_path: Path) -> None:
    with TrainerClient(LocalConfig(state_dir=str(tmp_path / "s"))) as client:
        with pytest.raises(TrainJobNotFoundError, match=r"local/nope not found\."):
            client.get_job_logs("nope")
        with pytest.raises(TrainJobNotFoundError):
            list(client.get_job_logs("nope", follow=True))
        with pytest.raises(TrainJobNotFoundError):
            client.get_job_events("nope")


async def test_the_async_client_refuses_them_too(tmp_path: Path) -> None:
    async with AsyncTrainerClient(LocalConfig(state_dir=str(tmp_path / "s"))) as client:
        with pytest.raises(TrainJobNotFoundError):
            [line async for line in client.get_job_logs("nope")]
        with pytest.raises(TrainJobNotFoundError):
            await client.get_job_events("nope")


@pytest.mark.parametrize(
    "command",
    [["jobs", "list"], ["jobs", "get", "x"], ["jobs", "logs", "x"], ["jobs", "events", "x"]],
    ids=" ".join,
)
def test_a_mistyped_state_dir_is_an_error_and_is_not_created(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    typo = tmp_path / "stat"
    got = run_main(capsys, *command, "--backend", "local", "--state-dir", str(typo))
    assert got.code == Exit.NOT_FOUND, (got.out, got.err)
    assert str(typo) in got.err
    assert "--state-dir" in got.err
    assert "No TrainJobs" not in got.out
    assert not typo.exists()


def test_the_fix_of_a_missing_job_runs_as_printed(
    local: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    import subprocess

    got = run_main(capsys, "jobs", "logs", "nope", *local)
    fix = got.err.split("Fix: check the name and namespace with: ")[1].strip()
    assert "--state-dir" in fix
    listed = subprocess.run(fix, shell=True, capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0, listed.stderr
    assert "No TrainJobs in namespace local." in listed.stderr
