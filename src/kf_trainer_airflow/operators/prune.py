"""Prune finished TrainJobs from Airflow: :class:`TrainJobPruneOperator` (one task) and
:func:`prune_dag` (a ready-made maintenance DAG that prunes on a schedule).

The rules are the core's (``TrainerClient.prune_jobs``, ``docs/retention.md``): never an
unfinished job, never checkpoints; without ``older_than``/``keep_last`` the retention
each job was submitted with decides. The task's value (``return_value`` XCom) is the
prune report as a dict.

>>> from kf_trainer_airflow.operators.prune import prune_dag
>>> maintenance = prune_dag("kf_trainer_prune", kubeflow_trainer_conn_id="kf", older_than="14d")
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from kf_trainer_airflow._compat import BaseOperator
from kf_trainer_airflow.hooks.trainer import KubeflowTrainerHook
from kf_trainer_core.tasks import PRUNE_OPTIONS, parse_age

if TYPE_CHECKING:
    from airflow.sdk import DAG, Context

__all__ = ["TrainJobPruneOperator", "prune_dag"]


class TrainJobPruneOperator(BaseOperator):
    """Delete finished TrainJobs of the connection's namespace (their JobSets, pods and
    Kueue Workloads go with them).

    :param older_than: only jobs that finished longer ago (``"7d"``, ``"12h"``, seconds).
    :param keep_last: keep the newest N attempts of each identity.
    :param statuses: which finished states (``Complete``, ``Failed``).
    :param label_selector: only jobs matching this label selector.
    :param identity_prefix: only jobs whose identity starts with this text (e.g. a DAG
        id and ``/``).
    :param include_foreign: also jobs this suite did not create.
    :param honour_retention: also delete jobs their own ``Retention`` says are due.
    :param limit: delete at most this many per run.
    :param dry_run: report the plan; delete nothing.
    """

    template_fields: Sequence[str] = (
        "older_than",
        "label_selector",
        "identity_prefix",
        "namespace",
    )
    ui_color = "#c9d8f8"

    def __init__(
        self,
        *,
        kubeflow_trainer_conn_id: str | None = KubeflowTrainerHook.default_conn_name,
        namespace: str | None = None,
        older_than: str | float | None = None,
        keep_last: int | None = None,
        statuses: Sequence[str] = ("Complete", "Failed"),
        label_selector: str | None = None,
        identity_prefix: str | None = None,
        include_foreign: bool = False,
        honour_retention: bool = True,
        limit: int | None = None,
        dry_run: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.kubeflow_trainer_conn_id = kubeflow_trainer_conn_id
        self.namespace = namespace
        self.older_than = older_than
        self.keep_last = keep_last
        self.statuses = tuple(statuses)
        self.label_selector = label_selector
        self.identity_prefix = identity_prefix
        self.include_foreign = include_foreign
        self.honour_retention = honour_retention
        self.limit = limit
        self.only_plan = dry_run  # BaseOperator.dry_run is a method
        if older_than is not None and "{{" not in str(older_than):
            # A bad age fails when the DAG is parsed, naming the argument and the fix.
            parse_age(older_than)

    def execute(self, context: Context) -> dict[str, Any]:
        # Each option is this operator's attribute of the same name (rendered, where
        # templated), but for ``dry_run``: ``BaseOperator.dry_run`` is a method.
        options = {name: getattr(self, name) for name in PRUNE_OPTIONS if name != "dry_run"}
        hook = KubeflowTrainerHook(self.kubeflow_trainer_conn_id, namespace=self.namespace)
        with hook.get_client() as client:
            report = client.prune_jobs(**options, dry_run=self.only_plan)
        for line in report.lines():
            self.log.info("%s", line)
        return report.to_dict()


def prune_dag(
    dag_id: str = "kf_trainer_prune",
    *,
    schedule: Any = "@daily",
    start_date: datetime | None = None,
    **prune: Any,
) -> DAG:
    """A maintenance DAG of one :class:`TrainJobPruneOperator` task (``prune``), run on
    ``schedule`` without catch-up; ``prune`` holds the operator's arguments. Put it in a
    DAG file: ``dag = prune_dag(kubeflow_trainer_conn_id="kf", older_than="14d")``."""
    from airflow.sdk import DAG

    with DAG(
        dag_id,
        schedule=schedule,
        start_date=start_date or datetime(2024, 1, 1, tzinfo=timezone.utc),
        catchup=False,
        max_active_runs=1,
        tags=["kubeflow-trainer", "maintenance"],
        doc_md="Deletes finished TrainJobs (docs/retention.md); never unfinished ones.",
    ) as dag:
        TrainJobPruneOperator(task_id="prune", **prune)
    return dag
