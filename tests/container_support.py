"""Finding a container engine and the test image, for the container backend's tests in
every folder (``tests/container``, the adapters', the examples'). Everything skips,
saying why, where no engine answers or no test image exists.

CI (``.ci/run``) starts ``dockerd`` and builds the image with ``.ci/container-setup.sh``,
which names it in ``KF_TRAINER_TEST_IMAGE``.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

IMAGE_ENV = "KF_TRAINER_TEST_IMAGE"
IMAGE_REPO = "kf-trainer-test"
SETUP_HINT = "start one with `.ci/container-setup.sh start` (root, Debian)"

_engine: Any = None


def engine_or_skip() -> Any:
    """The Docker SDK client of the engine the backend finds (one per session)."""
    global _engine
    if _engine is None:
        from kf_trainer_core.backends.local.container.engine import EngineUnavailable, connect

        try:
            _engine = connect().client
        except EngineUnavailable as exc:
            pytest.skip(f"no container engine: {exc} ({SETUP_HINT})")
    return _engine


def image_or_skip(engine: Any) -> str:
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


def job_containers(engine: Any, uid: str) -> list[Any]:
    """The containers (running or not) labelled with job ``uid``."""
    from kf_trainer_core.backends.local.container import JOB_UID_LABEL

    # sparse: no inspect per container, which would race with their removal.
    return list(
        engine.containers.list(all=True, sparse=True, filters={"label": f"{JOB_UID_LABEL}={uid}"})
    )


def assert_nothing_left(engine: Any, uids: list[str]) -> None:
    for uid in uids:
        left = job_containers(engine, uid)
        assert not left, f"containers of job {uid} outlived it: {[c.name for c in left]}"
