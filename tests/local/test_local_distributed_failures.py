"""Failure classes of distributed jobs on the local backend, through real torchrun (gloo):
a SIGKILLed worker is infrastructure (retried by default), a ValueError in rank 1 of 2
is user-code naming rank 1 — on one node, and across two nodes the node that failed
first, not the peer that lost it. Runs where KF_TRAINER_TEST_TORCH_PYTHON names an
interpreter with torch (CI's .venv-torch), or where this one has torch.

The termination message the local kubelet writes is tested without torch: it quotes the
worker's error, never torchrun's banner."""

from __future__ import annotations

import os
import sys
from collections import deque
from pathlib import Path

import pytest

from kf_trainer_core.backends.local.pods import PodRun, termination
from kf_trainer_core.client import TrainerClient
from kf_trainer_core.config import LocalConfig
from kf_trainer_core.errors import (
    FailureClass,
    TrainJobFailedError,
    TrainJobInfrastructureError,
    TrainJobUserCodeError,
)
from kf_trainer_core.spec import CustomTrainer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "core"))

from torchrun_texts import fixture


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


@pytest.fixture
def torch_client(state_dir: Path) -> TrainerClient:
    python = os.environ.get("KF_TRAINER_TEST_TORCH_PYTHON")
    if python is None:
        pytest.importorskip("torch")
    return TrainerClient(LocalConfig(state_dir=str(state_dir), python=python))


def failed(client: TrainerClient, trainer: CustomTrainer) -> TrainJobFailedError:
    with client:
        name = client.train(trainer=trainer)
        with pytest.raises(TrainJobFailedError) as info:
            client.wait(name, timeout=180)
    return info.value


def assert_no_banner(err: TrainJobFailedError) -> None:
    head = str(err).split("\nlast ")[0]  # the log tail shown may hold the banner
    assert "====" not in head, head
    assert "ChildFailedError" not in head, head


def test_a_sigkilled_worker_is_infrastructure(torch_client: TrainerClient) -> None:
    err = failed(torch_client, CustomTrainer(killed_after_a_step))
    assert isinstance(err, TrainJobInfrastructureError), str(err)
    assert err.failure.retryable
    assert err.failure.classified_by.startswith("rank 0 on node-0 was killed by SIGKILL")
    assert err.failure.message.endswith("(rank 0 was killed by SIGKILL from outside the "
                                        "training code (an OOM killer, a preemption, a "
                                        "lost node or a cancel))")  # fmt: skip
    assert_no_banner(err)


def test_a_value_error_in_rank_1_of_2_is_rank_1s(torch_client: TrainerClient) -> None:
    err = failed(torch_client, CustomTrainer(value_error_in_rank_1, num_proc_per_node=2))
    assert isinstance(err, TrainJobUserCodeError), str(err)
    assert err.failure_class is FailureClass.USER_CODE
    assert err.failure.classified_by == (
        "rank 1 on node-0: the training code raised ValueError: bad learning rate: -0.1"
    )
    assert "(rank 1: ValueError: bad learning rate: -0.1)" in err.failure.message
    assert_no_banner(err)


def test_across_two_nodes_the_node_that_failed_first_is_named(
    torch_client: TrainerClient,
) -> None:
    err = failed(torch_client, CustomTrainer(value_error_in_rank_1, num_nodes=2))
    assert isinstance(err, TrainJobUserCodeError), str(err)
    assert err.failure.step == "node-1"
    assert err.failure.classified_by == (
        "rank 1 on node-1: the training code raised ValueError: bad learning rate: -0.1"
    )
    assert_no_banner(err)


def cause_ends_after_its_consequence() -> None:
    # No torch needed: node-1's worker raises first, but its process ends a second
    # later (torchrun's agent notices at its next check); node-0 only lost its peer and
    # ends at once. Both as torchrun prints them.
    import os
    import sys
    import time

    if os.environ["PET_NODE_RANK"] == "1":
        print("[rank1]: Traceback (most recent call last):", file=sys.stderr)
        print('[rank1]:   File "train.py", line 5, in <module>', file=sys.stderr)
        print("[rank1]: ValueError: bad learning rate: -0.1", file=sys.stderr, flush=True)
        time.sleep(1.5)
        sys.exit(1)
    time.sleep(0.3)
    print("[rank0]: Traceback (most recent call last):", file=sys.stderr)
    print('[rank0]:   File "train.py", line 9, in <module>', file=sys.stderr)
    print(
        "[rank0]: RuntimeError: [pair.cc:553] Connection closed by peer [127.0.0.1]:24708",
        file=sys.stderr,
        flush=True,
    )
    sys.exit(1)


def test_a_root_cause_that_ends_after_its_peer_keeps_its_log(client: TrainerClient) -> None:
    # The other nodes get a moment to end before they are stopped, as on a cluster: stopped and deleted at once, node-1 and its log — the only evidence of
    # the ValueError — would be gone, and the job classed a lost peer (infrastructure).
    err = failed(client, CustomTrainer(cause_ends_after_its_consequence, num_nodes=2))
    assert isinstance(err, TrainJobUserCodeError), str(err)
    assert err.failure.step == "node-1"
    assert err.failure.classified_by == (
        "rank 1 on node-1: the training code raised ValueError: bad learning rate: -0.1"
    )


# ------------------------------------------------------------- the termination message


def pod_with_output(lines: list[str]) -> PodRun:
    pod = PodRun("node", {"metadata": {"name": "job-node-0-0-abcde"}})
    pod.tail = deque(lines, maxlen=200)
    return pod


@pytest.mark.parametrize(
    ("log", "message"),
    [
        ("gloo_worker_sigkill.log", "rank 0 was killed by SIGKILL from outside the training code"),
        ("gloo_valueerror_rank1.log", "rank 1: ValueError: bad learning rate: -0.1"),
    ],
)
def test_the_termination_message_quotes_the_cause(log: str, message: str) -> None:
    code, reason, said = termination(pod_with_output(fixture(log)), 1)
    assert (code, reason) == (1, "Error")
    assert said is not None
    assert said.startswith(message), said


def test_the_termination_message_of_a_plain_failure_is_its_last_line() -> None:
    code, reason, said = termination(pod_with_output(["epoch 1", "RuntimeError: boom", ""]), 1)
    assert (code, reason, said) == (1, "Error", "RuntimeError: boom")


def test_a_sigkilled_worker_while_the_cgroup_counted_an_oom_kill_is_oom_killed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from kf_trainer_core.backends.local import pods

    pod = pod_with_output(fixture("gloo_worker_sigkill.log"))
    pod.oom_before = 3
    monkeypatch.setattr(pods, "oom_kills", lambda: 4)
    code, reason, _ = termination(pod, 1)
    assert (code, reason) == (1, "OOMKilled")
    monkeypatch.setattr(pods, "oom_kills", lambda: 3)  # no OOM kill: killed from outside
    assert termination(pod, 1)[1] == "Error"
