"""Submit, idempotency under concurrent submitters, list with small pages and an expired
continue token, get and steps: the same behaviour on the test bed and the real server."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from conformance_support import Cluster, until

from kf_trainer_core.client import AsyncTrainerClient, TrainerClient
from kf_trainer_core.cluster.status import JobState
from kf_trainer_core.errors import SpecConflictError, TrainJobNotFoundError
from kf_trainer_core.k8s.calls import ListObjects
from kf_trainer_core.manifest.builder import IDENTITY_LABEL
from kf_trainer_core.spec import Labels, Name


def test_submit_creates_a_job_the_server_keeps(client: TrainerClient, cluster: Cluster) -> None:
    sub = client.submit(cluster.spec("hold", nodes=2))
    assert sub.created
    job = client.get_job(sub.job.name)
    assert job.name == sub.job.name
    assert job.namespace == cluster.namespace
    assert job.runtime == "torch-distributed"
    assert job.runtime_kind == "ClusterTrainingRuntime"
    assert job.num_nodes == 2
    assert job.uid == sub.job.uid
    assert job.labels["app.kubernetes.io/managed-by"] == "kf-trainer-suite"
    assert job.spec_hash == sub.job.spec_hash
    assert job.status in (JobState.CREATED, JobState.RUNNING)


def test_same_name_same_spec_is_adopted(client: TrainerClient, cluster: Cluster) -> None:
    first = client.submit(cluster.spec("hold", Name("fixed")))
    again = client.submit(cluster.spec("hold", Name("fixed")))
    assert first.created
    assert not again.created
    assert again.job.uid == first.job.uid


def test_same_name_other_spec_is_a_conflict(client: TrainerClient, cluster: Cluster) -> None:
    client.submit(cluster.spec("hold", Name("fixed")))
    with pytest.raises(SpecConflictError, match="different spec"):
        client.submit(cluster.spec("hold", Name("fixed"), nodes=3))


@pytest.mark.parametrize("submitters", [2, 8])
def test_concurrent_submitters_of_one_identity_make_one_job(
    cluster: Cluster, client: TrainerClient, submitters: int
) -> None:
    ident = ("dag", "train", f"run-{submitters}", -1)
    spec = cluster.spec("hold")

    def submit(_: int) -> Any:
        with TrainerClient(cluster.config()) as own:
            return own.submit(spec, identity=ident)

    with ThreadPoolExecutor(submitters) as pool:
        results = list(pool.map(submit, range(submitters)))
    assert len({r.job.name for r in results}) == 1
    assert sum(r.created for r in results) == 1
    jobs = client.list_jobs()
    assert [j.name for j in jobs] == [results[0].job.name]
    assert jobs[0].labels[IDENTITY_LABEL]


async def test_concurrent_async_submitters_of_one_identity_make_one_job(
    cluster: Cluster, aclient: AsyncTrainerClient
) -> None:
    ident = ("flow", "task", "run-a")
    spec = cluster.spec("hold")
    results = await asyncio.gather(*(aclient.submit(spec, identity=ident) for _ in range(6)))
    assert len({r.job.name for r in results}) == 1
    assert sum(r.created for r in results) == 1
    assert len(await aclient.list_jobs()) == 1


def test_other_identities_make_other_jobs(client: TrainerClient, cluster: Cluster) -> None:
    names = {client.submit(cluster.spec("hold"), identity=("d", "t", i)).job.name for i in range(3)}
    assert len(names) == 3
    assert {j.name for j in client.list_jobs()} == names


@pytest.mark.parametrize("page_size", [1, 2, 5])
def test_list_reads_every_page(
    client: TrainerClient, cluster: Cluster, calls: list[Any], page_size: int
) -> None:
    names = {client.submit(cluster.spec("hold", Name(f"job-{i}"))).job.name for i in range(5)}
    calls.clear()
    jobs = client.list_jobs(page_size=page_size)
    assert {j.name for j in jobs} == names
    assert len(jobs) == 5
    lists = [c for c in calls if isinstance(c, ListObjects) and "trainjobs" in repr(c)]
    assert len(lists) >= -(-5 // page_size)


async def test_async_list_reads_every_page(aclient: AsyncTrainerClient, cluster: Cluster) -> None:
    for i in range(4):
        await aclient.submit(cluster.spec("hold", Name(f"job-{i}")))
    jobs = await aclient.list_jobs(page_size=1)
    assert sorted(j.name for j in jobs) == [f"job-{i}" for i in range(4)]


def test_list_by_label_and_runtime(client: TrainerClient, cluster: Cluster) -> None:
    client.submit(cluster.spec("hold", Name("blue"), Labels({"team": "blue"})))
    client.submit(cluster.spec("hold", Name("red"), Labels({"team": "red"})))
    assert [j.name for j in client.list_jobs(label_selector="team=blue")] == ["blue"]
    assert client.list_jobs(runtime="jax-distributed") == []
    assert len(client.list_jobs(runtime="torch-distributed")) == 2


@pytest.mark.parametrize("face", ["sync", "async"])
async def test_list_survives_an_expired_continue_token(
    cluster: Cluster, face: str, calls: list[Any]
) -> None:
    seen: list[Any] = []
    expired = False

    def hook(call: Any) -> None:
        nonlocal expired
        seen.append(call)
        lists = [c for c in seen if isinstance(c, ListObjects)]
        # Before the second page is asked for: its token must be expired by then.
        if not expired and len(lists) == 2:
            expired = True
            cluster.compact()

    with TrainerClient(cluster.config()) as c:
        for i in range(5):
            c.submit(cluster.spec("hold", Name(f"job-{i}")))
    if face == "sync":
        with TrainerClient(cluster.config(), request_hook=hook) as c:
            jobs = c.list_jobs(page_size=2)
    else:
        async with AsyncTrainerClient(cluster.config(), request_hook=hook) as ac:
            jobs = await ac.list_jobs(page_size=2)
    assert expired
    # Three pages, and the list started again after the 410 on the second one.
    assert len([c for c in seen if isinstance(c, ListObjects)]) > 3
    assert sorted(j.name for j in jobs) == [f"job-{i}" for i in range(5)]


def test_get_missing_job(client: TrainerClient) -> None:
    with pytest.raises(TrainJobNotFoundError, match="nope"):
        client.get_job("nope")


def test_steps_and_pod_states_while_running(client: TrainerClient, controllers: Cluster) -> None:
    name = client.submit(controllers.spec("hold", nodes=2)).job.name
    job = until(
        lambda: (
            (j := client.get_job(name)).status is JobState.RUNNING
            and len(j.steps) == 2
            and all(s.status == "Running" for s in j.steps)
            and j
        ),
        what="two running steps",
    )
    assert [s.name for s in job.steps] == ["node-0", "node-1"]
    assert job.num_nodes == 2
    assert all(s.pod_name for s in job.steps)
    assert job.step("node-1") is not None


def test_steps_after_success(client: TrainerClient, controllers: Cluster) -> None:
    name = client.submit(controllers.spec("succeed", nodes=2)).job.name
    job = until(
        lambda: (j := client.get_job(name)).status is JobState.COMPLETE and j,
        what="Complete",
    )
    assert [s.name for s in job.steps] == ["node-0", "node-1"]
    assert all(s.status == "Succeeded" for s in job.steps)
    assert job.completion_timestamp is not None
    assert job.failure is None


def test_list_shows_steps(client: TrainerClient, controllers: Cluster) -> None:
    name = client.submit(controllers.spec("hold", nodes=2)).job.name
    until(lambda: len(client.get_job(name).steps) == 2, what="steps")
    (job,) = client.list_jobs()
    assert job.name == name
    assert len(job.steps) == 2
