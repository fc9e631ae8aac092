"""TrainJobTrigger in an event loop, against the test server: events for every ending,
progress in the log, and cancelling only when the task is really killed."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.triggers.base import TriggerEvent

from kf_trainer_airflow.triggers import trainjob as trigger_module
from kf_trainer_airflow.triggers.trainjob import TrainJobTrigger
from kf_trainer_core.client import TrainerClient
from kf_trainer_core.config import KubernetesConfig
from kf_trainer_core.k8s.resources import TRAINJOBS
from kf_trainer_core.spec import Annotations, CustomTrainer, TrainJobSpec
from kf_trainer_core.testing.scenarios import SCENARIO_ANNOTATION
from kf_trainer_core.testing.server import KubeTestServer

pytestmark = pytest.mark.usefixtures("kf_conn")


def train(x: int = 1) -> dict[str, int]:
    return {"x": x}


@pytest.fixture
def client(kf_conn: Path) -> Iterator[TrainerClient]:
    with TrainerClient(KubernetesConfig(kubeconfig=str(kf_conn))) as c:
        yield c


def submit(client: TrainerClient, scenario: str, ident: str) -> str:
    spec = TrainJobSpec(
        trainer=CustomTrainer(train),
        options=[Annotations({SCENARIO_ANNOTATION: scenario})],
    )
    return client.submit(spec, identity=ident).job.name


def make(name: str, **kwargs: Any) -> TrainJobTrigger:
    return TrainJobTrigger(
        job_name=name, namespace="default", kubeflow_trainer_conn_id="kf_test", **kwargs
    )


async def first_event(trigger: TrainJobTrigger, timeout: float = 30) -> dict[str, Any]:
    async def one() -> TriggerEvent:
        async for event in trigger.run():
            return event
        raise AssertionError("no event")

    event = await asyncio.wait_for(one(), timeout)
    return dict(event.payload)


def test_serialize_round_trip() -> None:
    trigger = make(
        "job-a",
        status=["Running"],
        step="node-1",
        startup_timeout=5.0,
        deferred_at=1_800_000_000.5,
        resume_grace=10.0,
        log_step="node-0",
        log_tail=50,
    )
    path, kwargs = trigger.serialize()
    assert (kwargs["log_step"], kwargs["log_tail"]) == ("node-0", 50)
    assert path == "kf_trainer_airflow.triggers.trainjob.TrainJobTrigger"
    again = TrainJobTrigger(**kwargs)
    assert again.serialize() == (path, kwargs)
    assert kwargs["kubeflow_trainer_conn_id"] == "kf_test"  # an id, never credentials


def test_bad_on_kill_action() -> None:
    with pytest.raises(ValueError, match="on_kill_action: 'stop'"):
        make("x", on_kill_action="stop")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"timeout": "1h"}, r"timeout: a str is not a number of seconds \(got '1h'\)\. Fix"),
        ({"startup_timeout": -1}, r"startup_timeout: -1 seconds is not a duration\. Fix"),
        ({"recheck_interval": 0}, r"recheck_interval: 0 seconds is not a duration\. Fix"),
        ({"resume_grace": -2}, r"resume_grace: -2 seconds is not a duration\. Fix"),
    ],
)
def test_bad_durations(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make("x", **kwargs)


# ------------------------------------------------------ the stale defer-exit race


def test_hold_for_counts_from_the_deferral() -> None:
    trigger = make("x", deferred_at=1000.0, resume_grace=10.0)
    assert trigger.hold_for(now=1002.5) == 7.5  # ended 2.5 s after deferring
    assert trigger.hold_for(now=1010.0) == 0.0  # late enough: at once
    assert trigger.hold_for(now=1500.0) == 0.0
    # A worker clock ahead of the triggerer's never holds longer than the grace.
    assert trigger.hold_for(now=900.0) == 10.0
    assert make("x", deferred_at=1000.0, resume_grace=0).hold_for(now=1000.0) == 0.0
    assert make("x", resume_grace=10.0).hold_for(now=1000.0) == 0.0  # no deferral time


async def test_an_early_ending_is_held_until_the_grace_has_passed(
    client: TrainerClient, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    name = submit(client, "success", "t/grace")
    # The trigger's clock says the job ended 0.5 s after the deferral, however slow
    # this machine is: the event must wait the remaining second.
    monkeypatch.setattr(trigger_module, "time", SimpleNamespace(time=lambda: 1000.5))
    trigger = make(name, deferred_at=1000.0, resume_grace=1.5)
    payload = await first_event(trigger)
    assert payload["status"] == "success"
    out = capfd.readouterr().out
    assert (
        f"TrainJob default/{name} ended 0.5s after the task deferred: reporting it in 1.0s" in out
    )
    # An ending past the grace, or with no grace, goes out at once.
    again = make(name, deferred_at=990.0, resume_grace=1.5)
    assert (await first_event(again))["status"] == "success"
    assert "(resume_grace)" not in capfd.readouterr().out


async def test_a_held_event_is_not_cancelled_by_a_kill(
    client: TrainerClient, kube: KubeTestServer
) -> None:
    # Killed while holding: the job has ended, and stays (a cleared task collects it).
    name = submit(client, "success", "t/grace-kill")
    trigger = stated(name, "failed", deferred_at=time.time(), resume_grace=30.0)
    task = asyncio.create_task(first_event(trigger))
    for _ in range(200):
        if exists(kube, name) and kube.store.get(TRAINJOBS, "default", name).get("status", {}).get(
            "conditions"
        ):
            break
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.3)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await trigger.on_kill()
    assert exists(kube, name)


async def test_success_with_outputs_and_progress(
    client: TrainerClient, capfd: pytest.CaptureFixture[str]
) -> None:
    name = submit(client, '{"preset": "progress", "duration": 1.0}', "t/success")
    payload = await first_event(make(name))
    assert payload["status"] == "success"
    assert payload["outputs"]["status"] == "Complete"
    assert payload["outputs"]["metrics"]["loss"] == 0.1289  # numbers come back as numbers
    lines = [line for line in capfd.readouterr().out.splitlines() if "% done" in line]
    assert lines
    assert any("loss=" in line and f"TrainJob default/{name}: " in line for line in lines)


async def test_failure_event_explains(client: TrainerClient) -> None:
    name = submit(client, "fail", "t/fail")
    payload = await first_event(make(name))
    assert payload["status"] == "failed"
    assert payload["message"].startswith(f"TrainJob default/{name} failed")
    failure = payload["failure"]
    assert (failure["step"], failure["exit_code"]) == ("node-0", 1)
    assert failure["pod"].startswith(name)
    assert failure["log_tail"]


async def test_startup_timeout_says_what_is_stuck(client: TrainerClient) -> None:
    name = submit(client, "image-pull", "t/pull")
    payload = await first_event(make(name, startup_timeout=0.5))
    assert payload["status"] == "timeout"
    assert "did not start within 0.5s" in payload["message"]
    assert payload["failure"]["container_reason"] in ("ErrImagePull", "ImagePullBackOff")


async def test_deleted_while_waiting(client: TrainerClient) -> None:
    name = submit(client, "never-finish", "t/deleted")
    waiting = asyncio.create_task(first_event(make(name)))
    await asyncio.sleep(0.3)
    await asyncio.to_thread(client.delete_job, name)
    payload = await waiting
    assert payload["status"] == "deleted"


async def test_step_wait(client: TrainerClient) -> None:
    name = submit(client, '{"preset": "success", "duration": 1.0}', "t/step")
    payload = await first_event(
        make(name, step="node-0", step_status=["Running"], recheck_interval=0.2)
    )
    assert payload["status"] == "success"
    assert payload["step"]["name"] == "node-0"
    assert payload["step"]["status"] in ("Running", "Succeeded")


async def test_step_failure(client: TrainerClient) -> None:
    name = submit(client, "fail", "t/stepfail")
    payload = await first_event(make(name, step="node-0", recheck_interval=0.2))
    assert payload["status"] == "failed"
    assert "step node-0 is Failed" in payload["message"]
    assert payload["failure"]["exit_code"] == 1


async def test_step_that_never_comes(client: TrainerClient) -> None:
    name = submit(client, "success", "t/nostep")
    payload = await first_event(make(name, step="dataset-initializer", recheck_interval=0.2))
    assert payload["status"] == "failed"
    assert "without a dataset-initializer step" in payload["message"]


async def test_a_step_wait_that_runs_out_says_what_holds_the_job_up(
    client: TrainerClient,
) -> None:
    name = submit(client, "image-pull", "t/steptimeout")
    payload = await first_event(
        make(name, step="node-0", step_status=["Running"], timeout=1.5, recheck_interval=0.2)
    )
    assert payload["status"] == "timeout"
    first, *rest = payload["message"].splitlines()
    assert first.startswith(f"step node-0 of TrainJob default/{name} did not become Running")
    assert "; it is Pending: step node-0 cannot start: " in first
    assert rest[0].startswith("failure class: configuration")
    assert rest[-1].startswith(f"left behind: TrainJob default/{name} still exists (Pending)")
    assert payload["failure_class"] == "configuration"


async def test_the_log_is_followed_while_waiting(
    client: TrainerClient, capfd: pytest.CaptureFixture[str]
) -> None:
    logs = '{"preset": "success", "duration": 1.0, "logs": ["first {rank}", "second {rank}"]}'
    name = submit(client, logs, "t/log")
    payload = await first_event(make(name, log_step="node-0"))
    assert payload["status"] == "success"
    assert payload["log_followed"] is True
    out = capfd.readouterr().out
    assert out.count("[node-0] first 0") == 1
    assert out.count("[node-0] second 0") == 1
    # A node that serves no log: said, and the task prints the tail when it resumes.
    unserved = submit(client, '{"preset": "success", "serve_logs": false}', "t/nolog")
    payload = await first_event(make(unserved, log_step="node-0"))
    assert payload["status"] == "success"
    assert payload["log_followed"] is False
    assert f"Could not follow the log of TrainJob default/{unserved}" in capfd.readouterr().out


async def test_many_triggers_share_one_watch(client: TrainerClient, kube: KubeTestServer) -> None:
    names = [
        submit(client, '{"preset": "success", "duration": 0.5}', f"t/many/{i}") for i in range(12)
    ]
    kube.requests.clear()
    payloads = await asyncio.gather(*(first_event(make(name)) for name in names))
    assert {p["status"] for p in payloads} == {"success"}
    # One list and one watch of the namespace's TrainJobs serve all twelve waits.
    assert kube.requests.count(verb="watch", resource="trainjobs") == 1
    assert kube.requests.count(verb="list", resource="trainjobs") == 1
    assert kube.requests.count(verb="get", resource="trainjobs") == 0


async def test_unknown_connection_is_an_error_event() -> None:
    trigger = TrainJobTrigger(job_name="x", namespace="default", kubeflow_trainer_conn_id="nope")
    payload = await first_event(trigger)
    assert payload["status"] == "error"
    assert "nope" in payload["message"]


# --------------------------------------------------------------------- cancelling


class StateTrigger(TrainJobTrigger):
    """A trigger whose task instance is in a given state (what the API server says)."""

    state: str | None = "failed"
    error: bool = False

    async def task_state(self) -> str | None:
        if self.error:
            raise RuntimeError("API server unreachable")
        return self.state


def stated(name: str, state: str | None, **kwargs: Any) -> StateTrigger:
    trigger = StateTrigger(
        job_name=name, namespace="default", kubeflow_trainer_conn_id="kf_test", **kwargs
    )
    trigger.state = state
    return trigger


def exists(kube: KubeTestServer, name: str) -> bool:
    obj = kube.store.try_get(TRAINJOBS, "default", name)
    return obj is not None and not obj["metadata"].get("deletionTimestamp")


async def interrupted(trigger: TrainJobTrigger) -> None:
    """Run the trigger until the job is being watched, then cancel it as the triggerer
    does."""
    task = asyncio.create_task(first_event(trigger))
    await asyncio.sleep(0.3)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_on_kill_deletes_the_job(client: TrainerClient, kube: KubeTestServer) -> None:
    name = submit(client, "never-finish", "t/kill")
    trigger = stated(name, "failed")
    await interrupted(trigger)
    await trigger.on_kill()
    assert not exists(kube, name)


async def test_on_kill_keeps_the_job_when_the_trigger_only_moves(
    client: TrainerClient, kube: KubeTestServer
) -> None:
    name = submit(client, "never-finish", "t/moved")
    trigger = stated(name, "deferred")
    await interrupted(trigger)
    await trigger.on_kill()
    assert exists(kube, name)


async def test_on_kill_acts_when_the_state_is_unknown(
    client: TrainerClient, kube: KubeTestServer
) -> None:
    name = submit(client, "never-finish", "t/unknown")
    trigger = stated(name, None)
    trigger.error = True
    await trigger.on_kill()
    assert not exists(kube, name)


async def test_on_kill_suspends_or_keeps(client: TrainerClient, kube: KubeTestServer) -> None:
    suspended = submit(client, "never-finish", "t/suspend")
    await stated(suspended, "failed", on_kill_action="suspend").on_kill()
    assert kube.store.get(TRAINJOBS, "default", suspended)["spec"]["suspend"] is True
    kept = submit(client, "never-finish", "t/keep")
    await stated(kept, "failed", on_kill_action="keep").on_kill()
    assert exists(kube, kept)
    assert not kube.store.get(TRAINJOBS, "default", kept)["spec"].get("suspend")


async def test_no_cancel_after_the_event(client: TrainerClient, kube: KubeTestServer) -> None:
    name = submit(client, "success", "t/fired")
    trigger = stated(name, "success")
    assert (await first_event(trigger))["status"] == "success"
    await trigger.on_kill()
    assert exists(kube, name)


@pytest.mark.parametrize(
    ("state", "error", "kept"),
    [("failed", False, False), ("deferred", False, True), (None, False, True), (None, True, True)],
)
async def test_cleanup_before_airflow_3_3(
    client: TrainerClient,
    kube: KubeTestServer,
    monkeypatch: pytest.MonkeyPatch,
    state: str | None,
    error: bool,
    kept: bool,
) -> None:
    monkeypatch.setattr(trigger_module, "HAS_TRIGGER_ON_KILL", False)
    name = submit(client, "never-finish", f"t/cleanup/{state}/{error}")
    trigger = stated(name, state)
    trigger.error = error
    await trigger.cleanup()
    assert exists(kube, name) is kept


async def test_cleanup_does_nothing_on_airflow_3_3(
    client: TrainerClient, kube: KubeTestServer
) -> None:
    assert trigger_module.HAS_TRIGGER_ON_KILL  # this environment has Airflow 3.3
    name = submit(client, "never-finish", "t/cleanup33")
    await stated(name, "failed").cleanup()
    assert exists(kube, name)


async def test_task_state_reads_the_api(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

    calls: list[dict[str, Any]] = []

    def states(**kwargs: Any) -> dict[str, Any]:
        calls.append(kwargs)
        return {"run-1": {"train_2": "deferred", "train": "failed"}}

    monkeypatch.setattr(RuntimeTaskInstance, "get_task_states", staticmethod(states))

    class TI:
        dag_id, task_id, run_id, map_index = "dag", "train", "run-1", 2

    trigger = make("x")
    assert await trigger.task_state() is None  # no task instance: unknown
    trigger.task_instance = TI()  # type: ignore[assignment]
    assert await trigger.task_state() == "deferred"  # mapped: "<task>_<index>"
    assert calls[0]["map_index"] == 2
    TI.map_index = -1
    assert await trigger.task_state() == "failed"


async def test_first_trigger_warms_up_the_task_state_request(
    client: TrainerClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A kill asks the API server for the task's state; the triggerer's first such request
    # is slow (it builds Airflow's execution API in-process), so the first trigger of a
    # process makes it when it starts, not when a user kills a task.
    monkeypatch.setattr(trigger_module, "_API_WARMING", False)
    asked: list[str] = []

    class Counting(TrainJobTrigger):
        async def task_state(self) -> str | None:
            asked.append(self.job_name)
            return "deferred"

    class TI:
        dag_id, task_id, run_id, map_index = "dag", "train", "run-1", -1

    names = [submit(client, "success", f"t/warm/{i}") for i in range(2)]
    triggers = []
    for name in names:
        trigger = Counting(job_name=name, namespace="default", kubeflow_trainer_conn_id="kf_test")
        trigger.task_instance = TI()  # type: ignore[assignment]
        triggers.append(trigger)
    payloads = await asyncio.gather(*(first_event(t) for t in triggers))
    assert {p["status"] for p in payloads} == {"success"}
    assert asked == [names[0]]  # once per process, by the first trigger


async def test_a_result_too_deep_to_serialise_is_still_a_success(client: TrainerClient) -> None:
    """Issue 33, finding 3: a Complete job whose result was 600 bytes of JSON nested 300
    levels deep made the trigger fire ``status=error`` (pydantic's serialisation depth);
    a retry adopted the job and failed again. Now the job is a success whose result is
    withheld and said why, and the payload is what Airflow serialises."""
    from airflow.sdk.serde import deserialize, serialize

    deep = "[" * 300 + "]" * 300
    name = submit(client, json.dumps({"termination_message": deep}), "t/deep-result")
    payload = await first_event(make(name))
    assert payload["status"] == "success", payload
    outputs = payload["outputs"]
    assert outputs["status"] == "Complete"
    assert outputs["result_missing"]["cause"] == "unusable"
    assert deserialize(serialize(payload)) == payload
