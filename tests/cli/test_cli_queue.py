"""``kf-trainer`` shows why a job Kueue holds is waiting (queue, position, the pending
message) in ``jobs get`` and in ``jobs wait``'s progress lines."""

from __future__ import annotations

import time

import pytest
from cli_support import run_main, scenario, spec

from kf_trainer_core.client import TrainerClient
from kf_trainer_core.cluster.kueue import QUEUE_NAME_LABEL
from kf_trainer_core.testing.server import KubeTestServer


def _queue(kube: KubeTestServer) -> None:
    sim = kube.install_kueue()
    sim.add_cluster_queue("gpus", {"nvidia.com/gpu": 4})
    sim.add_local_queue("default", "team-a", "gpus")


def _said_why(client: TrainerClient, name: str) -> None:
    deadline = time.monotonic() + 15
    while not ((q := client.get_job(name).queue) and q.pending_message):
        assert time.monotonic() < deadline, "Kueue never said why the job waits"
        time.sleep(0.05)


def test_a_queued_job_says_what_it_waits_for(
    kube: KubeTestServer,
    client: TrainerClient,
    where: list[str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    _queue(kube)
    blocker = spec(scenario(preset="never-finish"), labels={QUEUE_NAME_LABEL: "team-a"})
    blocker["trainer"]["resources_per_node"] = {"gpu": 4}  # the queue's 4 GPUs, held
    client.wait(client.submit(blocker).job.name, "Running", timeout=30)
    job = spec(labels={QUEUE_NAME_LABEL: "team-a"})
    job["trainer"]["resources_per_node"] = {"gpu": 4}
    name = client.submit(job).job.name
    _said_why(client, name)

    got = run_main(capsys, "jobs", "get", name, *where)
    assert got.code == 0, got.err
    queue_line = next(line for line in got.out.splitlines() if line.startswith("Queue:"))
    assert "queued in team-a" in queue_line
    assert "insufficient unused quota for nvidia.com/gpu" in queue_line

    waited = run_main(capsys, "jobs", "wait", name, "--timeout", "1", *where)
    assert waited.code == 5  # timed out, still queued
    assert "queued in team-a" in waited.out


def test_a_job_kueue_can_never_admit_fails_the_wait_at_once(
    kube: KubeTestServer,
    client: TrainerClient,
    where: list[str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    _queue(kube)
    job = spec(labels={QUEUE_NAME_LABEL: "team-a"})
    job["trainer"]["resources_per_node"] = {"gpu": 8}  # more than the queue ever has
    name = client.submit(job).job.name

    waited = run_main(capsys, "jobs", "wait", name, "--timeout", "600", *where)
    assert waited.code == 1  # failed, not timed out
    assert f"{name} can never be admitted by Kueue" in waited.err
    assert "asks for 8 nvidia.com/gpu, more than the maximum capacity of 4" in waited.err
    got = run_main(capsys, "jobs", "get", name, *where)
    queue_line = next(line for line in got.out.splitlines() if line.startswith("Queue:"))
    assert "> maximum capacity (4)" in queue_line
