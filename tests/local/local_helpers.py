"""Helpers of the local backend's tests (a module of its own: ``conftest`` is not
importable by name when several test folders have one)."""

from __future__ import annotations

import time
from pathlib import Path

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
