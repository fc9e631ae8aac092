"""Waits that end together read their jobs' pods together (issue 23, item 6): one
LIST serves every wait that asked while the previous one was in flight, and each wait
still gets its own job's pods and result."""

from __future__ import annotations

import asyncio
import threading

from test_client_sync import spec

from kf_trainer_core.client import AsyncTrainerClient, TrainerClient
from kf_trainer_core.cluster.status import JobState
from kf_trainer_core.spec import Name
from kf_trainer_core.testing.server import KubeTestServer


def _pod_lists(server: KubeTestServer, since: int) -> list[str]:
    return [
        str(r.query.get("labelSelector"))
        for r in server.requests.records[since:]
        if r.resource == "pods" and r.verb == "list"
    ]


def _finished_jobs(client: TrainerClient, count: int, tag: str) -> list[str]:
    """``count`` finished jobs (of one or two nodes)."""
    names: dict[str, int] = {}
    for i in range(count):
        names[client.submit(spec(None, Name(f"pods-{tag}-{i}"), nodes=1 + i % 2)).job.name] = i
    for name in names:
        client.wait(name, timeout=60)
    return list(names)


async def test_concurrent_async_waits_share_their_pod_reads(
    client: TrainerClient, aclient: AsyncTrainerClient, server: KubeTestServer
) -> None:
    names = _finished_jobs(client, 12, "async")
    expected = {n: client.wait(n, timeout=30)[1] for n in names}
    before = len(server.requests.records)
    outs = await asyncio.gather(*(aclient.wait(n, timeout=30) for n in names))
    for name, (job, result) in zip(names, outs, strict=True):
        assert job.name == name
        assert job.status is JobState.COMPLETE
        assert result == expected[name]
        assert job.steps  # its own pods, not another job's
        assert all(step.pod_name.startswith(name + "-") for step in job.steps)
    lists = _pod_lists(server, before)
    assert 1 <= len(lists) < len(names) / 2, lists
    assert any(" in (" in s for s in lists)


def test_concurrent_sync_waits_share_their_pod_reads(
    client: TrainerClient, server: KubeTestServer
) -> None:
    names = _finished_jobs(client, 8, "sync")
    expected = {n: client.wait(n, timeout=30)[1] for n in names}
    before = len(server.requests.records)
    results: dict[str, object] = {}
    start = threading.Barrier(len(names))

    def one(name: str) -> None:
        start.wait()
        results[name] = client.wait(name, timeout=30)[1]

    threads = [threading.Thread(target=one, args=(n,)) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert results == expected
    assert 1 <= len(_pod_lists(server, before)) < len(names)


def test_a_lone_wait_reads_its_pods_with_one_request(
    client: TrainerClient, server: KubeTestServer
) -> None:
    name = client.submit(spec(None)).job.name
    client.wait(name, timeout=60)
    before = len(server.requests.records)
    client.wait(name, timeout=30)
    assert _pod_lists(server, before) == [f"jobset.sigs.k8s.io/jobset-name={name}"]
    # From the API server's watch cache: a consistent list would wait for the cache
    # to catch up with etcd (tens of ms on a server taking writes).
    lists = [r for r in server.requests.records[before:] if r.resource == "pods"]
    assert [r.query.get("resourceVersion") for r in lists] == ["0"]
