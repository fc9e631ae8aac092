"""The container backend against a real Docker (or Podman) engine.

Everything here skips, saying why, where no engine answers or no test image exists.
CI (``.ci/run``) starts ``dockerd`` and builds the image with ``.ci/container-setup.sh``
and names it in ``KF_TRAINER_TEST_IMAGE``; by hand::

    eval "$(.ci/container-setup.sh start | grep KF_TRAINER_TEST_IMAGE)"; export KF_TRAINER_TEST_IMAGE

Each test gets a state directory of its own; afterwards every job is deleted and no
container or volume labelled with one of its jobs may remain.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kf_trainer_core import informer
from kf_trainer_core.client import TrainerClient
from kf_trainer_core.config import ContainerConfig

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

IMAGE_ENV = "KF_TRAINER_TEST_IMAGE"
IMAGE_REPO = "kf-trainer-test"
SETUP_HINT = "start one with `.ci/container-setup.sh start` (root, Debian)"


@pytest.fixture(autouse=True)
def _short_linger(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(informer._Informer, "linger", 0.2)


@pytest.fixture(scope="session")
def engine() -> Iterator[Any]:
    """The Docker SDK client of the engine the backend finds (skips without one)."""
    from kf_trainer_core.container.engine import EngineUnavailable, connect

    try:
        found = connect()
    except EngineUnavailable as exc:
        pytest.skip(f"no container engine: {exc} ({SETUP_HINT})")
    yield found.client
    found.client.close()


@pytest.fixture(scope="session")
def image(engine: Any) -> str:
    """The test image: ``$KF_TRAINER_TEST_IMAGE``, else the newest ``kf-trainer-test``."""
    import docker.errors

    named = os.environ.get(IMAGE_ENV)
    if named:
        try:
            engine.images.get(named)
        except docker.errors.ImageNotFound:
            pytest.skip(f"{IMAGE_ENV}={named} is not in the engine ({SETUP_HINT})")
        return named
    found = sorted(
        engine.images.list(name=IMAGE_REPO), key=lambda i: str(i.attrs.get("Created", ""))
    )
    if not found:
        pytest.skip(f"no {IMAGE_REPO} image in the engine ({SETUP_HINT})")
    tags = [t for t in found[-1].tags if t.startswith(IMAGE_REPO + ":")]
    return tags[0] if tags else str(found[-1].id)


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


def job_containers(engine: Any, uid: str) -> list[Any]:
    from kf_trainer_core.container import JOB_UID_LABEL

    return list(
        engine.containers.list(all=True, sparse=True, filters={"label": f"{JOB_UID_LABEL}={uid}"})
    )


def clean(state_dir: Path, engine: Any) -> None:
    """Delete every job of ``state_dir``, then check nothing of them is left in the
    engine."""
    if not (state_dir / "state.db").exists():
        return
    from kf_trainer_core.local.api import LocalApi
    from kf_trainer_core.local.store import TRAINJOBS

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
    for uid in uids:
        left = job_containers(engine, uid)
        assert not left, f"containers of job {uid} outlived it: {[c.name for c in left]}"
