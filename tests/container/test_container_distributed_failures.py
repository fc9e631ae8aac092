"""Failure classes of distributed jobs on the container backend, through torchrun in the
test image (gloo): a SIGKILLed worker is infrastructure, and of two nodes the one whose
rank raised is named, not its peer that lost it. The same reading as every backend
(``kf_trainer_core.cluster.distributed``), from the containers' logs."""

from __future__ import annotations

import pytest

from kf_trainer_core.client import TrainerClient
from kf_trainer_core.errors import (
    TrainJobFailedError,
    TrainJobInfrastructureError,
    TrainJobUserCodeError,
)
from kf_trainer_core.spec import CustomTrainer


def killed_after_a_step() -> None:
    import os
    import signal

    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    x = torch.ones(2)
    dist.all_reduce(x)
    print("step 1 done", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


def value_error_in_rank_1() -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    if dist.get_rank() == 1:
        raise ValueError("bad learning rate: -0.1")
    x = torch.ones(4)
    dist.all_reduce(x)


def failed(client: TrainerClient, trainer: CustomTrainer, has_torch: bool) -> TrainJobFailedError:
    if not has_torch:
        pytest.skip("the test image has no torch (see .ci/container-setup.sh)")
    name = client.train(trainer=trainer)
    with pytest.raises(TrainJobFailedError) as info:
        client.wait(name, timeout=300)
    return info.value


def test_a_sigkilled_worker_is_infrastructure(client: TrainerClient, image_has_torch: bool) -> None:
    err = failed(client, CustomTrainer(killed_after_a_step), image_has_torch)
    assert isinstance(err, TrainJobInfrastructureError), str(err)
    assert err.failure.classified_by.startswith("rank 0 on node-0 was killed by SIGKILL")


def test_across_two_nodes_the_node_that_failed_first_is_named(
    client: TrainerClient, image_has_torch: bool
) -> None:
    err = failed(client, CustomTrainer(value_error_in_rank_1, num_nodes=2), image_has_torch)
    assert isinstance(err, TrainJobUserCodeError), str(err)
    assert err.failure.step == "node-1"
    assert err.failure.classified_by == (
        "rank 1 on node-1: the training code raised ValueError: bad learning rate: -0.1"
    )
