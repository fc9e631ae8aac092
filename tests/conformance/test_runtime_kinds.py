"""A job on a namespaced TrainingRuntime runs like one on a ClusterTrainingRuntime, and
``get_job`` says which kind it ran on; the same on both servers."""

from __future__ import annotations

from conformance_support import Cluster

from kf_trainer_core.client import TrainerClient
from kf_trainer_core.cluster.status import JobState


def test_a_namespaced_runtime_runs_the_job_and_is_named(
    client: TrainerClient, controllers: Cluster
) -> None:
    runtime = controllers.fast_fail_runtime()
    name = client.submit(controllers.spec(runtime=runtime, nodes=2)).job.name
    job, _ = client.wait(name, timeout=120)
    assert job.status is JobState.COMPLETE
    assert (job.runtime, job.runtime_kind) == (runtime["name"], "TrainingRuntime")
    assert job.num_nodes == 2


def test_a_cluster_runtime_is_named_as_such(client: TrainerClient, cluster: Cluster) -> None:
    name = client.submit(cluster.spec("hold")).job.name
    job = client.get_job(name)
    assert (job.runtime, job.runtime_kind) == ("torch-distributed", "ClusterTrainingRuntime")
