"""Steps of jobs on the upstream runtimes while the controllers run them: training nodes
of the torch and JAX runtimes for several ``numNodes``, the MPI runtimes' launcher (which
is ``node-0``), and the dataset/model initializers that run before the trainer. The same
steps, names, order and states on the test bed and the real controllers."""

from __future__ import annotations

import json
from typing import Any

import pytest
from conformance_support import KWOK, Cluster, until
from kubernetes import client as k8s

from kf_trainer_core.client import TrainerClient
from kf_trainer_core.cluster.status import JobState, TrainJob
from kf_trainer_core.testing.scenarios import SCENARIO_ANNOTATION

GROUP, VERSION, PLURAL = "trainer.kubeflow.org", "v1alpha1", "trainjobs"
DATASET = {"storageUri": "hf://tatsu-lab/alpaca"}
CACHE_SA = "kubeflow-trainer-cache-initializer"
MODEL = {"storageUri": "hf://meta-llama/Llama-3.2-1B-Instruct"}


def create(cluster: Cluster, name: str, runtime: str, **spec: Any) -> str:
    """A TrainJob written as a user of the plain API would (no suite options)."""
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TrainJob",
        "metadata": {"name": name},
        "spec": {"runtimeRef": {"name": runtime}, **spec},
    }
    k8s.CustomObjectsApi(cluster.api()).create_namespaced_custom_object(
        GROUP, VERSION, cluster.namespace, PLURAL, body
    )
    return name


def cache_service_account(cluster: Cluster) -> None:
    """The ServiceAccount the cache runtime's initializer runs as: without it the Job
    controller cannot create the pod (``FailedCreate``, forbidden) and the job never
    starts (real API server; the test bed used not to check)."""
    k8s.CoreV1Api(cluster.api()).create_namespaced_service_account(
        cluster.namespace, {"metadata": {"name": CACHE_SA}}
    )


def complete(client: TrainerClient, name: str) -> TrainJob:
    job, _ = client.wait(name, timeout=120)
    assert job.status is JobState.COMPLETE
    return job


@pytest.mark.parametrize("nodes", [1, 4])
@pytest.mark.parametrize("runtime", ["torch-distributed", "jax-distributed"])
def test_one_step_per_node(
    client: TrainerClient, controllers: Cluster, runtime: str, nodes: int
) -> None:
    name = create(controllers, "nodes", runtime, trainer={"numNodes": nodes})
    job = complete(client, name)
    assert job.num_nodes == nodes
    assert [s.name for s in job.steps] == [f"node-{i}" for i in range(nodes)]
    assert {s.replicated_job for s in job.steps} == {"node"}
    assert all(s.status == "Succeeded" and s.exit_code == 0 for s in job.steps)
    assert len({s.pod_name for s in job.steps}) == nodes


@pytest.mark.parametrize("runtime", ["deepspeed-distributed", "mlx-distributed"])
def test_mpi_launcher_is_node_0(client: TrainerClient, controllers: Cluster, runtime: str) -> None:
    name = create(controllers, "mpi", runtime, trainer={"numNodes": 3})
    job = complete(client, name)
    assert job.num_nodes == 3
    assert [s.name for s in job.steps] == ["node-0", "node-1", "node-2"]
    assert [s.replicated_job for s in job.steps] == ["launcher", "node", "node"]
    assert all(s.status == "Succeeded" for s in job.steps)
    # The launcher started once the workers were ready, and ended after them.
    launcher, *workers = job.steps
    assert launcher.started_at is not None
    assert all(w.started_at is not None and w.started_at <= launcher.started_at for w in workers)


def test_dataset_initializer_runs_before_the_node(
    client: TrainerClient, controllers: Cluster
) -> None:
    cache_service_account(controllers)
    name = create(
        controllers,
        "cached",
        "torch-distributed-with-cache",
        trainer={"numNodes": 2},
        initializer={"dataset": DATASET},
    )
    job = complete(client, name)
    assert [s.name for s in job.steps] == ["dataset-initializer", "node-0", "node-1"]
    init, *nodes = job.steps
    assert init.status == "Succeeded"
    assert init.finished_at is not None
    assert all(n.started_at is not None and n.started_at >= init.finished_at for n in nodes)


def test_dataset_and_model_initializers_run_before_the_trainer(
    client: TrainerClient, controllers: Cluster
) -> None:
    name = create(
        controllers,
        "tune",
        "torchtune-llama3.2-1b",
        initializer={"dataset": DATASET, "model": MODEL},
    )
    job = complete(client, name)
    assert [s.name for s in job.steps] == ["dataset-initializer", "model-initializer", "node-0"]
    assert all(s.status == "Succeeded" for s in job.steps)
    *inits, trainer = job.steps
    assert trainer.started_at is not None
    assert all(i.finished_at is not None and i.finished_at <= trainer.started_at for i in inits)


def test_while_the_initializer_runs_the_trainer_waits(
    client: TrainerClient, controllers: Cluster
) -> None:
    cache_service_account(controllers)
    spec: dict[str, Any] = {"trainer": {"numNodes": 2}, "initializer": {"dataset": DATASET}}
    annotations: dict[str, str] = {}
    if controllers.real:
        pod = {"metadata": {"annotations": {KWOK + "hold": "true"}}}
        rjob = {"name": "dataset-initializer", "template": {"spec": {"template": pod}}}
        spec["runtimePatches"] = [
            {
                "manager": "kf-trainer-suite/conformance",
                "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [rjob]}}},
            }
        ]
    else:
        steps = {"steps": {"dataset-initializer": {"outcome": "never-finish"}}}
        annotations[SCENARIO_ANNOTATION] = json.dumps(steps)
    api = k8s.CustomObjectsApi(controllers.api())
    api.create_namespaced_custom_object(
        GROUP,
        VERSION,
        controllers.namespace,
        PLURAL,
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "TrainJob",
            "metadata": {"name": "held-init", "annotations": annotations},
            "spec": {"runtimeRef": {"name": "torch-distributed-with-cache"}, **spec},
        },
    )
    job = until(
        lambda: (j := client.get_job("held-init")).steps and j.steps[0].status == "Running" and j,
        what="the dataset initializer running",
    )
    assert [s.name for s in job.steps] == ["dataset-initializer"]
    assert job.status is JobState.RUNNING
    assert job.num_nodes == 2
    assert not [p for p in controllers.owned("pods") if "-node-" in p["metadata"]["name"]]
