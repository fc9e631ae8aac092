"""Run the Airflow example DAG on this machine, with nothing to set up:

    uv run --frozen python examples/airflow_retraining.py [--day N] [--shared-dir DIR]

Airflow reads its configuration when it is first imported, so the DAG file calls
:func:`configure` before it imports Airflow: a private Airflow home under
``.kf-trainer/airflow`` (SQLite metadata database, this folder as the DAG folder) and,
unless one is already defined, the connection ``kf_retraining`` on the local backend.
:func:`run` then creates the database and runs the DAG once with ``dag.test()``: the
tasks run in this process, the deferred training wait in an inline triggerer.

A real Airflow deployment needs none of this: copy ``airflow_retraining.py``,
``retraining_ml.py`` and ``retraining_jobs.py`` into its DAG folder and define the
connection ``kf_retraining``.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import secrets
import sys
from pathlib import Path
from typing import Any

#: The connection's environment variable for a connection id (Airflow's convention).
CONN_ENV = "AIRFLOW_CONN_{}"
#: What :func:`configure` set up, for :func:`run`'s summary.
_configured: dict[str, str] = {"conn_id": "kf_retraining"}


def configure(conn_id: str, dags_folder: Path, home: Path | None = None) -> Path:
    """Point Airflow at a private home (before anything imports it) and define
    ``conn_id`` on the local backend unless it is defined already."""
    if "airflow" in sys.modules:
        raise RuntimeError("configure() must run before Airflow is imported")
    _configured["conn_id"] = conn_id
    home = (home or Path(".kf-trainer/airflow")).resolve()
    home.mkdir(parents=True, exist_ok=True)
    # Deferred tasks store their trigger's arguments encrypted: keep one key per home.
    key_file = home / "fernet.key"
    if not key_file.exists():
        key_file.write_text(base64.urlsafe_b64encode(secrets.token_bytes(32)).decode())
        key_file.chmod(0o600)
    os.environ.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags_folder.resolve()),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
            "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(home / "logs"),
            "AIRFLOW__CORE__FERNET_KEY": key_file.read_text().strip(),
            # dag.test() talks to an in-process execution API, which signs its tokens.
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(32),
        }
    )
    # Where jobs run is the connection's business: a connection given in the
    # environment (a cluster) wins over this laptop default.
    os.environ.setdefault(
        CONN_ENV.format(conn_id.upper()),
        json.dumps(
            {
                "conn_type": "kubeflow_trainer",
                "extra": {"backend": "local", "state_dir": str(home / "trainjobs")},
            }
        ),
    )
    return home


def run(dag: Any, argv: list[str] | None = None) -> int:
    """Create the metadata database if needed, run ``dag`` once, say which branch the
    run took; the exit status is 0 when the run succeeded."""
    parser = argparse.ArgumentParser(description=f"Run the DAG {dag.dag_id} once, here.")
    parser.add_argument("--day", type=int, help="which day's data (default: today)")
    parser.add_argument("--shared-dir", help="where data and models go")
    args = parser.parse_args(argv)
    conf = {
        key: value
        for key, value in (("day", args.day), ("shared_dir", args.shared_dir))
        if value is not None
    }

    # Say what the quiet seconds are for (a first run migrates a fresh database).
    home = os.environ.get("AIRFLOW_HOME", "")
    print(
        f"Airflow home {home}: preparing its metadata database (the first run takes a while)…",
        flush=True,
    )
    prepare_database()
    import warnings

    # Airflow's own reading of examples/.airflowignore uses a deprecated pathspec class:
    # nothing a user of the example can act on.
    warnings.filterwarnings("ignore", message="GitWildMatchPattern", category=DeprecationWarning)
    print(f"Running the DAG {dag.dag_id} once with dag.test(); its tasks log below…", flush=True)
    dag_run = dag.test(run_conf=conf)
    states = {ti.task_id: str(ti.state) for ti in dag_run.get_task_instances()}
    print(f"\nDAG run {dag_run.run_id}: {dag_run.state}")
    for task_id, state in states.items():
        print(f"  {task_id:<22} {state}")
    paths = _xcom(dag.dag_id, dag_run.run_id, "prepare")
    if isinstance(paths, dict):
        from retraining_ml import summary

        conn = json.loads(os.environ.get(CONN_ENV.format(_configured["conn_id"].upper()), "{}"))
        local = (conn.get("extra") or {}) if isinstance(conn, dict) else {}
        print(
            summary(
                states.get("promote_model") == "success",
                paths["registry"],
                _xcom(dag.dag_id, dag_run.run_id, "train", "job_name"),
                local.get("state_dir") if local.get("backend") == "local" else None,
            )
        )
    return 0 if str(dag_run.state) == "success" else 1


#: The loggers of the database set-up: alembic's migration context and Airflow's own
#: "creating tables" steps. Their INFO lines say nothing a user of the example acts on.
DB_LOGGERS = ("alembic", "airflow.utils.db")


def prepare_database() -> None:
    """Create or upgrade the metadata database, without its INFO lines (a first run
    printed a dozen alembic and "creating tables" lines); its warnings and errors
    still show."""
    import logging

    from airflow.utils.db import initdb

    loggers = [logging.getLogger(name) for name in DB_LOGGERS]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(max(logging.WARNING, logger.getEffectiveLevel()))
    try:
        initdb()
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def _xcom(dag_id: str, run_id: str, task_id: str, key: str = "return_value") -> Any:
    """One XCom of a finished run (``None`` if the task pushed none)."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        row = session.scalars(
            select(XComModel).where(
                XComModel.dag_id == dag_id,
                XComModel.run_id == run_id,
                XComModel.task_id == task_id,
                XComModel.key == key,
            )
        ).first()
        return None if row is None else row.value
