"""Fixtures of the conformance tests: ``cluster`` runs each test once on the test bed and
once on the real control plane (marked ``control_plane``); helpers live in
``conformance_support``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from conformance_support import FAST, Cluster, make_cluster

from kf_trainer_core.client import AsyncTrainerClient, TrainerClient

SERVERS = ["testbed", pytest.param("real", marks=pytest.mark.control_plane)]


@pytest.fixture(params=SERVERS)
def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cluster]:
    yield from make_cluster(request, request.param, tmp_path)


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
