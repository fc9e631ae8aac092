"""OpenLineage facets of TrainJob tasks, with the real OpenLineage provider, after runs
against the test server; and the operator without the provider."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from openlineage.client.serde import Serde

from kf_trainer_airflow.operators.trainjob import TrainJobFailedException, TrainJobOperator
from kf_trainer_core.client import TrainerClient
from kf_trainer_core.config import KubernetesConfig
from kf_trainer_core.k8s.resources import TRAINJOBS
from kf_trainer_core.manifest.lineage import LINEAGE_INPUTS_ANNOTATION
from kf_trainer_core.spec import (
    Annotations,
    CustomTrainer,
    DataCacheInitializer,
    HuggingFaceDatasetInitializer,
    HuggingFaceModelInitializer,
    Initializer,
)
from kf_trainer_core.testing.scenarios import SCENARIO_ANNOTATION
from kf_trainer_core.testing.server import KubeTestServer

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = "torch-distributed-with-cache"  # custom code, with a dataset-initializer step
RESULT = {"model_uri": "s3://models/llama-ft/run-7", "loss": 0.12}


def train() -> dict[str, Any]:
    return RESULT


def initializer() -> Initializer:
    return Initializer(
        dataset=DataCacheInitializer(
            storage_uri="cache://sales/orders",
            metadata_loc="s3://lake/warehouse/sales/orders/metadata/00003-a.metadata.json",
            num_data_nodes=2,
        )
    )


def hf_initializer() -> Initializer:
    return Initializer(
        dataset=HuggingFaceDatasetInitializer(storage_uri="hf://tatsu-lab/alpaca"),
        model=HuggingFaceModelInitializer(storage_uri="hf://meta-llama/Llama-3.2-1B-Instruct"),
    )


def scenario(outcome: str = "succeed") -> Annotations:
    data = {"outcome": outcome, "termination_message": json.dumps(RESULT)}
    return Annotations({SCENARIO_ANNOTATION: json.dumps(data)})


class FakeTI:
    dag_id, task_id, run_id, map_index, try_number = "dag", "train", "lineage", -1, 1

    def __init__(self) -> None:
        self.xcoms: dict[str, Any] = {}
        self.stats_tags: dict[str, str] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcoms[key] = value


def op(**kwargs: Any) -> TrainJobOperator:
    kwargs.setdefault("task_id", "train")
    kwargs.setdefault("kubeflow_trainer_conn_id", "kf_test")
    kwargs.setdefault("runtime", RUNTIME)
    kwargs.setdefault("trainer", CustomTrainer(train))
    kwargs.setdefault("initializer", initializer())
    return TrainJobOperator(**kwargs)


def as_json(lineage: Any) -> dict[str, Any]:
    """The lineage as the provider puts it in an event (the client's serialiser)."""
    return {
        "inputs": [Serde.to_dict(d) for d in lineage.inputs],
        "outputs": [Serde.to_dict(d) for d in lineage.outputs],
        "run_facets": {k: Serde.to_dict(v) for k, v in lineage.run_facets.items()},
    }


INPUTS = [("s3://lake", "warehouse/sales/orders", "FILE")]
HF_INPUTS = [
    ("https://huggingface.co", "datasets/tatsu-lab/alpaca", "FILE"),
    ("https://huggingface.co", "meta-llama/Llama-3.2-1B-Instruct", "MODEL"),
]


def names(datasets: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    return [
        (d["namespace"], d["name"], d["facets"]["datasetType"]["datasetType"]) for d in datasets
    ]


def test_facets_after_a_run(kf_conn: Path, kube: KubeTestServer) -> None:
    task = op(options=[scenario()])
    start = as_json(task.get_openlineage_facets_on_start())
    assert names(start["inputs"]) == INPUTS
    assert start["inputs"][0]["facets"]["symlinks"]["identifiers"] == [
        {"namespace": "cache://default", "name": "sales.orders", "type": "TABLE"}
    ]
    assert start["outputs"] == []
    run = start["run_facets"]["kubeflow_trainjob"]
    assert (run["namespace"], run["runtime"], run["kind"]) == ("default", RUNTIME, "TrainJob")
    assert "uid" not in run
    assert "name" not in run

    ti = FakeTI()
    out = task.execute({"ti": ti, "task_state_store": None})
    assert out["result"] == RESULT
    done = as_json(task.get_openlineage_facets_on_complete(ti))
    assert names(done["inputs"]) == INPUTS
    assert names(done["outputs"]) == [("s3://models", "llama-ft/run-7", "MODEL")]
    with TrainerClient(KubernetesConfig(kubeconfig=str(kf_conn))) as client:
        job = client.get_job(out["name"])
    facet = done["run_facets"]["kubeflow_trainjob"]
    assert {k: v for k, v in facet.items() if not k.startswith("_")} == {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "name": out["name"],
        "namespace": "default",
        "uid": job.uid,
        "runtime": RUNTIME,
        "runtimeKind": "ClusterTrainingRuntime",
        "status": "Complete",
    }
    assert job.uid
    # The same inputs are on the TrainJob, for tools that read the cluster.
    stored = kube.store.get(TRAINJOBS, "default", out["name"])
    stamped = json.loads(stored["metadata"]["annotations"][LINEAGE_INPUTS_ANNOTATION])
    assert [(d["namespace"], d["name"], d["uri"]) for d in stamped] == [
        ("s3://lake", "warehouse/sales/orders", "cache://sales/orders")
    ]


def test_a_reconnecting_try_reads_the_uid(kf_conn: Path, kube: KubeTestServer) -> None:
    first = op(options=[scenario()])
    ti = FakeTI()
    out = first.execute({"ti": ti, "task_state_store": None})
    # A later try (a fresh operator, as after a worker crash) finds the finished job.
    again = op(options=[scenario()])
    again.execute({"ti": ti, "task_state_store": None})
    facet = as_json(again.get_openlineage_facets_on_complete(ti))["run_facets"]
    assert facet["kubeflow_trainjob"]["name"] == out["name"]
    assert facet["kubeflow_trainjob"]["uid"]


def test_facets_of_a_failed_task(kf_conn: Path, kube: KubeTestServer) -> None:
    task = op(options=[scenario("fail")])
    ti = FakeTI()
    with pytest.raises(TrainJobFailedException):
        task.execute({"ti": ti, "task_state_store": None})
    failed = as_json(task.get_openlineage_facets_on_failure(ti))
    assert names(failed["inputs"]) == INPUTS
    assert failed["outputs"] == []
    facet = failed["run_facets"]["kubeflow_trainjob"]
    assert facet["name"] == ti.xcoms["job_name"]
    assert facet["uid"]


def test_the_decorator_shares_the_operators_facets() -> None:
    from kf_trainer_airflow.decorators.trainer import _KubeflowTrainerDecoratedOperator

    task = _KubeflowTrainerDecoratedOperator(
        task_id="t",
        python_callable=train,
        runtime=RUNTIME,
        initializer=hf_initializer(),
        kubeflow_trainer_conn_id="kf_test",
        namespace="team-a",
    )
    start = as_json(task.get_openlineage_facets_on_start())
    assert names(start["inputs"]) == HF_INPUTS
    assert start["run_facets"]["kubeflow_trainjob"]["namespace"] == "team-a"


NO_PROVIDER = """
import sys

import airflow.sdk  # the baseline every DAG file pays

# (Airflow's provider discovery may have read the provider's metadata by now.)
before = {m for m in sys.modules if m.startswith(("openlineage", "airflow.providers.openlineage"))}
# As if the OpenLineage provider and client were not installed: importing them fails.
sys.modules["openlineage"] = None
sys.modules["airflow.providers.openlineage"] = None
from kf_trainer_airflow.operators.trainjob import TrainJobOperator
from kf_trainer_airflow.decorators.trainer import kubeflow_trainer_task
from kf_trainer_core.spec import (
    BuiltinTrainer, HuggingFaceDatasetInitializer, Initializer, TorchTuneConfig
)

task = TrainJobOperator(
    task_id="t", runtime="torchtune-llama3.2-1b", trainer=BuiltinTrainer(config=TorchTuneConfig()),
    initializer=Initializer(dataset=HuggingFaceDatasetInitializer(storage_uri="hf://a/b")),
)
text = task.render_manifest()
assert "kf-trainer-suite/lineage-inputs" in text, text
loaded = {
    m
    for m, module in sys.modules.items()
    if module is not None and m.startswith(("openlineage", "airflow.providers.openlineage"))
}
assert loaded <= before and "kf_trainer_airflow.lineage" not in sys.modules, (before, loaded)
assert not any(m.startswith("openlineage") for m in loaded), loaded
try:
    task.get_openlineage_facets_on_start()
except ImportError:
    print("ok")
"""


def test_without_the_provider_nothing_is_imported_and_nothing_breaks() -> None:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(NO_PROVIDER)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith("ok")


DAG_TEST = """
import sys
sys.path[:0] = [{here!r}, {dags!r}]
from dagtest import run_dag
print("STATE", run_dag("kf_lineage").state)
"""


@pytest.mark.usefixtures("airflow_db")
def test_a_dag_run_emits_the_facets(kf_conn: Path, kube: KubeTestServer, tmp_path: Path) -> None:
    """Real Airflow, real provider: ``dag.test()`` in a process of its own (the provider
    reads its transport when Airflow loads plugins) writes its events to a file."""
    import os

    events = tmp_path / "events.jsonl"
    env = dict(os.environ)
    env["AIRFLOW__OPENLINEAGE__TRANSPORT"] = json.dumps(
        {"type": "file", "log_file_path": str(events), "append": True}
    )
    here = Path(__file__).resolve().parent
    script = DAG_TEST.format(here=str(here), dags=str(here / "dags"))
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "STATE success" in done.stdout, done.stderr[-3000:]
    sent = [json.loads(line) for line in events.read_text().splitlines() if line.strip()]
    task_events = [e for e in sent if e["job"]["name"] == "kf_lineage.train"]
    by_type = {e["eventType"]: e for e in task_events}
    assert {"START", "COMPLETE"} <= set(by_type)
    start, complete = by_type["START"], by_type["COMPLETE"]
    for event in (start, complete):
        assert [(d["namespace"], d["name"]) for d in event["inputs"]] == [
            ("s3://lake", "warehouse/sales/orders")
        ]
    assert [(d["namespace"], d["name"]) for d in complete["outputs"]] == [
        ("s3://models", "orders-ranker/run-7")
    ]
    facet = complete["run"]["facets"]["kubeflow_trainjob"]
    [job] = kube.store.list(TRAINJOBS, "default")[0]
    assert facet["name"] == job["metadata"]["name"]
    assert facet["uid"] == job["metadata"]["uid"]
    assert facet["status"] == "Complete"
