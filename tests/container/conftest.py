"""The container backend against a real Docker (or Podman) engine.

Everything here skips, saying why, where no engine answers or no test image exists
(see ``tests/container_support.py``); by hand: ``.ci/container-setup.sh start``.

Each test gets a state directory of its own; afterwards every job is deleted and no
container or volume labelled with one of its jobs may remain.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from container_support import assert_nothing_left, engine_or_skip, image_or_skip
from kf_trainer_core.client import TrainerClient
from kf_trainer_core.config import ContainerConfig
from kf_trainer_core.programs import informer

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


@pytest.fixture(autouse=True)
def _short_linger(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(informer.Informer, "linger", 0.2)


@pytest.fixture(scope="session")
def engine() -> Any:
    """The Docker SDK client of the engine the backend finds (skips without one)."""
    return engine_or_skip()


@pytest.fixture(scope="session")
def image(engine: Any) -> str:
    return image_or_skip(engine)


@pytest.fixture(scope="session")
def image_has_torch(engine: Any, image: str) -> bool:
    out = engine.containers.run(
        image,
        ["sh", "-c", "command -v torchrun >/dev/null && echo yes || echo no"],
        remove=True,
        network_mode="host",
    )
    return bool(out.strip() == b"yes")


@pytest.fixture
def state_dir(tmp_path: Path, engine: Any) -> Iterator[Path]:
    path = tmp_path / "state"
    yield path
    clean(path, engine)


@pytest.fixture
def config(state_dir: Path, image: str) -> ContainerConfig:
    return ContainerConfig(state_dir=str(state_dir), image=image, pull_policy="Never")


@pytest.fixture
def client(config: ContainerConfig) -> Iterator[TrainerClient]:
    with TrainerClient(config) as c:
        yield c


def clean(state_dir: Path, engine: Any) -> None:
    """Delete every job of ``state_dir``, then check nothing of them is left in the
    engine."""
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
    assert_nothing_left(engine, uids)
