"""Fixtures of the conformance tests: ``cluster`` runs each test once on the test bed and
once on the real control plane (marked ``control_plane``); helpers live in
``conformance_support``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from conformance_support import FAST, Cluster
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from kf_trainer_core.client import AsyncTrainerClient, TrainerClient
from kf_trainer_core.testing.control_plane import ControlPlane
from kf_trainer_core.testing.server import KubeTestServer

SERVERS = ["testbed", pytest.param("real", marks=pytest.mark.control_plane)]


@pytest.fixture(params=SERVERS)
def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cluster]:
    if request.param == "testbed":
        kube: KubeTestServer = request.getfixturevalue("kube")
        namespace = "conformance"
        k8s.CoreV1Api(
            k8s_config.new_client_from_config(
                config_file=str(kube.kubeconfig(tmp_path / "admin", namespace="default"))
            )
        ).create_namespace({"metadata": {"name": namespace}})
        path = kube.kubeconfig(tmp_path / "kubeconfig", namespace=namespace)
        yield Cluster("testbed", namespace, path, kube, None)
        return
    cp: ControlPlane = request.getfixturevalue("control_plane")
    namespace = cp.new_namespace("conf")
    try:
        yield Cluster("real", namespace, cp.kubeconfig_for(namespace, tmp_path / "kc"), None, cp)
    finally:
        cp.delete_namespace(namespace)


@pytest.fixture
def real_cluster(cluster: Cluster) -> Cluster:
    """``cluster`` on the real control plane with its controllers; the test bed run skips
    (for the real controllers' own semantics)."""
    if not cluster.real:
        pytest.skip("the real controllers' semantics")
    assert cluster.cp is not None
    cluster.cp.require_controllers()
    return cluster


@pytest.fixture
def controllers(cluster: Cluster) -> Cluster:
    """``cluster``, skipped on the API-only tier (the test needs controllers)."""
    if cluster.cp is not None:
        cluster.cp.require_controllers()
    return cluster


@pytest.fixture
def calls() -> list[Any]:
    return []


@pytest.fixture
def client(cluster: Cluster, calls: list[Any]) -> Iterator[TrainerClient]:
    with TrainerClient(cluster.config(), retry=FAST, request_hook=calls.append) as c:
        yield c


@pytest_asyncio.fixture
async def aclient(cluster: Cluster, calls: list[Any]) -> AsyncIterator[AsyncTrainerClient]:
    async with AsyncTrainerClient(cluster.config(), retry=FAST, request_hook=calls.append) as c:
        yield c
