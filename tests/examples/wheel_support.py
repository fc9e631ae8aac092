"""The built wheel in fresh virtual environments, as a user installs it: ``uv build``
makes the wheel once a session, and each set of extras gets one environment, resolved
from PyPI as ``pip install 'kf-trainer-suite[extras]'`` resolves it (uv's cache makes a
second session fast), in a temporary folder with no clone above it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: What decides whether an orchestrator works: its version and the libraries its
#: server, models and clients are built on (the broken Airflow 3.2.2 set differed from
#: a working one in FastAPI only).
KEY_PACKAGES = {
    "airflow": ("apache-airflow", "apache-airflow-core", "fastapi", "starlette", "pydantic"),
    "prefect": ("prefect", "fastapi", "starlette", "pydantic"),
    "kfp": ("kfp", "kfp-kubernetes", "kubernetes", "protobuf"),
}


def uv() -> str:
    found = shutil.which("uv")
    if found is None:
        pytest.skip("uv is not on PATH (CI installs it)")
    return found


def clean_env(**extra: str) -> dict[str, str]:
    """The environment of a user's process: none of this session's settings (the
    suite's, Airflow's, Prefect's, a virtual environment's)."""
    drop = ("KF_TRAINER_", "AIRFLOW", "PREFECT_", "PYTHON", "VIRTUAL_ENV", "UV_PROJECT")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env.pop("UV", None)
    env.update(extra)
    return env


def build_wheel(out: Path) -> Path:
    subprocess.run(
        [uv(), "build", "--wheel", "--out-dir", str(out)],
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = out.glob("kf_trainer_suite-*-py3-none-any.whl")
    return wheel


@dataclass
class Env:
    """One fresh environment: the wheel installed with ``extras``."""

    extras: str
    root: Path
    versions: dict[str, str] = field(default_factory=dict)

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    def run(
        self, *args: str, cwd: Path, timeout: float = 300, **env: str
    ) -> subprocess.CompletedProcess[str]:
        """``python ARGS`` in the environment, from ``cwd``, as a user's process."""
        return self.start(*args, cwd=cwd, **env).result(timeout)

    def start(self, *args: str, cwd: Path, **env: str) -> Running:
        """``python ARGS`` started in the background (its output kept in files)."""
        path = f"{self.root / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"
        out, err = (cwd.parent / f"{cwd.name}.{s}" for s in ("out", "err"))
        with out.open("w") as stdout, err.open("w") as stderr:
            proc = subprocess.Popen(
                [str(self.python), *args],
                cwd=cwd,
                env=clean_env(PATH=path, **env),
                stdout=stdout,
                stderr=stderr,
                text=True,
            )
        return Running(proc, cwd, out, err)


@dataclass
class Running:
    """A process started in the background, and where its output goes."""

    proc: subprocess.Popen[str]
    cwd: Path
    out: Path
    err: Path

    def result(self, timeout: float) -> subprocess.CompletedProcess[str]:
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        return subprocess.CompletedProcess(
            self.proc.args, self.proc.returncode, self.out.read_text(), self.err.read_text()
        )


class Envs:
    """The session's environments, made on first use (one per set of extras)."""

    def __init__(self, root: Path, wheel: Path) -> None:
        self.root = root
        self.wheel = wheel
        self._made: dict[str, Env] = {}
        self._lock = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}

    def get(self, extras: str) -> Env:
        with self._lock:
            lock = self._locks.setdefault(extras, threading.Lock())
        with lock:
            if extras not in self._made:
                self._made[extras] = self._make(extras)
            return self._made[extras]

    def _make(self, extras: str) -> Env:
        folder = self.root / (extras.replace(",", "-") or "core")
        subprocess.run(
            [uv(), "venv", "-q", str(folder), "--python", sys.executable],
            check=True,
            timeout=120,
            env=clean_env(),
        )
        target = f"{self.wheel}[{extras}]" if extras else str(self.wheel)
        done = subprocess.run(
            [uv(), "pip", "install", "-q", "--python", str(folder / "bin" / "python"), target],
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
            env=clean_env(),
        )
        assert done.returncode == 0, f"installing {target}: {done.stderr[-3000:]}"
        listed = subprocess.run(
            [uv(), "pip", "list", "--format", "json", "--python", str(folder / "bin" / "python")],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
            env=clean_env(),
        )
        versions = {p["name"].lower(): p["version"] for p in json.loads(listed.stdout)}
        return Env(extras, folder, versions)

    def made(self) -> list[Env]:
        return list(self._made.values())


def resolve(wheel: Path, extras: str) -> dict[str, str]:
    """What ``pip install 'kf-trainer-suite[extras]'`` would install today (uv's
    resolution from PyPI, for this interpreter), without installing it."""
    with tempfile.TemporaryDirectory() as tmp:
        requirement = Path(tmp) / "requirements.in"
        requirement.write_text(f"kf-trainer-suite[{extras}] @ {wheel.as_uri()}\n")
        done = subprocess.run(
            [
                uv(),
                "pip",
                "compile",
                "-q",
                "--no-header",
                "--python",
                sys.executable,
                str(requirement),
            ],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
            env=clean_env(),
        )
    assert done.returncode == 0, f"[{extras}] does not resolve: {done.stderr[-3000:]}"
    pins = {}
    for line in done.stdout.splitlines():
        if "==" in line and not line.startswith((" ", "#")):
            name, version = line.split("==", 1)
            pins[name.strip().lower()] = version.split(";")[0].strip()
    return pins


def key_of(versions: dict[str, str], orchestrator: str) -> tuple[str | None, ...]:
    return tuple(versions.get(p) for p in KEY_PACKAGES[orchestrator])
