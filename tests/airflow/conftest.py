"""One Airflow home for the whole test session, set up before anything imports Airflow.

Airflow reads its configuration when ``airflow`` is first imported, so the environment is
set here, at import time of this conftest (pytest imports it before the test modules of
this folder). The DAG folder is ``tests/airflow/dags``: ``dag.test()`` only runs DAGs
whose file lies in the configured DAG folder. The metadata database (SQLite) is created
once per session, in-process, by the ``airflow_db`` fixture.

DAG tests reach the Kubernetes-API test server through the connection ``kf_test``
(``AIRFLOW_CONN_KF_TEST``), which the ``kf_conn`` fixture points at the test's
kubeconfig.
"""

from __future__ import annotations

import atexit
import base64
import os
import secrets
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# The helpers live in a plain module: test modules import it, never this conftest.
from dagtest import CONN_ENV, connection_json

HERE = Path(__file__).resolve().parent
DAGS = HERE / "dags"
HOME = Path(tempfile.mkdtemp(prefix="kf-airflow-home-"))

AIRFLOW_ENV = {
    "AIRFLOW_HOME": str(HOME),
    "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
    "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{HOME}/airflow.db",
    "AIRFLOW__CORE__FERNET_KEY": base64.urlsafe_b64encode(secrets.token_bytes(32)).decode(),
    "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(32),
    "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(HOME / "logs"),
    # Parsing a DAG file must not take the test down with it.
    "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "120",
}
if "airflow" in sys.modules:  # pragma: no cover - a guard for future conftests
    raise RuntimeError(
        "airflow was imported before tests/airflow/conftest.py could set AIRFLOW_HOME: it "
        "would use ~/airflow. Run tests/airflow first or in a pytest process of its own."
    )
os.environ.update(AIRFLOW_ENV)
os.environ.pop("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", None)
# The DAG files import helpers that live beside them.
sys.path.insert(0, str(DAGS))


@atexit.register
def _remove_home() -> None:
    if not os.environ.get("KF_AIRFLOW_KEEP_HOME"):  # set it to look at logs afterwards
        shutil.rmtree(HOME, ignore_errors=True)


@pytest.fixture(autouse=True)
def _short_linger(monkeypatch: pytest.MonkeyPatch) -> None:
    # Each test has a kubeconfig (so watches) of its own: a finished test's watches stop
    # at their next wake-up rather than lingering for the next task of a DAG.
    from kf_trainer_core.programs import informer

    monkeypatch.setattr(informer.Informer, "linger", 0.2)


@pytest.fixture(scope="session")
def airflow_db() -> Path:
    """The session's metadata database, created once (what ``airflow db migrate`` does
    for an empty database)."""
    from airflow.utils.db import initdb

    initdb()
    return HOME


@pytest.fixture
def kf_conn(
    kubeconfig_path: Path, monkeypatch: pytest.MonkeyPatch, _informers_stop_first: None
) -> Path:
    """Connection ``kf_test`` to the (reset) test server, through this test's own
    kubeconfig: each test gets its own watches."""
    monkeypatch.setenv(CONN_ENV, connection_json(kubeconfig_path=str(kubeconfig_path)))
    return kubeconfig_path


@pytest.fixture(scope="session")
def _informers_stop_first(kube_server: Any) -> Iterator[None]:
    """Stop the session's shared watches before the test server goes away, rather than
    letting them retry against a closed port until the interpreter exits."""
    yield
    from kf_trainer_core.programs.informer import shutdown_informers

    shutdown_informers()
