"""A finished job's success is never turned into an error by node-0's log (issue 23,
item 4), on the test bed: its ``log-less`` scenario gives what kwok's nodes (and a GPU
node scaled away after the job) give — no termination message, and a log endpoint that
answers 500 ``connection refused``; the other ways a log read fails after the job are
faults (404 pod gone, 5xx, a pod deleted) and scenarios (a log without the result)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from train_functions import train_linear

from kf_trainer_core.client import AsyncTrainerClient, TrainerClient
from kf_trainer_core.cluster.failures import failure_class_of, should_retry
from kf_trainer_core.cluster.status import JobState
from kf_trainer_core.errors import (
    InfrastructureFailure,
    TrainJobFailedError,
    TrainJobResultLostError,
    TrainJobResultUnavailableError,
    TrainJobResultUnreachableError,
    UserCodeFailure,
)
from kf_trainer_core.k8s.calls import OpenLogStream, ReadLog
from kf_trainer_core.k8s.errors import ApiError
from kf_trainer_core.k8s.resources import PODS
from kf_trainer_core.spec import (
    Annotations,
    CustomTrainer,
    CustomTrainerContainer,
    TrainJobSpec,
)
from kf_trainer_core.testing import kwok
from kf_trainer_core.testing.scenarios import SCENARIO_ANNOTATION
from kf_trainer_core.testing.server import KubeTestServer

LOG_LESS = "log-less"


def function_spec(scenario: str | dict[str, Any], *options: Any, nodes: int = 2) -> TrainJobSpec:
    text = scenario if isinstance(scenario, str) else json.dumps(scenario)
    return TrainJobSpec(
        trainer=CustomTrainer(train_linear, num_nodes=nodes),
        options=[Annotations({SCENARIO_ANNOTATION: text}), *options],
    )


def test_log_less_job_succeeds_for_wait_run_and_outputs(
    client: TrainerClient, calls: list[Any]
) -> None:
    spec = function_spec(LOG_LESS)
    name = client.submit(spec).job.name
    job, result = client.wait(name, timeout=30)
    assert job.status is JobState.COMPLETE
    assert result is None
    out = client.run(spec, timeout=30)  # adopts the finished job
    assert out.status is JobState.COMPLETE
    assert out.result is None
    missing = out.result_missing
    assert missing is not None
    assert missing.cause == "log-unreadable"
    assert "connection refused" in missing.message
    assert "4096 bytes" in missing.message
    assert "Fix:" in missing.message
    assert client.get_job_outputs(name).result_missing == missing
    assert client.wait_outputs(name, timeout=30).result_missing == missing
    assert client.get_job(name, log_progress=True).status is JobState.COMPLETE
    # A refused node is tried twice per read, not for the retry policy's seconds.
    reads = [c for c in calls if isinstance(c, ReadLog)]
    assert reads
    assert len(reads) <= 2 * 4


def test_only_the_value_raises_and_it_is_not_a_training_failure(client: TrainerClient) -> None:
    out = client.run(function_spec(LOG_LESS), timeout=30)
    with pytest.raises(TrainJobResultUnreachableError) as caught:
        out.require_result()
    err = caught.value
    assert isinstance(err, TrainJobResultUnavailableError)
    assert isinstance(err, InfrastructureFailure)
    # Not a failed job, not the user's code: a retry finds the finished job and reads.
    assert not isinstance(err, (TrainJobFailedError, UserCodeFailure))
    assert failure_class_of(err) is not None
    assert failure_class_of(err).value == "infrastructure"
    assert should_retry(err)
    assert "succeeded" in str(err)


async def test_concurrent_async_waits_return_the_finished_job(
    aclient: AsyncTrainerClient,
) -> None:
    name = (await aclient.submit(function_spec(LOG_LESS))).job.name
    done = await asyncio.gather(*(aclient.wait(name, timeout=30) for _ in range(5)))
    assert [job.status for job, _ in done] == [JobState.COMPLETE] * 5
    out = await aclient.get_job_outputs(name)
    assert out.result_missing is not None
    assert out.result_missing.cause == "log-unreadable"
    waited = await aclient.wait_outputs(name, timeout=30)
    assert waited.result_missing == out.result_missing


@pytest.mark.parametrize("code", [404, 503, 504, 500])
def test_any_log_answer_after_the_job(
    client: TrainerClient, server: KubeTestServer, code: int
) -> None:
    spec = function_spec({"preset": "success", "termination_message": None})
    name = client.submit(spec).job.name
    client.wait_for_job_status(name, timeout=30)  # never reads the result's log path
    server.faults.fail_next(10, code, retry_after=None, resource="pods/log")
    out = client.get_job_outputs(name)
    assert out.status is JobState.COMPLETE
    assert out.result is None
    assert out.result_missing is not None
    if code == 404:
        assert out.result_missing.cause == "pod-gone"
        with pytest.raises(TrainJobResultLostError):
            out.require_result()
    else:
        assert out.result_missing.cause == "log-unreadable"
        assert str(code) in out.result_missing.message


def test_a_pod_gone_after_the_job(client: TrainerClient, server: KubeTestServer) -> None:
    spec = function_spec({"preset": "success", "termination_message": None})
    name_ = client.submit(spec).job.name
    client.wait_for_job_status(name_, timeout=30)
    for pod in server.store.list(PODS, "default")[0]:
        server.store.delete(PODS, "default", pod["metadata"]["name"])
    job, result = client.wait(name_, timeout=30)
    assert job.status is JobState.COMPLETE
    assert result is None
    missing = client.get_job_outputs(name_).result_missing
    assert missing is not None
    assert missing.cause == "pod-gone"
    assert "no longer exists" in missing.message
    assert failure_class_of(TrainJobResultLostError(None, missing)).value == "configuration"


def test_a_log_without_the_result_and_garbage(client: TrainerClient) -> None:
    garbage = ["\x1b[31mnoise\x00", "##kf-trainer-result## {not json", "é" * 50]
    spec = function_spec({"preset": "success", "termination_message": "{cut", "logs": garbage})
    out = client.run(spec, timeout=30)
    assert out.status is JobState.COMPLETE
    assert out.result is None
    assert out.result_missing is not None
    assert out.result_missing.cause == "not-in-log"


def test_the_termination_message_carries_the_result_past_a_log_less_node(
    client: TrainerClient, calls: list[Any]
) -> None:
    # As on the real control plane: kwok's annotation writes the termination message.
    message = json.dumps({"loss": 0.25})
    patch = kwok.termination_message(message)
    out = client.run(function_spec(LOG_LESS, patch), timeout=30)
    assert out.result == {"loss": 0.25}
    assert out.result_missing is None
    assert not [c for c in calls if isinstance(c, ReadLog)]  # the log is not needed


def test_a_result_only_in_the_log_is_read_there(client: TrainerClient) -> None:
    big = {"rows": ["x" * 100] * 60}  # over the 4 KiB termination message
    line = "##kf-trainer-result## " + json.dumps(big)
    spec = function_spec({"preset": "success", "termination_message": None, "logs": [line]})
    assert client.run(spec, timeout=30).result == big


def test_a_function_that_declined_a_result_misses_nothing(client: TrainerClient) -> None:
    said = (
        "kf-trainer: the return value (object) is not JSON-serialisable (x); it is not "
        "reported (KF_TRAINER_RESULT_NOT_JSON=ignore)."
    )
    spec = function_spec({"preset": "success", "termination_message": None, "logs": [said]})
    out = client.run(spec, timeout=30)
    assert out.result is None
    assert out.result_missing is None


def test_a_container_trainer_expects_no_result(client: TrainerClient) -> None:
    spec = TrainJobSpec(
        trainer=CustomTrainerContainer(image="busybox:1.36", num_nodes=1),
        options=[Annotations({SCENARIO_ANNOTATION: LOG_LESS})],
    )
    out = client.run(spec, timeout=30)
    assert out.status is JobState.COMPLETE
    assert out.result is None
    assert out.result_missing is None


def test_the_test_bed_refuses_logs_as_the_real_apiserver_words_it(
    client: TrainerClient,
) -> None:
    name = client.submit(function_spec(LOG_LESS, nodes=1)).job.name
    client.wait(name, timeout=30)
    with pytest.raises(ApiError) as caught:
        client.get_job_logs(name)
    err = caught.value
    assert err.code == 500
    assert ":10250/containerLogs/default/" in err.message
    assert err.message.endswith("connect: connection refused")


def test_a_follow_on_a_node_that_serves_no_log_ends_with_the_reason(
    client: TrainerClient, calls: list[Any]
) -> None:
    lines: list[str] = []
    out = client.run(function_spec(LOG_LESS), timeout=30, on_log=lines.append)
    assert out.status is JobState.COMPLETE
    ended = [line for line in lines if "log stream ended" in line]
    assert len(ended) == 1
    assert "connection refused" in ended[0]
    # Tried twice, not for the retry policy's back-off (the run waits for its follower).
    assert len([c for c in calls if isinstance(c, OpenLogStream)]) == 2


def test_a_failure_on_a_node_that_serves_no_log_is_explained_without_it(
    client: TrainerClient, calls: list[Any]
) -> None:
    spec = function_spec({"preset": "fail", "exit_code": 3, "serve_logs": False}, nodes=1)
    with pytest.raises(TrainJobFailedError) as caught:
        client.run(spec, timeout=30)
    assert caught.value.failure.exit_code == 3
    assert caught.value.failure.log_tail == []
    # The log tail is evidence only: a refusing node is asked twice, not waited out.
    assert len([c for c in calls if isinstance(c, ReadLog)]) == 2
