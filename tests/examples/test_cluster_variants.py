"""The cluster variant of every example, as far as it goes without a GPU cluster: the
``cluster`` profile's TrainJob (2 nodes x 4 GPUs, the shared PVC) is what the real CRDs
accept; each workflow picks it up from configuration alone; the schedules (Airflow
``@daily``, a Prefect cron deployment, a KFP recurring run) are what they say. Also:
profile errors name the field and the fix."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from examples_support import EXAMPLES

from kf_trainer_core.client import TrainerClient
from kf_trainer_core.errors import SpecError
from kf_trainer_core.manifest.builder import build_trainjob
from kf_trainer_core.spec import Annotations
from kf_trainer_core.spec.volumes import mount_pvc, mount_volume
from kf_trainer_core.testing.scenarios import SCENARIO_ANNOTATION
from retraining_jobs import CLUSTER, profile
from retraining_ml import train

ARGS = {"data_dir": "/mnt/shared/retraining/data/day-1", "model_dir": "/mnt/shared/m"}


def node_pod_spec(manifest: dict[str, Any]) -> dict[str, Any]:
    (patch,) = [
        p for p in manifest["spec"]["runtimePatches"] if p["manager"].endswith("volume-shared")
    ]
    (rjob,) = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    assert rjob["name"] == "node"
    pod: dict[str, Any] = rjob["template"]["spec"]["template"]["spec"]
    return pod


def test_cluster_profile_is_a_valid_gpu_trainjob(kubeconfig_path: Path) -> None:
    spec = profile("cluster").spec(train, ARGS)
    manifest = build_trainjob(spec, namespace="team-a").manifest
    trainer = manifest["spec"]["trainer"]
    assert trainer["numNodes"] == 2
    assert trainer["resourcesPerNode"]["limits"]["nvidia.com/gpu"] == 4
    assert manifest["spec"]["runtimeRef"]["name"] == "torch-distributed"
    pod = node_pod_spec(manifest)
    assert pod["volumes"] == [
        {"name": "shared", "persistentVolumeClaim": {"claimName": "retraining-data"}}
    ]
    assert pod["containers"] == [
        {"name": "node", "volumeMounts": [{"name": "shared", "mountPath": CLUSTER.shared_dir}]}
    ]
    # The real CRDs (structural schema and CEL rules) accept it, and it runs.
    accepted = spec.model_copy(
        update={"options": [*spec.options, Annotations({SCENARIO_ANNOTATION: "success"})]}
    )
    with TrainerClient({"kubeconfig": str(kubeconfig_path), "poll_interval": 0.1}) as client:
        out = client.run(accepted, identity=("examples", "cluster-profile"), timeout=60)
    assert out.status.value == "Complete"


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("gpu", ["'gpu' is unknown", "local or cluster"]),
        ("{not json", ["not JSON"]),
        ('{"num_node": 2}', ["num_node", "JobProfile fields", "num_nodes"]),
        ('{"num_nodes": 0}', ["num_nodes"]),
        ({"volume_claim": "data"}, ["volume_claim needs shared_dir", "Fix"]),
        ({"options": [{"type": "QueueName", "queue": "Team A"}]}, ["queue", "Fix"]),
    ],
)
def test_bad_profiles_name_the_field_and_the_fix(value: Any, words: list[str]) -> None:
    with pytest.raises(ValueError) as caught:
        profile(value)
    for word in words:
        assert word in str(caught.value)


def test_profiles_from_json_build_on_a_base() -> None:
    tuned = profile(
        '{"base": "cluster", "num_nodes": 4, "options": [{"type": "QueueName", "queue": "team-a"}]}'
    )
    assert tuned.num_nodes == 4
    assert tuned.volume_claim == CLUSTER.volume_claim
    labels = build_trainjob(tuned.spec(train, ARGS)).manifest["metadata"]["labels"]
    assert labels["kueue.x-k8s.io/queue-name"] == "team-a"
    assert profile(None) == profile("local") == profile({})


def test_volume_helpers() -> None:
    with pytest.raises(SpecError, match=r"mount_path: 'data' is not an absolute path\."):
        mount_pvc("claim", "data")
    with pytest.raises(SpecError, match=r"volume\.name"):
        mount_volume({"emptyDir": {}}, "/scratch")
    with pytest.raises(SpecError, match="claim_name"):
        mount_pvc("", "/data")
    nfs = mount_volume(
        {"name": "datasets", "nfs": {"server": "nfs.example", "path": "/exports"}},
        "/datasets",
        read_only=True,
        replicated_jobs="dataset-initializer",
    )
    assert nfs.manager == "kf-trainer-suite/volume-datasets"
    (rjob,) = nfs.training_runtime_spec.template.spec.replicated_jobs  # type: ignore[union-attr]
    assert rjob.name == "dataset-initializer"
    pod = rjob.template.spec.template.spec  # type: ignore[union-attr]
    assert pod.containers[0].name == "dataset-initializer"  # type: ignore[index]
    assert pod.containers[0].volume_mounts == [  # type: ignore[index]
        {"name": "datasets", "mountPath": "/datasets", "readOnly": True}
    ]
    launcher = mount_pvc("c", "/d", replicated_jobs=("launcher",), read_only=True)
    spec = launcher.training_runtime_spec.template.spec  # type: ignore[union-attr]
    pod = spec.replicated_jobs[0].template.spec.template.spec  # type: ignore[index, union-attr]
    assert pod.containers[0].name == "node"  # type: ignore[index]
    assert pod.volumes[0]["persistentVolumeClaim"] == {"claimName": "c", "readOnly": True}  # type: ignore[index]


@pytest.mark.usefixtures("examples_airflow_db")
def test_airflow_dag_takes_the_cluster_profile_from_configuration(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from airflow.dag_processing.dagbag import DagBag

    monkeypatch.setenv("KF_RETRAIN_PROFILE", "cluster")
    bag = DagBag(dag_folder=str(EXAMPLES / "airflow_retraining.py"))
    assert not bag.import_errors, bag.import_errors
    dag = bag.get_dag("kf_retraining")
    assert dag is not None
    assert dag.schedule == "@daily"
    train_task = dag.get_task("train")
    assert train_task.deferrable
    assert train_task.kubeflow_trainer_conn_id == "kf_retraining"
    assert train_task.params["shared_dir"] == CLUSTER.shared_dir  # the PVC's path
    manifest = yaml.safe_load(train_task.render_manifest())
    assert manifest["spec"]["trainer"]["numNodes"] == 2
    assert node_pod_spec(manifest)["volumes"][0]["persistentVolumeClaim"] == {
        "claimName": "retraining-data"
    }


def test_prefect_deployment_for_the_cluster() -> None:
    from prefect_retraining import deployment_parameters, retraining

    params = deployment_parameters("gpu-cluster", "cluster")
    assert params == {"credentials": "gpu-cluster", "profile": "cluster"}
    assert deployment_parameters(None, "local") == {}
    deployment = retraining.to_deployment(name="nightly", cron="0 3 * * *", parameters=params)
    (scheduled,) = deployment.schedules
    assert scheduled.schedule.cron == "0 3 * * *"  # type: ignore[union-attr]
    assert deployment.parameters == params


def test_kfp_cluster_pipeline_compiles_with_pvcs_and_images(tmp_path: Path) -> None:
    from kfp_retraining import main

    package = tmp_path / "retraining.yaml"
    image = "registry.example.com/kf-retraining:0.1"
    assert main(["--compile", str(package), "--profile", "cluster", "--image", image]) == 0
    pipeline, platform = yaml.safe_load_all(package.read_text())
    executors = pipeline["deploymentSpec"]["executors"]
    assert {e["container"]["image"] for e in executors.values()} == {image}
    mounts = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    for name in ("exec-prepare", "exec-evaluate-candidate", "exec-promote-model"):
        (mount,) = mounts[name]["pvcMount"]
        assert mount["mountPath"] == CLUSTER.shared_dir
    # The TrainJob component carries the cluster spec (the training pods mount the PVC).
    command = json.dumps(executors["exec-train"]["container"])
    assert '\\"num_nodes\\": 2' in command
    assert "retraining-data" in command
    defaults = pipeline["root"]["inputDefinitions"]["parameters"]
    assert defaults["shared_dir"]["defaultValue"] == CLUSTER.shared_dir
    assert defaults["backend_config"]["defaultValue"] == {}


class RecordingKfpClient:
    """Stands in for ``kfp.Client`` (no KFP API here): records what is asked of it."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def create_experiment(self, name: str) -> Any:
        self.calls.append(("create_experiment", {"name": name}))
        return type("Experiment", (), {"experiment_id": "exp-1"})()

    def create_recurring_run(self, **kwargs: Any) -> Any:
        self.calls.append(("create_recurring_run", kwargs))
        return type("RecurringRun", (), {"recurring_run_id": "rr-1"})()


def test_kfp_recurring_run_request() -> None:
    from kfp_retraining import CRON, schedule

    client = RecordingKfpClient()
    made = schedule(client, "retraining.yaml", params={"backend_config": {"namespace": "team-a"}})
    assert made.recurring_run_id == "rr-1"
    (_, experiment), (_, recurring) = client.calls
    assert experiment == {"name": "kf-retraining"}
    assert recurring["experiment_id"] == "exp-1"
    assert recurring["cron_expression"] == CRON == "0 0 3 * * *"
    assert recurring["no_catchup"] is True
    assert recurring["pipeline_package_path"] == "retraining.yaml"
    assert recurring["params"] == {"backend_config": {"namespace": "team-a"}}
    assert recurring["service_account"] == "trainer-launcher"
