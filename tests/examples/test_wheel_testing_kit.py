"""The testing kit after ``pip install 'kf-trainer-suite[testing]'`` (issue 26, item 1):
the wheel ``uv build`` makes, installed with its ``testing`` extra into a fresh virtual
environment in a temporary directory — no clone and no ``shared/upstream`` folder above
it, no ``$KF_TRAINER_UPSTREAM`` — runs every Python example of docs/testing.md, at the
built-in level of fidelity."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from examples_support import DOCS, ROOT

FRAGMENT_TEST = """
from kf_trainer_core.client import TrainerClient
from kf_trainer_core.config import KubernetesConfig
from kf_trainer_core.spec import CustomTrainer, TrainJobSpec


def train():
    return 1


def test_fragment(kube, kubeconfig_path):
    assert kube.fidelity == "builtin", kube.fidelity
    client = TrainerClient(KubernetesConfig(kubeconfig=str(kubeconfig_path)))
    name = client.submit(TrainJobSpec(trainer=CustomTrainer(train))).job.name
{body}
"""


def _install(tmp_path: Path) -> Path:
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
    venv = tmp_path / "venv"
    subprocess.run(
        [uv, "venv", "-q", str(venv), "--python", sys.executable], check=True, timeout=120
    )
    # The versions this project's lock tested, from uv's cache when it holds them all.
    pins = tmp_path / "constraints.txt"
    exported = subprocess.run(
        [uv, "export", "--frozen", "--no-hashes", "--all-extras", "--no-emit-project", "-q"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    pins.write_text(exported.stdout)
    env = {**os.environ, "VIRTUAL_ENV": str(venv)}
    # Only the extra: it must bring pytest itself (the kit is a pytest plugin).
    install = [uv, "pip", "install", "-q", "-c", str(pins), f"{wheel}[testing]"]
    if subprocess.run([*install, "--offline"], env=env, check=False, timeout=300).returncode:
        subprocess.run(install, env=env, check=True, timeout=600)
    return venv / "bin" / "python"


@pytest.mark.slow
def test_every_testing_page_example_runs_from_the_installed_wheel(tmp_path: Path) -> None:
    python = _install(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    assert not any((p / "shared" / "upstream").exists() for p in (work, *work.parents))
    conftest, test, *fragments = re.findall(
        r"```python\n(.*?)```", (DOCS / "testing.md").read_text(), re.DOTALL
    )
    (work / "conftest.py").write_text(conftest)
    (work / "test_training.py").write_text(test)
    for i, fragment in enumerate(fragments):
        body = textwrap.indent(fragment, "    ")
        (work / f"test_fragment_{i}.py").write_text(FRAGMENT_TEST.format(body=body))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KF_TRAINER_", "PYTHON"))}
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")  # derive the schemas from scratch
    done = subprocess.run(
        [
            str(python),
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-W",
            "error::RuntimeWarning",
        ],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert f"{1 + len(fragments)} passed" in done.stdout  # the page's test and each fragment
    # The installed copy ran, not the clone's.
    where = subprocess.run(
        [str(python), "-c", "import kf_trainer_core; print(kf_trainer_core.__file__)"],
        cwd=work,
        capture_output=True,
        text=True,
        check=True,
    )
    assert where.stdout.startswith(str(tmp_path / "venv"))
