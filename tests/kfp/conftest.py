"""KFP components against the Kubernetes-API test server (and the local backend):
``kfp.local.SubprocessRunner(use_venv=False)`` runs each task in a subprocess of this
interpreter, which reaches the test server over HTTP with a kubeconfig."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kf_trainer_core.client import TrainerClient
from kf_trainer_core.testing.server import KubeTestServer

sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture
def server(kube: KubeTestServer) -> KubeTestServer:
    # Idle watches end their blocking reads at each bookmark; component processes shut
    # their watches down at exit, which waits for that read (see the report on core
    # informers), so frequent bookmarks keep each task's exit short.
    kube.bookmark_interval = 0.5
    return kube


@pytest.fixture
def backend(server: KubeTestServer, kubeconfig_path: Path) -> dict[str, Any]:
    """``backend_config`` for the components: the test server's kubeconfig."""
    return {"kubeconfig": str(kubeconfig_path), "watch_timeout": 30, "poll_interval": 0.1}


@pytest.fixture
def client(backend: dict[str, Any]) -> Iterator[TrainerClient]:
    with TrainerClient(backend) as c:
        yield c


@pytest.fixture
def local_kfp(tmp_path: Path) -> Path:
    """A ``kfp.local`` session running tasks with this interpreter; its pipeline root."""
    from kfp import local

    root = tmp_path / "kfp-root"
    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(root))
    return root
