"""Clients on the local backend, each test with a state directory of its own; every job
is deleted afterwards and no process of it may be left."""

from __future__ import annotations

import contextlib
import fcntl
import os
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio

from kf_trainer_core.backends.local.procs import processes_of_job
from kf_trainer_core.client import AsyncTrainerClient, TrainerClient
from kf_trainer_core.config import LocalConfig
from kf_trainer_core.programs import informer

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


@pytest.fixture(autouse=True)
def _short_linger(monkeypatch: pytest.MonkeyPatch) -> None:
    # Informers of a finished test stop at their next bookmark instead of after 30 s.
    monkeypatch.setattr(informer.Informer, "linger", 0.2)


@pytest.fixture
def state_dir(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "state"
    yield path
    _clean(path)


@pytest.fixture
def config(state_dir: Path) -> LocalConfig:
    return LocalConfig(state_dir=str(state_dir))


@pytest.fixture
def client(config: LocalConfig) -> Iterator[TrainerClient]:
    with TrainerClient(config) as c:
        yield c


@pytest_asyncio.fixture
async def aclient(config: LocalConfig) -> AsyncIterator[AsyncTrainerClient]:
    async with AsyncTrainerClient(config) as c:
        yield c


def _clean(state_dir: Path) -> None:
    """Delete every job (waiting for its processes to stop), then check that no
    supervisor holds a lock and no process of any job is alive."""
    if not (state_dir / "state.db").exists():
        return
    from kf_trainer_core.backends.local.api import LocalApi
    from kf_trainer_core.backends.local.store import TRAINJOBS

    api = LocalApi(state_dir)
    try:
        jobs, _ = api.store.select(TRAINJOBS)
        uids = [str(j["metadata"]["uid"]) for j in jobs]
        for job in jobs:
            meta = job["metadata"]
            with contextlib.suppress(Exception):
                api.delete_trainjob(meta["namespace"], meta["name"], "Background")
    finally:
        api.close()
    deadline = time.monotonic() + 10
    for lock in sorted((state_dir / "locks").glob("*.lock")):
        while not _free(lock):
            assert time.monotonic() < deadline, f"a supervisor still holds {lock}"
            time.sleep(0.05)
    for uid in uids:
        while processes_of_job(uid):
            assert time.monotonic() < deadline, f"processes of job {uid} outlived it"
            time.sleep(0.05)


def _free(lock: Path) -> bool:
    try:
        fd = os.open(lock, os.O_RDWR)
    except FileNotFoundError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True
