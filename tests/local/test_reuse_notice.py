"""A rerun that finds its identity's job already finished reuses it and says so, instead
of replaying its log as if it trained again — sync and async clients alike."""

from __future__ import annotations

from kf_trainer_core.base.hints import command
from kf_trainer_core.client import AsyncTrainerClient, TrainerClient
from kf_trainer_core.spec import CustomTrainer, TrainJobSpec

SPEC = TrainJobSpec(trainer=CustomTrainer("def fit():\n    print('training')\n    return 7\n"))


def test_sync_rerun_reuses_the_finished_job(client: TrainerClient) -> None:
    first: list[str] = []
    out = client.run(SPEC, identity=("nightly", 1), on_log=first.append, timeout=120)
    assert "training" in first
    again: list[str] = []
    reused = client.run(SPEC, identity=("nightly", 1), on_log=again.append, timeout=120)
    assert (reused.name, reused.result) == (out.name, 7)
    # The command reaches the job as printed: the local backend and its state directory.
    look = command(client.config, ["jobs", "logs", out.name])
    assert "--backend local" in look
    assert again == [
        f"[kf-trainer] reusing the finished job local/{out.name} (Complete); nothing trains "
        f"again and its log is not replayed (read it with: {look})"
    ]
    # An adapter that has just submitted the job itself still gets its log.
    replayed: list[str] = []
    client.run(
        SPEC, identity=("nightly", 1), on_log=replayed.append, reuse_notice=False, timeout=120
    )
    assert "training" in replayed


async def test_async_rerun_reuses_the_finished_job(aclient: AsyncTrainerClient) -> None:
    await aclient.run(SPEC, identity=("nightly", 2), on_log=lambda _line: None, timeout=120)
    again: list[str] = []
    reused = await aclient.run(SPEC, identity=("nightly", 2), on_log=again.append, timeout=120)
    assert reused.result == 7
    assert len(again) == 1
    assert again[0].startswith("[kf-trainer] reusing the finished job local/")
