"""Steps of jobs on the upstream runtimes while the controllers run them: training nodes
of the torch and JAX runtimes for several ``numNodes``, the MPI runtimes' launcher (which
is ``node-0``), and the dataset/model initializers that run before the trainer. The same
steps, names, order and states on the test bed and the real controllers."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from conformance_support import KWOK, Cluster, until
from kubernetes import client as k8s

from kf_trainer_core.client import TrainerClient
from kf_trainer_core.cluster.status import JobState, TrainJob
from kf_trainer_core.emulation.jobs import COMPLETION_INDEX_PATH
from kf_trainer_core.errors import TrainJobTimeoutError
from kf_trainer_core.k8s.trainjob import (
    ANCESTOR_LABEL,
    COMPLETION_INDEX_LABEL,
    CONTROLLER_UID_LABEL,
    GLOBAL_REPLICAS_LABEL,
    GROUP_NAME_LABEL,
    GROUP_REPLICAS_LABEL,
    JOB_GLOBAL_INDEX_LABEL,
    JOB_GROUP_INDEX_LABEL,
    JOB_INDEX_LABEL,
    JOB_KEY_LABEL,
    JOB_NAME_LABEL,
    JOBSET_NAME_LABEL,
    JOBSET_PRIORITY_LABEL,
    JOBSET_UID_LABEL,
    REPLICATED_JOB_LABEL,
    REPLICATED_JOB_REPLICAS_LABEL,
    RESTART_ATTEMPT_LABEL,
)
from kf_trainer_core.testing.scenarios import SCENARIO_ANNOTATION

GROUP, VERSION, PLURAL = "trainer.kubeflow.org", "v1alpha1", "trainjobs"
DATASET = {"storageUri": "hf://tatsu-lab/alpaca"}
CACHE_SA = "kubeflow-trainer-cache-initializer"
MODEL = {"storageUri": "hf://meta-llama/Llama-3.2-1B-Instruct"}


def create(
    cluster: Cluster,
    name: str,
    runtime: str,
    annotations: dict[str, str] | None = None,
    **spec: Any,
) -> str:
    """A TrainJob written as a user of the plain API would (no suite options)."""
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TrainJob",
        "metadata": {"name": name, "annotations": annotations or {}},
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


def test_a_pod_has_the_jobset_and_job_controllers_labels(
    client: TrainerClient, controllers: Cluster
) -> None:
    # The one pod model (emulation/jobs.py) that the local backend's pods are made by too.
    name = create(controllers, "labels", "torch-distributed", trainer={"numNodes": 2})
    complete(client, name)
    pods = (
        k8s.CoreV1Api(controllers.api())
        .list_namespaced_pod(controllers.namespace, label_selector=f"{JOBSET_NAME_LABEL}={name}")
        .items
    )
    assert len(pods) == 2
    ns, job = controllers.namespace, f"{name}-node-0"
    jobset = k8s.CustomObjectsApi(controllers.api()).get_namespaced_custom_object(
        "jobset.x-k8s.io", "v1alpha2", ns, "jobsets", name
    )
    jobset_uid = jobset["metadata"]["uid"]
    for pod in pods:
        labels = pod.metadata.labels
        index = labels[COMPLETION_INDEX_LABEL]
        expected = {
            JOBSET_NAME_LABEL: name,
            REPLICATED_JOB_LABEL: "node",
            REPLICATED_JOB_REPLICAS_LABEL: "1",
            JOB_INDEX_LABEL: "0",
            RESTART_ATTEMPT_LABEL: "0",
            JOB_NAME_LABEL: job,
            "job-name": job,
            GROUP_NAME_LABEL: "default",
            GROUP_REPLICAS_LABEL: "1",
            GLOBAL_REPLICAS_LABEL: "1",
            JOB_GROUP_INDEX_LABEL: "0",
            JOBSET_PRIORITY_LABEL: "0",
        }
        assert expected.items() <= labels.items()
        # The Trainer's step label is the Job's, not its pods'.
        assert ANCESTOR_LABEL not in labels
        # The JobSet's labels are its annotations too (the priority is a label only).
        jobset_keys = [k for k in labels if k.startswith("jobset.sigs.k8s.io/")]
        annotations = pod.metadata.annotations
        assert {k: annotations.get(k) for k in jobset_keys if k != JOBSET_PRIORITY_LABEL} == {
            k: labels[k] for k in jobset_keys if k != JOBSET_PRIORITY_LABEL
        }
        assert JOBSET_PRIORITY_LABEL not in annotations
        owner = pod.metadata.owner_references[0]
        assert (owner.kind, owner.name) == ("Job", job)
        assert labels[CONTROLLER_UID_LABEL] == labels["controller-uid"] == owner.uid
        assert labels[JOBSET_UID_LABEL] == jobset_uid
        assert labels[JOB_KEY_LABEL] == hashlib.sha1(f"{ns}/{job}".encode()).hexdigest()
        assert labels[JOB_GLOBAL_INDEX_LABEL].isdigit()
        assert annotations[COMPLETION_INDEX_LABEL] == index
        assert (pod.spec.hostname, pod.spec.subdomain) == (f"{job}-{index}", name)
        env = {e.name: e for e in pod.spec.containers[0].env}
        # The Job controller reads the index from the pod's label, the torch policy
        # from its annotation; with no resources the policy runs one process a node.
        index_path = env["JOB_COMPLETION_INDEX"].value_from.field_ref.field_path
        assert index_path == f"metadata.labels['{COMPLETION_INDEX_LABEL}']"
        assert env["PET_NODE_RANK"].value_from.field_ref.field_path == COMPLETION_INDEX_PATH
        assert env["PET_NPROC_PER_NODE"].value == "1"
        assert env["PET_MASTER_ADDR"].value == f"{name}-node-0-0.{name}"


@pytest.mark.parametrize("runtime", ["deepspeed-distributed", "mlx-distributed"])
def test_mpi_launcher_is_node_0(client: TrainerClient, controllers: Cluster, runtime: str) -> None:
    # Long enough a run on the test bed to see the steps (kwok's pods run ~3 s).
    slow = {} if controllers.real else {SCENARIO_ANNOTATION: json.dumps({"duration": 3})}
    name = create(controllers, "mpi", runtime, slow, trainer={"numNodes": 3})
    # The launcher starts once the workers are ready: all three steps show.
    job = until(
        lambda: (j := client.get_job(name)) and len(j.steps) == 3 and j,
        what="the launcher and two workers",
    )
    assert job.num_nodes == 3
    assert [s.name for s in job.steps] == ["node-0", "node-1", "node-2"]
    assert [s.replicated_job for s in job.steps] == ["launcher", "node", "node"]
    job = complete(client, name)
    # The JobSet succeeds when its launcher does.
    assert job.step("node-0") is not None
    assert job.step("node-0").status == "Succeeded"  # type: ignore[union-attr]


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
    # The node's Job comes second of the JobSet's two, in its one group.
    selector = f"{JOBSET_NAME_LABEL}={name},{REPLICATED_JOB_LABEL}=node"
    for pod in (
        k8s.CoreV1Api(controllers.api())
        .list_namespaced_pod(controllers.namespace, label_selector=selector)
        .items
    ):
        labels = pod.metadata.labels
        indexes = [JOB_GLOBAL_INDEX_LABEL, JOB_GROUP_INDEX_LABEL, GROUP_REPLICAS_LABEL]
        assert [labels[k] for k in indexes] == ["1", "1", "2"]
        assert labels[GLOBAL_REPLICAS_LABEL] == "2"


def test_an_initializer_volume_nobody_provides_keeps_the_job_pending(
    client: TrainerClient, real_cluster: Cluster
) -> None:
    # The torchtune runtimes mount a PersistentVolumeClaim "initializer" that nothing
    # here creates or binds: the scheduler leaves the initializer's pod Pending. (The
    # test bed has no volumes: it runs the job.)
    name = create(
        real_cluster,
        "tune",
        "torchtune-llama3.2-1b",
        initializer={"dataset": DATASET, "model": MODEL},
    )
    with pytest.raises(TrainJobTimeoutError, match="did not start within 3s") as info:
        client.wait(name, timeout=60, startup_timeout=3)
    assert "unbound immediate PersistentVolumeClaims" in str(info.value)
    assert info.value.failure is not None
    assert info.value.failure.step in ("dataset-initializer", "model-initializer")
    job = client.get_job(name)
    assert {s.name for s in job.steps} == {"dataset-initializer", "model-initializer"}
    assert all(s.status == "Pending" for s in job.steps)


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
    # Running once the Trainer copies the initializer's ready pod into jobsStatus (a
    # moment after the pod runs, on the real controllers).
    until(lambda: client.get_job("held-init").status is JobState.RUNNING, what="Running")
    assert job.num_nodes == 2
    assert not [p for p in controllers.owned("pods") if "-node-" in p["metadata"]["name"]]
