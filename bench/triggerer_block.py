"""A badly-written trigger for checking that ``tests/airflow/test_triggerer_load.py`` can
fail: ours, with a synchronous sleep of ``KF_BENCH_BLOCK`` seconds on the event loop
before it waits. Its own module, as light as ours, so the triggerer imports nothing
else with it."""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import TriggerEvent

from kf_trainer_airflow.triggers.trainjob import TrainJobTrigger


class BlockingTrainJobTrigger(TrainJobTrigger):
    """``TrainJobTrigger`` that first blocks the loop (the defect on purpose)."""

    def serialize(self) -> tuple[str, dict[str, Any]]:
        _, kwargs = super().serialize()
        return f"{__name__}.BlockingTrainJobTrigger", kwargs

    async def run(self) -> AsyncIterator[TriggerEvent]:
        time.sleep(float(os.environ.get("KF_BENCH_BLOCK", "0")))
        async for event in super().run():
            yield event
