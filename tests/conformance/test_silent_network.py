"""Waits outlive a network that goes silent (issue 33, finding 5), on both servers,
through a TCP fault proxy (``kf_trainer_core.testing.netfaults``): the watch's path is
black-holed — sockets open, no byte either way — while the job completes; once the
network is back, the sync wait, the async wait and ``kf-trainer jobs wait`` return the
finished job within :data:`AFTER_HEAL` seconds.

Before, a watch's read was allowed its whole server timeout plus 30 s (a total, not an
idle timeout: ~25 s after the heal here, an hour with ``watch_timeout=3600``) and a
sync request had no read timeout at all under ``kubernetes`` 30 (a float
``_request_timeout`` means none there): the sync wait and the command never returned.
The Airflow trigger meets the same black-hole in ``tests/airflow/test_trigger_network.py``,
log follows in ``tests/client/test_log_follow_silence.py``."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conformance_support import FAST, Cluster

from kf_trainer_core.backends.kubernetes.sockets import KEEPALIVE_IDLE
from kf_trainer_core.backends.kubernetes.transport import AsyncTransport
from kf_trainer_core.client import AsyncTrainerClient, TrainerClient
from kf_trainer_core.cluster.status import JobState
from kf_trainer_core.k8s.calls import OpenWatch
from kf_trainer_core.k8s.errors import ApiError
from kf_trainer_core.k8s.resources import TRAINJOBS
from kf_trainer_core.k8s.retry import RetryPolicy
from kf_trainer_core.spec import Suspend
from kf_trainer_core.testing.netfaults import FaultProxy

#: The idle and request timeouts of these tests (seconds): small, so that a dead
#: connection is found in seconds, not in the default minute.
IDLE = 3
SETTINGS = {"watch_timeout": IDLE, "request_timeout": IDLE, "poll_interval": 0.2}
#: How soon after the network comes back a wait must have returned: a generous bound on
#: what the design allows (a stalled reconnect's connect timeout, one back-off step, a
#: list and the final reads: ~5 s), well under what the old read timeout allowed.
AFTER_HEAL = 20.0
SCRIPT = shutil.which("kf-trainer", path=str(Path(sys.executable).parent)) or "kf-trainer"


@pytest.fixture
def proxy(cluster: Cluster) -> Iterator[FaultProxy]:
    with FaultProxy(cluster.upstream) as p:
        yield p


def _watching(calls: list[Any]) -> bool:
    return any(isinstance(c, OpenWatch) and c.resource == TRAINJOBS for c in calls)


async def _until(check: Any, what: str, timeout: float = 60) -> None:
    end = time.monotonic() + timeout
    while not await asyncio.to_thread(check):
        if time.monotonic() > end:
            pytest.fail(f"{what} not reached in {timeout} s")
        await asyncio.sleep(0.1)


async def _cli_wait(name: str, kubeconfig: Path, seen: asyncio.Event) -> tuple[int, str, str]:
    """``kf-trainer jobs wait NAME`` through the proxy; ``seen`` is set once its progress
    says the job's state (its informer has listed: the watch opens next)."""
    backend = json.dumps({"backend": "kubernetes", "kubeconfig": str(kubeconfig), **SETTINGS})
    env = {k: v for k, v in os.environ.items() if not k.startswith("KF_TRAINER_")}
    proc = await asyncio.create_subprocess_exec(
        SCRIPT,
        *("jobs", "wait", name, "--timeout", "240"),
        env={**env, "KF_TRAINER_BACKEND": backend},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    assert proc.stderr is not None
    out: list[str] = []
    while line := (await proc.stdout.readline()).decode():
        out.append(line)
        if "Suspended" in line or "Running" in line:
            seen.set()
    err = (await proc.stderr.read()).decode()
    return await proc.wait(), "".join(out), err


async def test_waits_notice_a_completion_hidden_by_a_black_hole(
    controllers: Cluster, proxy: FaultProxy, tmp_path: Path
) -> None:
    via = controllers.through(proxy, tmp_path / "proxied")
    config = via.config(**SETTINGS)
    direct = TrainerClient(controllers.config(), retry=FAST)
    # Created suspended, resumed once every waiter watches: however long the waiters
    # take to start (the CLI on a loaded machine), the job completes inside the hole.
    spec = controllers.spec("slow", seconds=15).with_options(Suspend())
    name = direct.submit(spec).job.name
    sync_calls: list[Any] = []
    async_calls: list[Any] = []
    client = TrainerClient(config, retry=FAST, request_hook=sync_calls.append)
    aclient = AsyncTrainerClient(config, retry=FAST, request_hook=async_calls.append)
    returned: dict[str, float] = {}

    async def timed(face: str, work: Any) -> Any:
        result = await work
        returned[face] = time.monotonic()
        return result

    cli_running = asyncio.Event()
    waits = {
        "sync": asyncio.create_task(
            timed("sync", asyncio.to_thread(client.wait, name, timeout=240))
        ),
        "async": asyncio.create_task(timed("async", aclient.wait(name, timeout=240))),
        "cli": asyncio.create_task(timed("cli", _cli_wait(name, via.kubeconfig, cli_running))),
    }
    try:
        await _until(lambda: _watching(sync_calls) and _watching(async_calls), "both watches")
        await asyncio.wait_for(cli_running.wait(), 120)
        direct.resume_job(name)
        await _until(lambda: direct.get_job(name).status is JobState.RUNNING, "running")
        assert direct.get_job(name).status is JobState.RUNNING, "the job ended too soon"
        proxy.blackhole()
        await asyncio.to_thread(direct.wait, name, timeout=120)  # completes in the hole
        assert not returned, f"{sorted(returned)} heard through the hole"
        proxy.heal()
        healed = time.monotonic()
        done, _ = await asyncio.wait(waits.values(), timeout=AFTER_HEAL + 30)
        delays = {face: round(at - healed, 1) for face, at in returned.items()}
        print(f"{controllers.kind}: returned after the heal (s): {delays}")
        assert len(done) == len(waits), f"still waiting {AFTER_HEAL + 30} s after the heal"
        assert all(d <= AFTER_HEAL for d in delays.values()), delays
        assert waits["sync"].result()[0].status is JobState.COMPLETE
        assert (await waits["async"])[0].status is JobState.COMPLETE
        code, out, err = waits["cli"].result()
        assert code == 0, err
        assert f"{name}: Complete" in out
    finally:
        for task in waits.values():
            task.cancel()
        client.close()
        await aclient.close()
        direct.close()


def test_clients_drop_connections_that_lived_through_a_dead_path(
    cluster: Cluster, proxy: FaultProxy, tmp_path: Path
) -> None:
    # A pooled connection that lived through the hole hears nothing: a request sent
    # down it waits out the whole request timeout. Once any connection to the cluster
    # timed out, the pooled ones are dropped instead. And a try is one try (urllib3, the
    # sync transport of old, repeated each timed-out one three times unseen). The two
    # clients share the process's connections to the cluster: the timed-out try may
    # have gone down the pooled one.
    config = cluster.through(proxy, tmp_path / "proxied").config(**SETTINGS)
    with (
        TrainerClient(config, retry=FAST) as pooled,
        TrainerClient(config, retry=RetryPolicy(attempts=1)) as other,
    ):
        name = pooled.submit(cluster.spec("hold")).job.name  # its connection stays pooled
        proxy.blackhole()
        before = len(proxy.connections)
        with pytest.raises(ApiError, match="timed out"):
            other.get_job(name)  # another client times out: the path is dead
        assert len(proxy.connections) - before <= 1  # one try, at most one connection
        proxy.heal()
        assert pooled.get_job(name).name == name
        assert proxy.dead_reused() == 0


async def test_the_transport_turns_tcp_keepalive_on(cluster: Cluster) -> None:
    # A peer that vanished (a crashed node, a path gone down) is found by the kernel
    # within about a minute of silence, on every connection (both clients share the one
    # transport).
    config = cluster.config()
    watch = OpenWatch(TRAINJOBS, cluster.namespace, None, timeout_seconds=5)
    transport = await AsyncTransport.create(config)
    astream = await transport.open_stream(watch)
    try:
        _assert_keepalive(astream.response.connection.transport.get_extra_info("socket"))
    finally:
        astream.close()
        await transport.close()


def _assert_keepalive(sock: Any) -> None:
    assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
    if hasattr(socket, "TCP_KEEPIDLE"):
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == KEEPALIVE_IDLE
