"""Pytest fixtures for the Kubernetes-API test server.

Enable them from a ``conftest.py``::

    pytest_plugins = ["kf_trainer_core.testing.pytest_plugin"]

``kube_server`` starts one server per test session (with the simulated Trainer
controller when it is available); ``kube`` resets it before each test and yields it;
``kubeconfig_path`` is a kubeconfig for it with namespace ``default``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kf_trainer_core.testing.server import KubeTestServer

__all__ = ["kube", "kube_server", "kubeconfig_path"]


@pytest.fixture(scope="session")
def kube_server() -> Iterator[KubeTestServer]:
    """One running :class:`KubeTestServer` for the whole session (controller started
    when :mod:`kf_trainer_core.testing.controller` exists)."""
    server = KubeTestServer()
    server.start(controller=True)
    try:
        yield server
    finally:
        # Shared watches outlive their waits by design: stop them while the server
        # still answers, or they retry against a closed port until the process exits.
        from kf_trainer_core.informer import shutdown_informers

        shutdown_informers()
        server.stop()


@pytest.fixture
def kube(kube_server: KubeTestServer) -> KubeTestServer:
    """The session's server, reset to a fresh state (seeded namespaces and runtimes)."""
    kube_server.reset()
    return kube_server


@pytest.fixture
def kubeconfig_path(kube: KubeTestServer, tmp_path: Path) -> Path:
    """A kubeconfig for ``kube`` (context ``kf-test``, namespace ``default``)."""
    return kube.kubeconfig(tmp_path / "kubeconfig", namespace="default")
