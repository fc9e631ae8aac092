"""The examples end to end: the Airflow DAG with ``dag.test()``, the Prefect flow on an
ephemeral Prefect server, the KFP pipeline with ``kfp.local``; each on the local backend
and on the Kubernetes-API test server.

Airflow and Prefect read their settings when first imported, so the environment is set
here, at import. When ``tests/airflow`` or ``tests/prefect`` set up a private home for
the session already (a full run), that home is reused; otherwise these tests make their
own. Prefect's environment and its session server (``prefect_server``) come from
``tests/conftest.py``. The example DAG is served to ``dag.test()`` from ``examples/`` as a DAG bundle of
its own (``examples_dags``), whatever the session's DAG folder is.
"""

from __future__ import annotations

import atexit
import base64
import json
import os
import secrets
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
from examples_support import EXAMPLES

# The examples import their neighbours (retraining_ml, retraining_jobs) by name.
sys.path.insert(0, str(EXAMPLES))

_AIRFLOW_HOME_PREFIX = "kf-airflow-home-"


def _private(env: str, prefix: str) -> bool:
    return Path(os.environ.get(env, "")).name.startswith(prefix)


if "airflow" not in sys.modules and not _private("AIRFLOW_HOME", _AIRFLOW_HOME_PREFIX):
    _home = Path(tempfile.mkdtemp(prefix=f"{_AIRFLOW_HOME_PREFIX}examples-"))
    atexit.register(shutil.rmtree, _home, ignore_errors=True)
    (_home / "dags").mkdir()
    os.environ.update(
        {
            "AIRFLOW_HOME": str(_home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(_home / "dags"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{_home}/airflow.db",
            "AIRFLOW__CORE__FERNET_KEY": base64.urlsafe_b64encode(secrets.token_bytes(32)).decode(),
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(32),
            "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(_home / "logs"),
            "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "120",
        }
    )
    os.environ.pop("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", None)


@pytest.fixture(autouse=True)
def _short_linger(monkeypatch: pytest.MonkeyPatch) -> None:
    # Shared watches of a finished test stop at their next bookmark, not 30 s later.
    from kf_trainer_core.programs import informer

    monkeypatch.setattr(informer.Informer, "linger", 0.2)


@pytest.fixture
def token(kube: object) -> str:
    """A bearer token the test server demands from now on; one per test, so that each
    test's clients get watches of their own."""
    value = f"kf-example-{secrets.token_hex(12)}"
    kube.require_token({value})  # type: ignore[attr-defined]
    return value


@pytest.fixture(scope="session")
def examples_airflow_db() -> Path:
    """The session's Airflow metadata database, created if no test made it yet."""
    home = Path(os.environ["AIRFLOW_HOME"])
    if not home.name.startswith(_AIRFLOW_HOME_PREFIX):
        pytest.skip(f"Airflow was configured before these tests (AIRFLOW_HOME={home})")
    from airflow.utils.db import initdb

    initdb()
    return home


@pytest.fixture
def examples_bundle(examples_airflow_db: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``examples/`` as a DAG bundle beside the session's DAG folder (bundles are read
    from the configuration each time ``dag.test()`` runs)."""
    bundles = [
        {
            "name": "dags-folder",
            "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle",
            "kwargs": {},
        },
        {
            "name": "examples_dags",
            "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle",
            "kwargs": {"path": str(EXAMPLES)},
        },
    ]
    monkeypatch.setenv("AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST", json.dumps(bundles))
    return EXAMPLES
