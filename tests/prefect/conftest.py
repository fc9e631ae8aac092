"""Prefect tests: real flows on one ephemeral Prefect server per test session, with
TrainJobs on the Kubernetes-API test server (and the local backend when it exists).

The environment is set here, at import, before Prefect reads its settings: a private
``PREFECT_HOME``, no analytics, and a server start-up timeout that two busy cores meet
(the 20 s default does not). The server costs ~20 s once; tests that need it ask for
``prefect_server``.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

_HOME = tempfile.mkdtemp(prefix="kf-prefect-home-")
atexit.register(shutil.rmtree, _HOME, ignore_errors=True)
os.environ["PREFECT_HOME"] = _HOME
os.environ["PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"] = "120"
os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
os.environ["DO_NOT_TRACK"] = "1"
os.environ.pop("PREFECT_API_URL", None)
os.environ.pop("PREFECT_API_KEY", None)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "core"))

from kf_trainer_core.client import TrainerClient  # noqa: E402
from kf_trainer_prefect import KubeflowTrainerCredentials  # noqa: E402

STARTUP_TIMEOUT = 120


@pytest.fixture(scope="session")
def prefect_server() -> Iterator[str]:
    """One ephemeral Prefect server (temporary database) for the session; yields its
    API URL."""
    from prefect.settings import (
        PREFECT_API_URL,
        PREFECT_HOME,
        PREFECT_SERVER_ANALYTICS_ENABLED,
        temporary_settings,
    )
    from prefect.testing.utilities import prefect_test_harness

    # Also as settings, in case Prefect was imported before this file set the variables.
    with (
        temporary_settings(updates={PREFECT_HOME: _HOME, PREFECT_SERVER_ANALYTICS_ENABLED: False}),
        prefect_test_harness(server_startup_timeout=STARTUP_TIMEOUT),
    ):
        yield str(PREFECT_API_URL.value())


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
