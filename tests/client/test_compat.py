"""The core supports ``kubernetes`` 30 through 37 (kfp caps it below 31, Airflow's
cncf-kubernetes provider needs 36+): the project environment has 30; this runs the
client tests again with 37 (and the oldest ``kubernetes_asyncio`` we allow) layered on
top by ``uv run --with``."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: The child runs in one process: not the project's addopts, whose ``-n auto`` would start
#: workers inside a test (and the 3.10 environment has no pytest-xdist).
ONE_PROCESS = ["-o", "addopts=-ra --strict-markers"]


@pytest.mark.slow
@pytest.mark.timeout(900)  # its child run may take 600 s
def test_client_suite_with_kubernetes_37() -> None:
    if os.environ.get("KF_TRAINER_COMPAT_CHILD"):
        pytest.skip("already inside the compatibility run")
    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not installed")
    command = [
        uv, "run", "--frozen", "--with", "kubernetes==37.0.2", "--with", "kubernetes_asyncio==30.3.1",
        "python", "-m", "pytest", "-q", "-p", "no:cacheprovider", *ONE_PROCESS,
        "tests/client/test_client_sync.py", "tests/client/test_client_async.py",
        "tests/client/test_log_follow_hardening.py", "tests/client/test_log_follow_silence.py",
    ]  # fmt: skip
    env = {**os.environ, "KF_TRAINER_COMPAT_CHILD": "1"}
    env.pop("VIRTUAL_ENV", None)
    proc = subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    tail = (proc.stdout + proc.stderr)[-4000:]
    if proc.returncode != 0 and "No solution found" in tail:
        pytest.skip(f"cannot resolve the compatibility environment here:\n{tail}")
    assert proc.returncode == 0, tail
    assert " passed" in proc.stdout


def _find_python(version: str) -> str | None:
    """A working interpreter of ``version`` (pyenv shims answer but may not run it)."""
    candidates = sorted(Path.home().glob(f".pyenv/versions/{version}*/bin/python3"))
    found = shutil.which(f"python{version}")
    for candidate in [*map(str, candidates), *([found] if found else [])]:
        probe = subprocess.run([candidate, "-c", "import sys"], capture_output=True, check=False)
        if probe.returncode == 0:
            return candidate
    return None


@pytest.mark.slow
@pytest.mark.timeout(900)  # its child run may take 600 s
def test_core_on_python_310() -> None:
    """The distribution promises Python >= 3.10: run the spec and builder tests there."""
    if os.environ.get("KF_TRAINER_COMPAT_CHILD"):
        pytest.skip("already inside the compatibility run")
    uv = shutil.which("uv")
    python310 = _find_python("3.10")
    if uv is None or python310 is None:
        pytest.skip("uv or a Python 3.10 interpreter is not installed")
    packages = [  # the distribution's own dependencies, and what the tests use
        "pydantic",
        "pyyaml",
        "packaging",
        "click",
        "rich",
        "kubernetes",
        "kubernetes_asyncio",
        "cel-python",
        "jsonpatch",
        "pytest",
        "pytest-asyncio",
        "hypothesis",
        "cryptography",  # the report tests' TLS servers make their certificates with it
    ]
    command = [uv, "run", "--python", python310, "--no-project"]
    for package in packages:
        command += ["--with", package]
    command += [
        "python",
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        *ONE_PROCESS,
        "tests/core",
    ]
    env = {**os.environ, "KF_TRAINER_COMPAT_CHILD": "1", "PYTHONPATH": str(ROOT / "src")}
    env.pop("VIRTUAL_ENV", None)
    proc = subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    tail = (proc.stdout + proc.stderr)[-4000:]
    assert proc.returncode == 0, tail
    assert " passed" in proc.stdout
