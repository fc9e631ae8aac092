"""Kueue-labelled jobs on a cluster without a Kueue controller (the real control plane
has Kueue's CRDs only; the test bed has no Kueue unless a test installs its simulator):
nobody suspends or admits them, so a job submitted suspended stays so until resumed by
hand, and one submitted running runs. The same on both servers."""

from __future__ import annotations

import pytest
from conformance_support import Cluster, until, wait_on

from kf_trainer_core.client import AsyncTrainerClient, TrainerClient
from kf_trainer_core.cluster.status import JobState
from kf_trainer_core.errors import TrainJobTimeoutError
from kf_trainer_core.spec import QueueName, Suspend

QUEUE = "kueue.x-k8s.io/queue-name"


@pytest.mark.parametrize("face", ["sync", "async"])
async def test_suspended_queue_job_waits_until_resumed_by_hand(
    controllers: Cluster, face: str, client: TrainerClient, aclient: AsyncTrainerClient
) -> None:
    name = client.submit(controllers.spec("succeed", QueueName("team-q"), Suspend())).job.name
    job = client.wait_for_job_status(name, "Suspended", timeout=60)
    assert job.labels[QUEUE] == "team-q"
    assert controllers.owned("pods") == []
    # No Kueue controller admits it: a wait times out, saying it is suspended.
    with pytest.raises(TrainJobTimeoutError, match="Suspended"):
        await wait_on(face, client, aclient, name, timeout=2)
    client.resume_job(name)
    job, _ = client.wait(name, timeout=120)
    assert job.status is JobState.COMPLETE
    assert job.labels[QUEUE] == "team-q"


def test_queue_job_not_suspended_runs_at_once(client: TrainerClient, controllers: Cluster) -> None:
    name = client.submit(controllers.spec("hold", QueueName("team-q"), nodes=2)).job.name
    job = client.wait_for_job_status(name, "Running", timeout=60)
    assert job.status is JobState.RUNNING
    until(lambda: len(controllers.owned("pods")) == 2, what="two pods, unadmitted")
    # Nothing suspended it on the way.
    assert not any(
        c["type"] == "Suspended" and c["status"] == "True" for c in client.get_job(name).conditions
    )


def test_list_selects_jobs_by_queue(client: TrainerClient, cluster: Cluster) -> None:
    a = client.submit(cluster.spec("hold", QueueName("qa"), Suspend())).job.name
    b = client.submit(cluster.spec("hold", QueueName("qb"), Suspend())).job.name
    client.submit(cluster.spec("hold", Suspend()))
    assert [j.name for j in client.list_jobs(label_selector=f"{QUEUE}=qa", page_size=1)] == [a]
    assert {j.name for j in client.list_jobs(label_selector=QUEUE)} == {a, b}
    assert len(client.list_jobs(label_selector=f"!{QUEUE}")) == 1
