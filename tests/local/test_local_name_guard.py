"""On the local backend too, an empty or invalid job name is refused before any call
reaches the state directory (issue 14, item 1): ``cancel_job("")`` used to delete
every job of the namespace."""

from __future__ import annotations

from typing import Any

import pytest
from local_jobs import sleeper, trivial

from kf_trainer_core.client import AsyncTrainerClient, TrainerClient
from kf_trainer_core.cluster.status import JobState
from kf_trainer_core.config import LocalConfig
from kf_trainer_core.errors import InvalidNameError
from kf_trainer_core.spec import CustomTrainer

BAD = ["", "Not_A_Name", "a/b"]


def test_local_client_refuses_bad_names_and_keeps_every_job(config: LocalConfig) -> None:
    calls: list[Any] = []
    with TrainerClient(config, request_hook=calls.append) as client:
        done = client.train(trainer=CustomTrainer(trivial))
        client.wait(done, timeout=60)
        running = client.train(trainer=CustomTrainer(sleeper))
        client.wait_for_job_status(running, "Running", timeout=60)
        attempts = [
            lambda n: client.cancel_job(n),
            lambda n: client.stop_unfinished(n),
            lambda n: client.delete_job(n),
            lambda n: client.suspend_job(n),
            lambda n: client.get_job(n),
            lambda n: client.wait(n, timeout=5),
            lambda n: client.get_job_logs(n, follow=True),
            lambda n: client.get_job_outputs(n),
        ]
        for bad in BAD:
            for attempt in attempts:
                calls.clear()
                with pytest.raises(InvalidNameError, match="Fix: "):
                    attempt(bad)
                assert calls == []
        assert client.get_job(done).status is JobState.COMPLETE
        assert client.get_job(running).status is JobState.RUNNING
        assert client.stop_unfinished(running) == [running]


async def test_local_async_client_refuses_bad_names(config: LocalConfig) -> None:
    calls: list[Any] = []
    async with AsyncTrainerClient(config, request_hook=calls.append) as client:
        done = await client.train(trainer=CustomTrainer(trivial))
        await client.wait(done, timeout=60)
        for bad in BAD:
            calls.clear()
            with pytest.raises(InvalidNameError):
                await client.cancel_job(bad)
            with pytest.raises(InvalidNameError):
                await client.stop_unfinished(bad)
            with pytest.raises(InvalidNameError):
                await client.wait(bad, timeout=5)
            assert calls == []
        assert (await client.get_job(done)).status is JobState.COMPLETE
