"""Daily retraining as an Airflow DAG: prepare the day's data → train it as a Kubeflow
Trainer TrainJob → evaluate the candidate → promote it only when it beats the promoted
model (a branch).

On this machine (the local backend: the TrainJob runs as local processes; no cluster,
no Airflow set-up)::

    uv run --frozen python examples/airflow_retraining.py              # today's data
    uv run --frozen python examples/airflow_retraining.py --day 12     # another day

On a cluster, the same file with other configuration:

* **where**: the connection ``kf_retraining`` (Admin → Connections, type *Kubeflow
  Trainer*, or an environment variable)::

      AIRFLOW_CONN_KF_RETRAINING='{"conn_type": "kubeflow_trainer",
                                   "extra": {"in_cluster": true, "namespace": "team-a"}}'

  (a kubeconfig works too: ``{"kubeconfig_path": "/opt/airflow/kube/config",
  "context": "gpu-cluster"}``; tokens go in the connection's password field, which
  Airflow encrypts and masks);
* **what**: ``KF_RETRAIN_PROFILE=cluster`` (see ``retraining_jobs.CLUSTER``: runtime
  ``torch-distributed``, ``num_nodes=2``, ``resources_per_node={"gpu": 4, ...}``, the
  PVC ``retraining-data`` mounted at ``/mnt/shared/retraining`` in the training pods).
  The workers that run prepare/evaluate/promote must mount the same storage at the
  same path (a plain directory is enough on a laptop, not on a cluster).

The DAG is scheduled ``@daily`` and trains on the data of its logical date (the run's
conf ``{"day": N}`` overrides it). The training task waits deferred: the triggerer
watches every waiting job over one shared watch, and no worker slot is held while the
GPUs work. A retried training task reattaches to its job instead of submitting another;
one retried after the job *failed* submits a fresh attempt.
"""

from __future__ import annotations

import os
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
# The ML and the job profiles live beside this file (copy all three into the DAG folder).
sys.path.insert(0, str(HERE))

#: The connection that says where the TrainJobs run.
CONN_ID = "kf_retraining"

if __name__ == "__main__":
    # A laptop run: Airflow reads its configuration when first imported, so its
    # private home is set up before the imports below.
    from airflow_laptop import configure

    configure(CONN_ID, dags_folder=HERE)

import pendulum  # noqa: E402
from airflow.sdk import Param, dag, task  # noqa: E402

from retraining_jobs import profile  # noqa: E402
from retraining_ml import (  # noqa: E402
    current_accuracy,
    day_of,
    evaluate,
    layout,
    prepare_data,
    promote,
    promoted_note,
    train,
)

#: What the job asks for: "local" (default), "cluster", or JSON (see retraining_jobs).
PROFILE = profile(os.environ.get("KF_RETRAIN_PROFILE"))


@dag(
    dag_id="kf_retraining",
    schedule="@daily",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    params={
        "day": Param(
            None, type=["null", "integer"], description="Day of data (default: the run's date)."
        ),
        "shared_dir": Param(
            PROFILE.root(".kf-trainer/airflow"),
            type="string",
            description="Data and models; shared storage on a cluster.",
        ),
    },
    tags=["kubeflow-trainer", "example"],
)
def kf_retraining() -> None:
    @task
    def prepare(params: dict[str, Any] | None = None, logical_date: Any = None) -> dict[str, Any]:
        """Write the day's train and test sets; return where everything goes."""
        assert params is not None
        day = params["day"] if params["day"] is not None else day_of(logical_date)
        paths = layout(params["shared_dir"], day)
        print(prepare_data(paths["data_dir"], day))
        return {**paths, "day": day}

    # The training function from retraining_ml, as a TrainJob: its source is sent to the
    # training pods, its arguments come from XCom, its return value is this task's XCom.
    train_model = task.kubeflow_trainer(
        task_id="train",
        kubeflow_trainer_conn_id=CONN_ID,
        runtime=PROFILE.runtime,
        options=PROFILE.job_options(),
        deferrable=True,
        retries=2,
        retry_delay=timedelta(minutes=1),
        **PROFILE.trainer_settings(),
    )(train)

    @task
    def evaluate_candidate(trained: dict[str, Any], paths: dict[str, Any]) -> dict[str, Any]:
        """The candidate's test metrics, and the promoted model's accuracy on the same
        (today's) test set."""
        metrics = evaluate(trained["model_uri"], paths["data_dir"])
        baseline = current_accuracy(paths["registry"], paths["data_dir"])
        print(f"candidate {metrics}, {promoted_note(paths['registry'], baseline)}")
        return {**metrics, "promoted_accuracy": baseline}

    @task.branch
    def better(metrics: dict[str, Any]) -> str:
        """Promote only a candidate that beats the promoted model."""
        if metrics["accuracy"] > metrics["promoted_accuracy"]:
            return "promote_model"
        return "keep_promoted"

    @task
    def promote_model(
        trained: dict[str, Any], metrics: dict[str, Any], paths: dict[str, Any]
    ) -> dict[str, Any]:
        """Copy the candidate into the registry, with its metrics."""
        kept = {k: metrics[k] for k in ("accuracy", "loss")}
        return promote(trained["model_uri"], {**kept, "day": paths["day"]}, paths["registry"])

    @task
    def keep_promoted(metrics: dict[str, Any]) -> None:
        """Say why nothing was promoted."""
        print(
            f"keeping the promoted model: the candidate's accuracy {metrics['accuracy']} "
            f"does not beat {metrics['promoted_accuracy']}"
        )

    paths = prepare()
    trained = train_model(data_dir=paths["data_dir"], model_dir=paths["model_dir"])
    metrics = evaluate_candidate(trained, paths)
    better(metrics) >> [promote_model(trained, metrics, paths), keep_promoted(metrics)]


retraining_dag = kf_retraining()

if __name__ == "__main__":
    from airflow_laptop import run

    raise SystemExit(run(retraining_dag))
