"""Helpers of the local backend's tests (a module of its own: ``conftest`` is not
importable by name when several test folders have one)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def process_alive(pid: int) -> bool:
    """A process that exists and is not a zombie (psutil if installed, else /proc)."""
    try:
        import psutil
    except ImportError:
        try:
            stat = Path(f"/proc/{pid}/stat").read_bytes()
        except OSError:
            return False
        return stat.rpartition(b")")[2].split()[0] != b"Z"
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


def wait_for(predicate: object, timeout: float = 20.0, what: str = "condition") -> None:
    assert callable(predicate)
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


#: A ``uv`` that builds a virtualenv for ten minutes, writing its pid first.
FAKE_UV = """#!/bin/sh
echo $$ > "$KF_TEST_UV_PID.tmp" && mv "$KF_TEST_UV_PID.tmp" "$KF_TEST_UV_PID"
exec sleep 600
"""


def slow_venv_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Put the slow ``uv`` first on ``PATH`` (the supervisor starts with this process's
    environment); return the file where it writes its pid."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "uv").write_text(FAKE_UV)
    (bin_dir / "uv").chmod(0o755)
    pid_file = tmp_path / "uv.pid"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("KF_TEST_UV_PID", str(pid_file))
    return pid_file
