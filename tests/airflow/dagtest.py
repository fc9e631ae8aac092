"""Run a test DAG with ``dag.test()`` and read back what Airflow recorded."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DAGS = Path(__file__).resolve().parent / "dags"
CONN_ID = "kf_test"
CONN_ENV = f"AIRFLOW_CONN_{CONN_ID.upper()}"


def connection_json(**extra: Any) -> str:
    """A ``kubeflow_trainer`` connection as ``AIRFLOW_CONN_*`` JSON (``host`` and
    ``password`` are the standard fields; the rest goes to the extra)."""
    host = extra.pop("host", None)
    password = extra.pop("password", None)
    data: dict[str, Any] = {"conn_type": "kubeflow_trainer", "extra": extra}
    if host:
        data["host"] = host
    if password:
        data["password"] = password
    return json.dumps(data)


@dataclass
class Run:
    """A finished ``dag.test()`` run."""

    dag_id: str
    run_id: str
    state: str

    def tis(self) -> dict[tuple[str, int], Any]:
        """Task instances by ``(task_id, map_index)``."""
        from airflow.models.taskinstance import TaskInstance
        from airflow.utils.session import create_session
        from sqlalchemy import select

        with create_session() as session:
            rows = session.scalars(
                select(TaskInstance).where(
                    TaskInstance.dag_id == self.dag_id, TaskInstance.run_id == self.run_id
                )
            ).all()
            for row in rows:
                session.expunge(row)
        return {(t.task_id, t.map_index): t for t in rows}

    def state_of(self, task_id: str, map_index: int = -1) -> str | None:
        state = self.tis()[(task_id, map_index)].state
        return None if state is None else str(getattr(state, "value", state))

    def try_number(self, task_id: str, map_index: int = -1) -> int:
        return int(self.tis()[(task_id, map_index)].try_number)

    def reschedules(self, task_id: str, map_index: int = -1) -> int:
        """How many times a sensor in reschedule mode gave its slot back."""
        from airflow.models.taskreschedule import TaskReschedule
        from airflow.utils.session import create_session
        from sqlalchemy import func, select

        ti = self.tis()[(task_id, map_index)]
        with create_session() as session:
            query = select(func.count()).where(TaskReschedule.ti_id == ti.id)
            return int(session.scalar(query) or 0)

    def xcoms(self) -> list[tuple[str, int, str, Any]]:
        """Every XCom of the run: ``(task_id, map_index, key, value)``."""
        from airflow.models.xcom import XComModel
        from airflow.utils.session import create_session
        from sqlalchemy import select

        with create_session() as session:
            rows = session.scalars(
                select(XComModel).where(
                    XComModel.dag_id == self.dag_id, XComModel.run_id == self.run_id
                )
            ).all()
            return [(x.task_id, x.map_index, x.key, x.value) for x in rows]

    def xcom(self, task_id: str, key: str = "return_value", map_index: int = -1) -> Any:
        for tid, idx, k, value in self.xcoms():
            if (tid, idx, k) == (task_id, map_index, key):
                return value
        raise KeyError((task_id, key, map_index))

    def rendered_fields(self) -> list[Any]:
        """The rendered template fields Airflow stored for the run's tasks."""
        from airflow.models.renderedtifields import RenderedTaskInstanceFields as RTIF
        from airflow.utils.session import create_session
        from sqlalchemy import select

        with create_session() as session:
            rows = session.scalars(
                select(RTIF).where(RTIF.dag_id == self.dag_id, RTIF.run_id == self.run_id)
            ).all()
            return [r.rendered_fields for r in rows]


def load_dag(dag_id: str) -> Any:
    """The DAG from the DAG folder (parsed as Airflow parses it)."""
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAGS))
    assert not bag.import_errors, bag.import_errors
    dag = bag.get_dag(dag_id)
    assert dag is not None, f"no DAG {dag_id} in {DAGS}"
    return dag


def run_dag(dag_id: str, conf: dict[str, Any] | None = None) -> Run:
    """Run the DAG once with ``dag.test()`` (tasks in this process, triggers inline)."""
    dag = load_dag(dag_id)
    dr = dag.test(run_conf=conf)
    return Run(dag_id, dr.run_id, str(dr.state.value if hasattr(dr.state, "value") else dr.state))
