"""``examples/airflow_retraining.py`` prepares Airflow's metadata database without
alembic's and Airflow's INFO lines (a first run printed a dozen: "Context impl
SQLiteImpl.", "Creating Airflow database tables from the ORM", ...); what goes wrong
with the database still shows."""

from __future__ import annotations

import logging

import pytest


@pytest.mark.usefixtures("examples_airflow_db")
def test_the_database_set_up_prints_no_info_lines(caplog: pytest.LogCaptureFixture) -> None:
    import airflow_laptop

    before = [logging.getLogger(n).level for n in airflow_laptop.DB_LOGGERS]
    with caplog.at_level(logging.INFO):
        airflow_laptop.prepare_database()
    noisy = [
        r.getMessage()
        for r in caplog.records
        if r.name.startswith(airflow_laptop.DB_LOGGERS) and r.levelno < logging.WARNING
    ]
    assert noisy == []
    # The loggers are as they were afterwards (the DAG run's own logging is untouched).
    assert [logging.getLogger(n).level for n in airflow_laptop.DB_LOGGERS] == before


@pytest.mark.usefixtures("examples_airflow_db")
def test_the_database_set_up_still_shows_warnings(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow.utils import db

    import airflow_laptop

    def initdb() -> None:
        logging.getLogger("alembic.runtime.migration").info("Context impl SQLiteImpl.")
        logging.getLogger("airflow.utils.db").warning("the database is locked")

    monkeypatch.setattr(db, "initdb", initdb)
    with caplog.at_level(logging.INFO):
        airflow_laptop.prepare_database()
    shown = [r.getMessage() for r in caplog.records]
    assert "the database is locked" in shown
    assert "Context impl SQLiteImpl." not in shown
