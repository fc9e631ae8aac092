"""Fixtures for the test-server's own tests.

Most tests here use ``bare_kube``: a second session server without the simulated
controller, so that watch and accounting assertions see only what the test did. The
plugin's ``kube``/``kubeconfig_path`` fixtures are exercised too.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import kubernetes
import kubernetes_asyncio
import pytest
import pytest_asyncio

from kf_trainer_core.testing.pytest_plugin import fresh_server
from kf_trainer_core.testing.server import KubeTestServer

# The plugin is loaded by the root conftest (pytest_plugins belongs there).

GROUP, VERSION = "trainer.kubeflow.org", "v1alpha1"


@pytest.fixture(scope="session")
def bare_server() -> Iterator[KubeTestServer]:
    server = KubeTestServer(default_scenario="success")  # as the suite's ini says
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def bare_kube(bare_server: KubeTestServer) -> KubeTestServer:
    return fresh_server(bare_server)


@pytest.fixture
def bare_config(bare_kube: KubeTestServer, tmp_path: Path) -> Path:
    return bare_kube.kubeconfig(tmp_path / "kubeconfig")


@pytest.fixture
def api(bare_config: Path) -> Iterator[Any]:
    """A sync ``kubernetes`` ApiClient for ``bare_kube``."""
    client = kubernetes.config.new_client_from_config(config_file=str(bare_config))
    try:
        yield client
    finally:
        client.close()


@pytest_asyncio.fixture(loop_scope="function")
async def aapi(bare_config: Path) -> AsyncIterator[Any]:
    """A ``kubernetes_asyncio`` ApiClient for ``bare_kube``."""
    client = await kubernetes_asyncio.config.new_client_from_config(config_file=str(bare_config))
    try:
        yield client
    finally:
        await client.close()


def _trainjob(
    name: str, *, num_nodes: Any = 1, runtime: str = "torch-distributed", **spec: Any
) -> dict[str, Any]:
    """A minimal TrainJob body."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TrainJob",
        "metadata": {"name": name},
        "spec": {"runtimeRef": {"name": runtime}, "trainer": {"numNodes": num_nodes}, **spec},
    }


def _pod(
    name: str,
    *,
    containers: tuple[str, ...] = ("node",),
    labels: dict[str, str] | None = None,
    owner: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A minimal Pod body."""
    meta: dict[str, Any] = {"name": name, "labels": labels or {}}
    if owner is not None:
        meta["ownerReferences"] = [owner]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"containers": [{"name": c, "image": "busybox"} for c in containers]},
    }


def _wait_until(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    """Poll until ``predicate()``; fail the test after ``timeout`` seconds."""
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > end:
            raise AssertionError("condition not met in time")
        time.sleep(0.005)


@pytest.fixture(scope="session")
def make_trainjob() -> Callable[..., dict[str, Any]]:
    return _trainjob


@pytest.fixture(scope="session")
def make_pod() -> Callable[..., dict[str, Any]]:
    return _pod


@pytest.fixture(scope="session")
def wait_until() -> Callable[..., None]:
    return _wait_until
