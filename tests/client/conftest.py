"""Clients pointed at the Kubernetes-API test server."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from kf_trainer_core.client import AsyncTrainerClient, TrainerClient
from kf_trainer_core.config import KubernetesConfig
from kf_trainer_core.k8s.retry import RetryPolicy
from kf_trainer_core.testing.server import KubeTestServer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "core"))

#: Fast retries: the test server recovers in milliseconds.
FAST = RetryPolicy(attempts=6, base=0.02, cap=0.2)


@pytest.fixture
def k8s_config(kubeconfig_path: Path) -> KubernetesConfig:
    # A kubeconfig per test keeps informers (shared per config) from crossing tests.
    return KubernetesConfig(kubeconfig=str(kubeconfig_path), watch_timeout=30, poll_interval=0.1)


@pytest.fixture
def calls() -> list[Any]:
    return []


@pytest.fixture
def client(k8s_config: KubernetesConfig, calls: list[Any]) -> Iterator[TrainerClient]:
    with TrainerClient(k8s_config, retry=FAST, request_hook=calls.append) as c:
        yield c


@pytest_asyncio.fixture
async def aclient(
    k8s_config: KubernetesConfig, calls: list[Any]
) -> AsyncIterator[AsyncTrainerClient]:
    async with AsyncTrainerClient(k8s_config, retry=FAST, request_hook=calls.append) as c:
        yield c


@pytest.fixture
def server(kube: KubeTestServer) -> KubeTestServer:
    return kube
