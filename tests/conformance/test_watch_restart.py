"""A wait outlives its own watch: the API server crashes mid-wait and comes back with
every resourceVersion the client holds expired (410 ``too old resource version`` on
the re-watch). Sync and async waits still return each job once, finished."""

from __future__ import annotations

import asyncio
from typing import Any

from conformance_support import Cluster

from kf_trainer_core.client import AsyncTrainerClient, TrainerClient
from kf_trainer_core.cluster.status import JobState
from kf_trainer_core.k8s.calls import ListObjects, OpenWatch


def _on_trainjobs(calls: list[Any], kind: type) -> int:
    return sum(1 for c in calls if isinstance(c, kind) and c.resource.plural == "trainjobs")


async def test_waits_survive_a_server_restart_that_expires_their_watch(
    controllers: Cluster, client: TrainerClient, aclient: AsyncTrainerClient, calls: list[Any]
) -> None:
    names = [client.submit(controllers.spec("slow", seconds=12)).job.name for _ in range(2)]
    waits = [asyncio.create_task(asyncio.to_thread(client.wait, n, timeout=300)) for n in names]
    waits += [asyncio.create_task(aclient.wait(n, timeout=300)) for n in names]
    # Both informers (the sync client's thread, the async client's task) are watching.
    while _on_trainjobs(calls, OpenWatch) < 2:
        assert not any(w.done() for w in waits), "a wait ended before both watches opened"
        await asyncio.sleep(0.05)
    lists = _on_trainjobs(calls, ListObjects)
    await asyncio.to_thread(controllers.restart_server)
    jobs = [job for job, _ in await asyncio.gather(*waits)]
    assert [j.name for j in jobs] == names + names
    assert all(j.status is JobState.COMPLETE for j in jobs)
    # The re-watches were answered 410 and each informer listed again (a resumed watch
    # would not list).
    assert _on_trainjobs(calls, ListObjects) - lists >= 2
