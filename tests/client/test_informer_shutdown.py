"""Stopping the informers (at interpreter exit, or ``shutdown_informers()``) closes their
watches from outside: the read that the close breaks is the informer being stopped, not
a lost connection, and says nothing. Before, every script that had waited for a job and
logged at INFO ended with ``watch on trainjobs lost (cannot reach the API server:
ProtocolError: Response ended prematurely. Fix: check that the API server ... is
reachable ...)`` for each watch (seen in a KFP component's log on a real cluster)."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from train_functions import train_linear

from kf_trainer_core.client import TrainerClient
from kf_trainer_core.cluster.status import JobState
from kf_trainer_core.programs import informer as informer_mod
from kf_trainer_core.spec import Annotations, CustomTrainer, TrainJobSpec
from kf_trainer_core.testing.scenarios import SCENARIO_ANNOTATION


def test_stopping_the_informers_logs_no_lost_watch(
    client: TrainerClient, caplog: pytest.LogCaptureFixture
) -> None:
    spec = TrainJobSpec(
        trainer=CustomTrainer(train_linear),
        options=[Annotations({SCENARIO_ANNOTATION: "success"})],
    )
    name = client.submit(spec).job.name
    job, _ = client.wait(name)
    assert job.status is JobState.COMPLETE
    # The wait's informers linger, each blocked in its watch's read.
    assert informer_mod.open_watch_count() >= 1
    with caplog.at_level(logging.INFO, logger="kf_trainer_core.programs.informer"):
        informer_mod.shutdown_informers()
    said: list[Any] = [r.getMessage() for r in caplog.records]
    assert not [m for m in said if "lost" in m or "cannot reach" in m], said
    assert informer_mod.open_watch_count() == 0
