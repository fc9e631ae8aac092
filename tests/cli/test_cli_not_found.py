"""Naming something that does not exist is an error, everywhere (exit 3 on the command
line, :class:`TrainJobNotFoundError` from the client), and reading a state directory
never creates it (issue 26, item 2)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from cli_support import run_main

from kf_trainer_core.cli import Exit
from kf_trainer_core.client import AsyncTrainerClient, TrainerClient
from kf_trainer_core.config import LocalConfig
from kf_trainer_core.errors import StateDirNotFoundError, TrainJobNotFoundError


def _used_state_dir(path: Path) -> Path:
    """A state directory as a first submit leaves it, less the job (a client never
    creates one by reading it)."""
    from kf_trainer_core.backends.local.store import Store

    Store(path / "state.db").close()
    return path


@pytest.fixture
def local(tmp_path: Path) -> list[str]:
    state = _used_state_dir(tmp_path / "state")  # it exists: only the job is missing
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
    with TrainerClient(LocalConfig(state_dir=str(_used_state_dir(tmp_path / "s")))) as client:
        with pytest.raises(TrainJobNotFoundError, match=r"local/nope not found\."):
            client.get_job_logs("nope")
        with pytest.raises(TrainJobNotFoundError):
            list(client.get_job_logs("nope", follow=True))
        with pytest.raises(TrainJobNotFoundError):
            client.get_job_events("nope")


async def test_the_async_client_refuses_them_too(tmp_path: Path) -> None:
    config = LocalConfig(state_dir=str(_used_state_dir(tmp_path / "s")))
    async with AsyncTrainerClient(config) as client:
        with pytest.raises(TrainJobNotFoundError):
            [line async for line in client.get_job_logs("nope")]
        with pytest.raises(TrainJobNotFoundError):
            await client.get_job_events("nope")


@pytest.mark.parametrize(
    "command",
    [
        ["jobs", "list"],
        ["jobs", "get", "x"],
        ["jobs", "logs", "x"],
        ["jobs", "events", "x"],
        ["jobs", "wait", "x", "--timeout", "5"],
        ["jobs", "cancel", "x"],
        ["jobs", "checkpoints", "where", "dag/train/run-1"],
        ["jobs", "checkpoints", "clean", "dag/train/run-1"],
    ],
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


@pytest.mark.parametrize(
    "command",
    [["runtimes", "list"], ["runtimes", "get", "torch-distributed"]],
    ids=" ".join,
)
def test_runtimes_need_no_state_dir_and_do_not_create_one(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    typo = tmp_path / "stat"
    got = run_main(capsys, *command, "--backend", "local", "--state-dir", str(typo))
    assert got.code == Exit.OK, got.err
    assert "torch-distributed" in got.out  # the built-in runtimes answer without one
    assert not typo.exists()


def test_a_directory_without_jobs_state_is_refused_and_left_as_it_was(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    got = run_main(capsys, "jobs", "list", "--backend", "local", "--state-dir", str(tmp_path))
    assert got.code == Exit.NOT_FOUND, (got.out, got.err)
    assert "holds no jobs' state" in got.err
    assert list(tmp_path.iterdir()) == []


def _reads(client: TrainerClient) -> list[tuple[str, Callable[[], object]]]:
    return [
        ("list_jobs", client.list_jobs),
        ("get_job", lambda: client.get_job("x")),
        ("get_job_logs", lambda: client.get_job_logs("x")),
        ("get_job_events", lambda: client.get_job_events("x")),
        ("wait", lambda: client.wait("x", timeout=5)),
        ("checkpoint_location", lambda: client.checkpoint_location("dag/train/run-1")),
    ]


def test_a_client_that_only_reads_never_creates_its_state_dir(tmp_path: Path) -> None:
    typo = tmp_path / "stat"
    with TrainerClient(LocalConfig(state_dir=str(typo))) as client:
        for what, read in _reads(client):
            with pytest.raises(StateDirNotFoundError, match="does not exist") as err:
                read()
            assert str(typo) in str(err.value), what
            assert isinstance(err.value, TrainJobNotFoundError)  # "no job there" to callers
        assert "torch-distributed" in [r.name for r in client.list_runtimes()]
        assert client.get_runtime("torch-distributed").name == "torch-distributed"
    assert not typo.exists()


async def test_the_async_client_never_creates_it_either(tmp_path: Path) -> None:
    typo = tmp_path / "stat"
    async with AsyncTrainerClient(LocalConfig(state_dir=str(typo))) as client:
        with pytest.raises(StateDirNotFoundError, match=str(typo)):
            await client.list_jobs()
        with pytest.raises(StateDirNotFoundError, match=str(typo)):
            await client.get_job("x")
        assert await client.list_runtimes()
    assert not typo.exists()


def test_a_state_dir_made_by_another_process_is_read_once_it_exists(tmp_path: Path) -> None:
    state = tmp_path / "state"
    with TrainerClient(LocalConfig(state_dir=str(state))) as client:
        with pytest.raises(StateDirNotFoundError):
            client.list_jobs()
        _used_state_dir(state)  # a first submit elsewhere
        assert client.list_jobs() == []
