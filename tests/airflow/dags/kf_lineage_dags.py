"""A DAG whose TrainJob task has lineage: a DataCache input and a returned model_uri
(run with the OpenLineage provider emitting to a file)."""

from __future__ import annotations

import json
from datetime import datetime

from airflow.sdk import DAG
from kf_dag_helpers import CONN_ID

from kf_trainer_airflow.operators.trainjob import TrainJobOperator
from kf_trainer_core.spec import Annotations, CustomTrainer, DataCacheInitializer, Initializer
from kf_trainer_core.testing.scenarios import SCENARIO_ANNOTATION

MODEL_URI = "s3://models/orders-ranker/run-7"


def train() -> dict[str, str]:
    return {"model_uri": MODEL_URI}


with DAG("kf_lineage", schedule=None, start_date=datetime(2026, 1, 1), catchup=False) as kf_lineage:
    TrainJobOperator(
        task_id="train",
        kubeflow_trainer_conn_id=CONN_ID,
        runtime="torch-distributed-with-cache",
        trainer=CustomTrainer(train),
        initializer=Initializer(
            dataset=DataCacheInitializer(
                storage_uri="cache://sales/orders",
                metadata_loc="s3://lake/warehouse/sales/orders/metadata/00003-a.metadata.json",
                num_data_nodes=2,
            )
        ),
        options=[
            Annotations(
                {
                    SCENARIO_ANNOTATION: json.dumps(
                        {"termination_message": json.dumps({"model_uri": MODEL_URI})}
                    )
                }
            )
        ],
    )
