"""Stopping the informers (at interpreter exit, or ``shutdown_informers()``) closes their
watches from outside: the read that the close breaks is the informer being stopped, not
a lost connection, and says nothing. Before, every script that had waited for a job and
logged at INFO ended with ``watch on trainjobs lost (cannot reach the API server:
ProtocolError: Response ended prematurely. Fix: check that the API server ... is
reachable ...)`` for each watch (seen in a KFP component's log on a real cluster)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from train_functions import train_linear

from kf_trainer_core.client import AsyncTrainerClient, TrainerClient
from kf_trainer_core.cluster.status import JobState
from kf_trainer_core.programs import informer as informer_mod
from kf_trainer_core.spec import Annotations, CustomTrainer, TrainJobSpec
from kf_trainer_core.testing.pytest_plugin import fresh_server
from kf_trainer_core.testing.scenarios import SCENARIO_ANNOTATION
from kf_trainer_core.testing.server import KubeTestServer


def scenario_spec(scenario: str) -> TrainJobSpec:
    return TrainJobSpec(
        trainer=CustomTrainer(train_linear),
        options=[Annotations({SCENARIO_ANNOTATION: scenario})],
    )


def test_stopping_the_informers_logs_no_lost_watch(
    client: TrainerClient, caplog: pytest.LogCaptureFixture
) -> None:
    name = client.submit(scenario_spec("success")).job.name
    job, _ = client.wait(name)
    assert job.status is JobState.COMPLETE
    # The wait's informers linger, each blocked in its watch's read.
    assert informer_mod.open_watch_count() >= 1
    with caplog.at_level(logging.INFO, logger="kf_trainer_core.programs.informer"):
        informer_mod.shutdown_informers()
    said: list[Any] = [r.getMessage() for r in caplog.records]
    assert not [m for m in said if "lost" in m or "cannot reach" in m], said
    assert informer_mod.open_watch_count() == 0


def test_a_fresh_server_has_no_watch_an_earlier_test_left(
    client: TrainerClient, server: KubeTestServer
) -> None:
    """The ``kube`` fixture stops the watches that linger after earlier tests' waits:
    one left open re-listed the next test's objects and, when that test required a
    token, answered its request log with 401s (seen in CI, KFP's secret-token test)."""
    name = client.submit(scenario_spec("success")).job.name
    client.wait(name)
    assert informer_mod.open_watch_count() >= 1
    fresh_server(server)
    assert informer_mod.open_watch_count() == 0


def watch_tasks() -> set[asyncio.Task[None]]:
    return {
        found._task
        for registry in informer_mod._registries.values()
        for found in registry.values()
        if found._task is not None
    }


async def test_stopping_lingering_watches_keeps_those_a_wait_uses(
    aclient: AsyncTrainerClient,
) -> None:
    name = (await aclient.submit(scenario_spec("never-finish"))).job.name
    waiting = asyncio.create_task(aclient.wait(name, timeout=60))
    try:
        while informer_mod.open_watch_count() < 2:  # the jobs' and the events' watches
            await asyncio.sleep(0.02)
        before = watch_tasks()
        informer_mod.shutdown_informers(lingering_only=True)
        await asyncio.sleep(0.2)  # a stopped informer ends at the loop's next turn
        # The same loops still run (a wait whose informer stopped would start another).
        assert watch_tasks() == before
        assert not waiting.done()
    finally:
        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)
