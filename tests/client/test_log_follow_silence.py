"""Log follows outlive a network that goes silent (issue 33, finding 5), on the test bed
(kwok's pods on the real control plane serve no log), through a TCP fault proxy: the
sync and async clients' follows and ``kf-trainer jobs logs -f`` end once the network is
back, with every line once. Before, a followed log had no read timeout at all: each
stayed blocked in a socket read for good. Resets, 401s and a dripping connection are
ridden out the same way."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from test_client_sync import spec

from kf_trainer_core.client import AsyncTrainerClient, TrainerClient
from kf_trainer_core.cluster.status import JobState
from kf_trainer_core.config import KubernetesConfig
from kf_trainer_core.k8s.retry import RetryPolicy
from kf_trainer_core.testing.netfaults import FaultProxy, proxied_kubeconfig
from kf_trainer_core.testing.server import KubeTestServer

LINES = [f"step {i:02d} loss={1 / (i + 1):.4f}" for i in range(24)]
#: The idle and request timeouts here: a silent stream is dead after 3 s.
IDLE = 3
SETTINGS = {"watch_timeout": IDLE, "request_timeout": IDLE, "poll_interval": 0.2}
#: How soon after the heal a follow must have ended (see tests/conformance/
#: test_silent_network.py: a stalled reconnect, a back-off step, the last reads).
AFTER_HEAL = 20.0
FAST = RetryPolicy(attempts=6, base=0.05, cap=0.5)
SCRIPT = shutil.which("kf-trainer", path=str(Path(sys.executable).parent)) or "kf-trainer"


def _scenario(duration: float) -> str:
    return json.dumps({"preset": "success", "duration": duration, "logs": LINES})


@pytest.fixture
def proxy(server: KubeTestServer) -> Iterator[FaultProxy]:
    url = urlsplit(server.url)
    with FaultProxy((url.hostname or "127.0.0.1", url.port or 80)) as p:
        yield p


@pytest.fixture
def proxied(proxy: FaultProxy, kubeconfig_path: Path, tmp_path: Path) -> Path:
    return proxied_kubeconfig(kubeconfig_path, tmp_path / "proxied", proxy)


async def _cli_follow(name: str, kubeconfig: Path, got: list[str]) -> tuple[int, str]:
    """``kf-trainer jobs logs NAME -f`` through the proxy; its lines land in ``got``."""
    backend = json.dumps({"backend": "kubernetes", "kubeconfig": str(kubeconfig), **SETTINGS})
    env = {k: v for k, v in os.environ.items() if not k.startswith("KF_TRAINER_")}
    proc = await asyncio.create_subprocess_exec(
        SCRIPT,
        *("jobs", "logs", name, "-f"),
        env={**env, "KF_TRAINER_BACKEND": backend},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    assert proc.stderr is not None
    while line := (await proc.stdout.readline()).decode():
        got.append(line.rstrip("\n"))
    return await proc.wait(), (await proc.stderr.read()).decode()


async def test_follows_end_with_every_line_after_a_black_hole(
    client: TrainerClient, proxy: FaultProxy, proxied: Path
) -> None:
    config = KubernetesConfig(kubeconfig=str(proxied), **SETTINGS)
    name = client.submit(spec(_scenario(8.0))).job.name
    follower = TrainerClient(config, retry=FAST)
    afollower = AsyncTrainerClient(config, retry=FAST)
    got: dict[str, list[str]] = {"sync": [], "async": [], "cli": []}
    ended: dict[str, float] = {}

    async def timed(face: str, work: object) -> object:
        result = await work  # type: ignore[misc]
        ended[face] = time.monotonic()
        return result

    async def async_follow() -> None:
        async for line in afollower.get_job_logs(name, follow=True):
            got["async"].append(line)

    def sync_follow() -> None:
        got["sync"].extend(follower.get_job_logs(name, follow=True))

    follows = {
        "sync": asyncio.create_task(timed("sync", asyncio.to_thread(sync_follow))),
        "async": asyncio.create_task(timed("async", async_follow())),
        "cli": asyncio.create_task(timed("cli", _cli_follow(name, proxied, got["cli"]))),
    }
    try:
        end = time.monotonic() + 30
        while min(len(lines) for lines in got.values()) < 2:
            assert time.monotonic() < end, f"no lines: {got}"
            assert not any(task.done() for task in follows.values()), f"a follow ended: {got}"
            await asyncio.sleep(0.05)
        assert client.get_job(name).status is JobState.RUNNING, "the job ended too soon"
        proxy.blackhole()
        await asyncio.to_thread(client.wait, name, timeout=60)  # the log ends in the hole
        assert not ended, f"{sorted(ended)} ended in the hole"
        proxy.heal()
        healed = time.monotonic()
        done, _ = await asyncio.wait(follows.values(), timeout=AFTER_HEAL + 30)
        delays = {face: round(at - healed, 1) for face, at in ended.items()}
        print(f"log follows ended after the heal (s): {delays}")
        assert len(done) == len(follows), f"still following {AFTER_HEAL + 30} s after the heal"
        assert all(d <= AFTER_HEAL for d in delays.values()), delays
        code, err = follows["cli"].result()  # type: ignore[misc]
        assert code == 0, err
        assert got == {"sync": LINES, "async": LINES, "cli": LINES}
    finally:
        for task in follows.values():
            task.cancel()
        follower.close()
        await afollower.close()


def test_follow_and_wait_ride_out_drips_resets_and_401s(
    client: TrainerClient, proxy: FaultProxy, proxied: Path
) -> None:
    config = KubernetesConfig(kubeconfig=str(proxied), **SETTINGS)
    name = client.submit(spec(_scenario(6.0))).job.name
    proxy.drip(chunk=64, interval=0.005)  # lines and events cut anywhere
    with TrainerClient(config, retry=FAST) as through:
        lines = through.get_job_logs(name, follow=True)
        got = [next(lines) for _ in range(4)]
        assert proxy.reset() >= 1  # the follow's stream (and any pooled connection) reset
        got += [next(lines) for _ in range(4)]
        proxy.unauthorized(1)  # every connection closed; the next one refused
        got += list(lines)
        assert got == LINES
        job, _ = through.wait(name, timeout=30)
        assert job.status is JobState.COMPLETE
    assert any(c.refused for c in proxy.connections)  # a 401 was met (and ridden out)
