"""``kf-trainer`` tests: the command against the Kubernetes-API test server and the
local backend."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kf_trainer_core.client import TrainerClient
from kf_trainer_core.config import KubernetesConfig
from kf_trainer_core.k8s.retry import RetryPolicy

sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture(autouse=True)
def _short_linger(monkeypatch: pytest.MonkeyPatch) -> None:
    # Shared watches of a command run in this process stop soon after it, not 30 s later.
    from kf_trainer_core.programs import informer

    monkeypatch.setattr(informer.Informer, "linger", 0.2)


@pytest.fixture
def client(kubeconfig_path: Path) -> Iterator[TrainerClient]:
    """A client of the test server, to set up jobs the command then looks at."""
    config = KubernetesConfig(kubeconfig=str(kubeconfig_path), watch_timeout=30, poll_interval=0.1)
    with TrainerClient(config, retry=RetryPolicy(attempts=6, base=0.02, cap=0.2)) as c:
        yield c


@pytest.fixture
def where(kubeconfig_path: Path) -> list[str]:
    """The flags that point the command at the test server."""
    return ["--kubeconfig", str(kubeconfig_path)]
