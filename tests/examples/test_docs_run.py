"""Documented commands and snippets run as written: docs/cli.md's tour (a bash block,
on the local backend), docs/testing.md's pytest example, docs/prefect.md's ``hello.py``;
every ``kf-trainer`` command and option is documented in docs/cli.md; the README names
the KFP component's real outputs; and the wheel that ``uv build`` makes installs into a
fresh virtual environment and works there."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import click
import pytest
from examples_support import DOCS, ROOT

BIN = Path(sys.executable).parent


def blocks(page: Path, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", page.read_text(), re.DOTALL)


def section(page: Path, heading: str) -> str:
    return page.read_text().split(f"\n{heading}\n", 1)[1].split("\n## ", 1)[0]


@pytest.fixture
def uv_shim(tmp_path: Path) -> dict[str, str]:
    """An environment in which ``uv run --frozen CMD`` runs CMD from this project's
    environment (what uv would do in the clone, without resolving anything)."""
    shim = tmp_path / "shim"
    shim.mkdir()
    uv = shim / "uv"
    uv.write_text('#!/bin/sh\n[ "$1" = run ] && shift\n[ "$1" = --frozen ] && shift\nexec "$@"\n')
    uv.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("KF_TRAINER_")}
    env["PATH"] = os.pathsep.join([str(shim), str(BIN), env.get("PATH", "")])
    return env


def test_the_cli_tour_runs_as_written(tmp_path: Path, uv_shim: dict[str, str]) -> None:
    (tour,) = blocks_in(section(DOCS / "cli.md", "## A tour on this machine"), "bash")
    work = tmp_path / "clone"
    (work / "examples" / "specs").mkdir(parents=True)
    shutil.copy(ROOT / "examples" / "specs" / "quickstart.yaml", work / "examples" / "specs")
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", tour],
        cwd=work,
        env=uv_shim,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "local/tour-2: Complete in" in done.stdout
    assert "epoch 4: w=3.000" in done.stdout  # logs -f of tour-2
    assert '"name": "tour-1"' in done.stdout
    assert "local/tour-1: deleted" in done.stdout
    assert "local/tour-2: deleted" in done.stdout
    assert (work / ".kf-trainer" / "cli-tour").is_dir()


def blocks_in(text: str, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", text, re.DOTALL)


def _commands(group: click.Group, prefix: str = "") -> dict[str, click.Command]:
    found: dict[str, click.Command] = {}
    for name, command in group.commands.items():
        path = f"{prefix}{name}"
        found[path] = command
        if isinstance(command, click.Group):
            found.update(_commands(command, f"{path} "))
    return found


def test_every_command_and_option_is_documented() -> None:
    from kf_trainer_core.cli import cli

    page = (DOCS / "cli.md").read_text()
    spans = " ".join(re.findall(r"`([^`\n]+)`", page))
    for path, command in _commands(cli).items():
        assert f"`{path.split(' ', 1)[-1]}" in page or path in spans, f"{path} undocumented"
        for param in command.params:
            for opt in getattr(param, "opts", []):
                if opt.startswith("-"):
                    assert opt in spans, f"{path} {opt} undocumented"
    assert "--version" in spans


def test_testing_page_example_runs_as_written(tmp_path: Path) -> None:
    conftest, test, *_ = blocks(DOCS / "testing.md", "python")
    assert conftest.startswith("# conftest.py")
    assert test.startswith("# test_training.py")
    (tmp_path / "conftest.py").write_text(conftest)
    (tmp_path / "test_training.py").write_text(test)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_training.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout


@pytest.mark.slow
def test_prefect_hello_runs_as_written(tmp_path: Path, uv_shim: dict[str, str]) -> None:
    page = DOCS / "prefect.md"
    hello = blocks_in(section(page, "## The smallest flow"), "python")[0]
    (command,) = blocks_in(section(page, "## The smallest flow"), "bash")
    # The file as a user copies it, run as the page says, with no setting of ours around it.
    assert command.strip() == "uv run --frozen python hello.py"
    (tmp_path / "hello.py").write_text(hello)
    env = {k: v for k, v in uv_shim.items() if not k.startswith(("PREFECT_", "DO_NOT_TRACK"))}
    env["PREFECT_HOME"] = str(tmp_path / "prefect-home")
    env["HOME"] = str(tmp_path)  # the local backend's default state directory goes here
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", command],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "{'loss': 0.5}" in done.stdout
    # Quiet as copied: no telemetry heartbeat racing the temporary server's database.
    printed = done.stdout + done.stderr
    assert "Traceback" not in printed
    assert "telemetry" not in printed
    assert " | ERROR " not in printed
    listed = subprocess.run(
        [str(BIN / "kf-trainer"), "--backend", "local", "jobs", "list", "-o", "json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert '"status": "Complete"' in listed.stdout


def test_readme_names_the_kfp_outputs() -> None:
    from kf_trainer_kfp._source import RESULT_ARTIFACTS, RESULT_OUTPUTS

    text = (ROOT / "README.md").read_text()
    (named,) = re.findall(r"# outputs: (.*)", text)
    expected = [n for n, _ in RESULT_OUTPUTS] + [n for n, _, _ in RESULT_ARTIFACTS]
    assert [n.strip() for n in named.split(",")] == expected


@pytest.mark.slow
def test_the_wheel_installs_into_a_fresh_venv_and_works(tmp_path: Path) -> None:
    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not on PATH (CI installs it)")
    dist = tmp_path / "dist"
    subprocess.run(
        [uv, "build", "--wheel", "--out-dir", str(dist)],
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = dist.glob("kf_trainer_suite-*-py3-none-any.whl")
    # The image recipe in docs/kfp.md copies exactly this file name.
    assert "COPY dist/kf_trainer_suite-*-py3-none-any.whl /tmp/" in (DOCS / "kfp.md").read_text()
    venv = tmp_path / "venv"
    subprocess.run(
        [uv, "venv", "-q", str(venv), "--python", sys.executable], check=True, timeout=120
    )
    env = {**os.environ, "VIRTUAL_ENV": str(venv)}
    install = [uv, "pip", "install", "-q", str(wheel)]
    # From uv's cache when it holds everything (as after `uv sync`), else from the index.
    if subprocess.run([*install, "--offline"], env=env, check=False, timeout=300).returncode:
        subprocess.run(install, env=env, check=True, timeout=600)
    python, script = venv / "bin" / "python", venv / "bin" / "kf-trainer"
    where = subprocess.run(
        [
            str(python),
            "-c",
            "import kf_trainer_core, kf_trainer_kfp; print(kf_trainer_core.__file__)",
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    )
    assert where.stdout.startswith(str(venv))  # the installed copy, not the clone's
    spec = ROOT / "examples" / "specs" / "quickstart.yaml"
    ran = subprocess.run(
        [
            str(script),
            "--backend",
            "local",
            "--state-dir",
            str(tmp_path / "state"),
            "run",
            str(spec),
            "--name",
            "from-the-wheel",
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=tmp_path,
    )
    assert ran.returncode == 0, ran.stderr
    assert "local/from-the-wheel: Complete" in ran.stdout


def _run_python(path: Path, code: str) -> subprocess.CompletedProcess[str]:
    path.write_text(code)
    return subprocess.run(
        [sys.executable, str(path)],
        cwd=path.parent,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.parametrize(
    ("index", "epilogue"),
    [
        # The Airflow, Prefect and KFP blocks of "## Examples" define their DAG, flow and
        # pipeline as written (where a cluster is needed, running stops there); the KFP
        # one also compiles.
        (0, ""),
        (1, ""),
        (2, "from kfp import compiler\ncompiler.Compiler().compile(nightly, 'p.yaml')\n"),
        # The tour's spec and build blocks, one after the other, as a reader runs them.
        (3, ""),
    ],
)
def test_readme_python_blocks_run_as_written(tmp_path: Path, index: int, epilogue: str) -> None:
    found = blocks(ROOT / "README.md", "python")
    code = found[index] + ("\n" + found[4] if index == 3 else "") + epilogue
    done = _run_python(tmp_path / f"readme_block_{index}.py", code)
    assert done.returncode == 0, done.stderr
    if index == 2:
        assert (tmp_path / "p.yaml").is_file()
    if index == 3:
        assert "kind: TrainJob" in done.stdout
        assert "namespace: team-a" in done.stdout
