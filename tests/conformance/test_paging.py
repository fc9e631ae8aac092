"""Listing in a namespace the suite shares with others: jobs not submitted by the suite
(foreign jobs), small pages, label selectors and identity filters, an expired continue
token, and the pods paged beside the jobs. The same answers on the test bed and the real
kube-apiserver."""

from __future__ import annotations

from typing import Any

import pytest
from conformance_support import Cluster, until
from kubernetes import client as k8s

from kf_trainer_core.client import AsyncTrainerClient, TrainerClient
from kf_trainer_core.k8s.calls import ListObjects
from kf_trainer_core.manifest.builder import IDENTITY_LABEL
from kf_trainer_core.manifest.selectors import identity_selector
from kf_trainer_core.spec import Labels, Name

GROUP, VERSION, PLURAL = "trainer.kubeflow.org", "v1alpha1", "trainjobs"
MANAGED = "app.kubernetes.io/managed-by=kf-trainer-suite"


def foreign(cluster: Cluster, name: str, runtime: str = "torch-distributed", **labels: str) -> None:
    """A TrainJob another tool made (suspended: no pods), written with the plain client."""
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TrainJob",
        "metadata": {"name": name, "labels": labels},
        "spec": {"runtimeRef": {"name": runtime}, "suspend": True, "trainer": {"numNodes": 3}},
    }
    k8s.CustomObjectsApi(cluster.api()).create_namespaced_custom_object(
        GROUP, VERSION, cluster.namespace, PLURAL, body
    )


def mixed(client: TrainerClient, cluster: Cluster) -> tuple[set[str], set[str]]:
    """Three of the suite's jobs (suspended) and four foreign ones."""
    ours = {
        client.submit(cluster.spec("hold", Name(f"ours-{i}"), Labels({"team": "a"}))).job.name
        for i in range(3)
    }
    theirs = {f"theirs-{i}" for i in range(4)}
    for name in sorted(theirs):
        foreign(cluster, name, team="a" if name.endswith("0") else "b")
    return ours, theirs


def trainjob_lists(calls: list[Any]) -> list[Any]:
    return [c for c in calls if isinstance(c, ListObjects) and "trainjobs" in repr(c)]


@pytest.mark.parametrize("page_size", [1, 2, 3, 4, 7, 50])
def test_small_pages_list_foreign_jobs_too(
    client: TrainerClient, cluster: Cluster, calls: list[Any], page_size: int
) -> None:
    ours, theirs = mixed(client, cluster)
    calls.clear()
    jobs = client.list_jobs(page_size=page_size)
    assert sorted(j.name for j in jobs) == sorted(ours | theirs)
    assert len(trainjob_lists(calls)) == -(-7 // page_size)
    by_name = {j.name: j for j in jobs}
    for name in theirs:
        job = by_name[name]
        assert job.spec_hash is None
        assert job.identity is None
        assert job.num_nodes == 3
        assert "app.kubernetes.io/managed-by" not in job.labels


@pytest.mark.parametrize("page_size", [1, 2, 3])
def test_label_selector_with_small_pages(
    client: TrainerClient, cluster: Cluster, page_size: int
) -> None:
    ours, theirs = mixed(client, cluster)
    assert {j.name for j in client.list_jobs(label_selector=MANAGED, page_size=page_size)} == ours
    team_a = {j.name for j in client.list_jobs(label_selector="team=a", page_size=page_size)}
    assert team_a == ours | {"theirs-0"}
    assert {j.name for j in client.list_jobs(label_selector="team!=a", page_size=page_size)} == (
        theirs - {"theirs-0"}
    )
    assert client.list_jobs(label_selector="team=nobody", page_size=page_size) == []


def test_a_foreign_job_is_read_as_it_is(client: TrainerClient, cluster: Cluster) -> None:
    foreign(cluster, "theirs", runtime="jax-distributed", owner="someone")
    job = client.get_job("theirs")
    assert (job.runtime, job.runtime_kind) == ("jax-distributed", "ClusterTrainingRuntime")
    assert job.num_nodes == 3
    assert job.labels == {"owner": "someone"}
    assert job.spec_hash is None
    assert job.identity is None
    assert job.steps == []


def test_runtime_filter_over_pages_with_foreign_jobs(
    client: TrainerClient, cluster: Cluster
) -> None:
    client.submit(cluster.spec("hold", Name("ours")))
    foreign(cluster, "jax-0", runtime="jax-distributed")
    foreign(cluster, "jax-1", runtime="jax-distributed")
    foreign(cluster, "torch-0")
    jax = client.list_jobs(runtime="jax-distributed", page_size=1)
    assert sorted(j.name for j in jax) == ["jax-0", "jax-1"]
    torch = client.list_jobs(runtime="torch-distributed", page_size=1)
    assert sorted(j.name for j in torch) == ["ours", "torch-0"]


def test_identity_filter_lists_every_attempt_of_one_identity(
    client: TrainerClient, cluster: Cluster
) -> None:
    ident = ("dag", "task", "run-1", -1)
    other = ("dag", "task", "run-2", -1)
    mine = client.submit(cluster.spec("hold"), identity=ident).job.name
    theirs = client.submit(cluster.spec("hold"), identity=other).job.name
    foreign(cluster, "foreign")
    found = client.list_jobs(label_selector=identity_selector(ident), page_size=1)
    assert [j.name for j in found] == [mine]
    assert found[0].identity
    assert found[0].labels[IDENTITY_LABEL]
    found = client.list_jobs(label_selector=identity_selector(other), page_size=1)
    assert [j.name for j in found] == [theirs]
    assert found[0].identity != client.get_job(mine).identity


def test_an_empty_namespace_lists_nothing(client: TrainerClient, calls: list[Any]) -> None:
    assert client.list_jobs(page_size=1) == []
    assert len(trainjob_lists(calls)) == 1


@pytest.mark.parametrize("face", ["sync", "async"])
async def test_expired_token_with_a_selector_and_foreign_jobs(cluster: Cluster, face: str) -> None:
    seen: list[Any] = []
    expired = False

    def hook(call: Any) -> None:
        nonlocal expired
        seen.append(call)
        # Before the third page: the token of the second one must have expired.
        if not expired and len(trainjob_lists(seen)) == 3:
            expired = True
            cluster.compact()

    with TrainerClient(cluster.config()) as c:
        ours, _theirs = mixed(c, cluster)
    if face == "sync":
        with TrainerClient(cluster.config(), request_hook=hook) as c:
            jobs = c.list_jobs(label_selector="team=a", page_size=1)
    else:
        async with AsyncTrainerClient(cluster.config(), request_hook=hook) as ac:
            jobs = await ac.list_jobs(label_selector="team=a", page_size=1)
    assert expired
    # Four matching jobs, a page each: the listing restarted after the 410 (no job twice).
    assert len(trainjob_lists(seen)) > 4
    assert sorted(j.name for j in jobs) == sorted(ours | {"theirs-0"})


def test_steps_are_matched_to_their_jobs_across_pod_pages(
    client: TrainerClient, controllers: Cluster
) -> None:
    names = [client.submit(controllers.spec("hold", nodes=n)).job.name for n in (1, 2, 3)]
    until(
        lambda: len(controllers.owned("pods")) >= 6,
        what="six pods",
    )
    jobs = {j.name: j for j in client.list_jobs(page_size=1)}
    for n, name in zip((1, 2, 3), names, strict=True):
        steps = jobs[name].steps
        assert [s.name for s in steps] == [f"node-{i}" for i in range(n)]
        assert all(s.pod_name.startswith(name) for s in steps)
