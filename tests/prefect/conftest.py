"""Prefect tests: real flows on the session's ephemeral Prefect server
(``prefect_server``, in ``tests/conftest.py``, which also sets Prefect's environment),
with TrainJobs on the Kubernetes-API test server and the local backend.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "core"))

from kf_trainer_core.client import TrainerClient
from kf_trainer_prefect import KubeflowTrainerCredentials


@pytest.fixture
def creds(kubeconfig_path: Path) -> KubeflowTrainerCredentials:
    # A kubeconfig per test keeps the shared watches (one per config) apart.
    return KubeflowTrainerCredentials(
        kubeconfig=str(kubeconfig_path), watch_timeout=30, poll_interval=0.1
    )


@pytest.fixture
def k8s(creds: KubeflowTrainerCredentials) -> Iterator[TrainerClient]:
    """A client for looking at the jobs the flows made."""
    with creds.get_client() as client:
        yield client


@pytest.fixture(scope="session", autouse=True)
def _client_libraries_imported() -> None:
    """Both faces of the tasks run on the async client: import its Kubernetes library
    once, up front (the ``k8s`` fixture does the same for the sync one). Its first import
    takes seconds on a busy machine, and the tests' short task timeouts must time the
    task, not that import."""
    import kubernetes_asyncio.client  # noqa: F401
