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
from kueue_support import Queues

from kf_trainer_core.client import AsyncTrainerClient, TrainerClient
from kf_trainer_core.testing.pytest_plugin import KUEUE_XDIST_GROUP

SERVERS = ["testbed", pytest.param("real", marks=pytest.mark.control_plane)]
#: The servers of the Kueue tests: the test bed with its simulated Kueue, the real
#: control plane with the real Kueue (an instance of its own: ``kueue_control_plane``).
#: Its tests run on the worker of that control plane's group under pytest-xdist (the
#: plugin groups the tests that name a control plane's fixture; these pick it at run
#: time).
KUEUE_SERVERS = [
    "testbed",
    pytest.param(
        "kueue", marks=[pytest.mark.control_plane, pytest.mark.xdist_group(KUEUE_XDIST_GROUP)]
    ),
]


@pytest.fixture(params=SERVERS)
def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cluster]:
    yield from make_cluster(request, request.param, tmp_path)


@pytest.fixture(params=KUEUE_SERVERS)
def kueue_cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cluster]:
    """A namespace on a server with Kueue: the test bed (its simulated Kueue installed by
    ``queues``) or the real control plane with the real Kueue. Tests that use it take
    ``cluster`` from it (see ``test_kueue_queues.py``)."""
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


@pytest.fixture
def queues(cluster: Cluster) -> Iterator[Queues]:
    """Kueue on ``cluster``: the real Kueue (skipped where none runs) or the simulated
    one, with the test's queues made through it (``kueue_support.Queues``)."""
    made = Queues(cluster)
    try:
        yield made
    finally:
        made.close()
