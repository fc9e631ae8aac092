"""Following a step's log while the client does other work, and across reconnects when
the node's clock is not the client's (issue 14, items 4 and 5). Over real HTTP against
the test server, with both clients."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest
from test_client_sync import spec

from kf_trainer_core.client import AsyncTrainerClient, TrainerClient
from kf_trainer_core.cluster.status import JobState
from kf_trainer_core.testing.server import KubeTestServer

LINES = [f"step {i:02d} loss={1 / (i + 1):.4f}" for i in range(16)]


def _scenario(duration: float) -> str:
    return json.dumps({"preset": "success", "duration": duration, "logs": LINES})


def test_sync_follow_survives_other_calls_on_the_same_client(client: TrainerClient) -> None:
    # Each call closed every stream of the client's driver, the follower's included:
    # the next line then failed with "'NoneType' object has no attribute 'readline'".
    name = client.submit(spec(_scenario(1.5))).job.name
    lines = client.get_job_logs(name, follow=True)
    got = [next(lines)]
    assert client.get_job(name).name == name  # the same client, the same thread
    assert client.list_jobs()
    for line in lines:
        got.append(line)
        client.get_job_events(name)  # interleaved with every line
    assert got == LINES
    assert client.wait(name, timeout=30)[0].status is JobState.COMPLETE


async def test_async_follow_survives_other_calls_on_the_same_client(
    aclient: AsyncTrainerClient,
) -> None:
    name = (await aclient.submit(spec(_scenario(1.5)))).job.name
    got: list[str] = []
    async for line in aclient.get_job_logs(name, follow=True):
        got.append(line)
        await aclient.get_job(name)
        await aclient.get_job_events(name)
    assert got == LINES


@pytest.mark.parametrize("skew", [120.0, -120.0])
def test_sync_follow_resumes_from_the_nodes_clock(
    client: TrainerClient, server: KubeTestServer, skew: float
) -> None:
    # The resume point used to be "seconds before now" by the client's clock; with the
    # node 120 s ahead the kubelet started after lines never received (8 of 16 lost).
    server.faults.skew_node_clock(skew)
    # Each (re)connect takes a while, as through a busy apiserver: lines are written
    # between the drop and the resume.
    server.faults.latency(1.5, verb="get", resource="pods/log")
    name = client.submit(spec(_scenario(6.0))).job.name
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.extend(client.get_job_logs(name, follow=True)))
    reader.start()
    dropped = 0
    deadline = time.monotonic() + 30
    while reader.is_alive() and time.monotonic() < deadline and dropped < 4:
        time.sleep(0.5)
        dropped += server.faults.drop_log_streams()
    reader.join(30)
    assert not reader.is_alive()
    assert dropped >= 2  # the follower really reconnected
    assert got == LINES  # nothing lost, nothing repeated


async def test_async_follow_resumes_from_the_nodes_clock(
    aclient: AsyncTrainerClient, server: KubeTestServer
) -> None:
    server.faults.skew_node_clock(120)
    server.faults.latency(1.5, verb="get", resource="pods/log")
    name = (await aclient.submit(spec(_scenario(6.0)))).job.name
    got: list[str] = []

    async def follow() -> None:
        async for line in aclient.get_job_logs(name, follow=True):
            got.append(line)

    task = asyncio.create_task(follow())
    dropped = 0
    while not task.done() and dropped < 4:
        await asyncio.sleep(0.5)
        dropped += await asyncio.to_thread(server.faults.drop_log_streams)
    await asyncio.wait_for(task, 30)
    assert dropped >= 2
    assert got == LINES


def test_a_resumed_read_skips_exactly_what_was_emitted() -> None:
    from kf_trainer_core.programs.logs import _LogCursor

    t1, t2 = "2026-01-01T00:00:01.000000000Z", "2026-01-01T00:00:02.000000000Z"
    cursor = _LogCursor()
    cursor.start_pass()
    assert [cursor.accept(f"{t} {x}") for t, x in [(t1, "a"), (t1, "b"), (t2, "c")]] == [
        "a",
        "b",
        "c",
    ]
    # Resumed from t2 (inclusive): "c" again, then two new lines sharing its stamp —
    # both new (the old bookkeeping dropped the second one).
    cursor.start_pass()
    got = [cursor.accept(f"{t} {x}") for t, x in [(t1, "b"), (t2, "c"), (t2, "d"), (t2, "e")]]
    assert got == [None, None, "d", "e"]
