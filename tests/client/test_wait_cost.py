"""What a wait costs per completion, counted (issue 23, item 6: 10,000 concurrent waits
in one process on the real kube-apiserver spent most of their time here): a pending
async wait makes no task of its own, a wait queued for a batched pod read does not
look again until it can go on, a finished job whose pods are gone is not read again in
full, and concurrent waits on one finished job read its outcome once. Counts, never
timings."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import Counter
from typing import Any

import pytest
from train_functions import train_linear

from kf_trainer_core.client import AsyncTrainerClient, TrainerClient
from kf_trainer_core.cluster.results import SLIM_EXPECTS_RESULT, expects_result
from kf_trainer_core.cluster.status import JobState
from kf_trainer_core.k8s.api import Api
from kf_trainer_core.k8s.calls import Get, ListObjects, ReadLog
from kf_trainer_core.k8s.resources import PODS, TRAINJOBS
from kf_trainer_core.programs import pod_batch
from kf_trainer_core.programs.informer import slim_trainjob
from kf_trainer_core.programs.pod_batch import PodBatch
from kf_trainer_core.programs.shared_reads import SharedReads
from kf_trainer_core.programs.wakers import Waker
from kf_trainer_core.spec import Annotations, CustomTrainer, Suspend, TrainJobSpec
from kf_trainer_core.testing.scenarios import SCENARIO_ANNOTATION
from kf_trainer_core.testing.server import KubeTestServer

# ------------------------------------------------------------------ the async waker


async def test_a_pending_async_wait_makes_no_task_of_its_own() -> None:
    wakers = [Waker() for _ in range(200)]
    for w in wakers:
        assert await w.wait(0) is True  # the first look needs no news
    before = len(asyncio.all_tasks())
    waits = [asyncio.ensure_future(w.wait(60)) for w in wakers]
    await asyncio.sleep(0)
    # One task per wait: the waits' own, nothing beside (asyncio.wait_for made a second).
    assert len(asyncio.all_tasks()) == before + len(wakers)
    for w in wakers:
        w.notify()
    assert await asyncio.gather(*waits) == [True] * len(wakers)
    assert len(asyncio.all_tasks()) == before


async def test_the_async_waker_keeps_news_and_times_out() -> None:
    waker = Waker()
    assert await waker.wait(None) is True  # the first look
    assert await waker.wait(0.01) is False  # no news: the timeout
    waker.notify()  # news before the wait: not lost
    assert await waker.wait(60) is True
    assert await waker.wait(0) is False  # ...and consumed once
    pending = asyncio.ensure_future(waker.wait(60))
    await asyncio.sleep(0)
    pending.cancel()
    with pytest.raises(asyncio.CancelledError):
        await pending
    waker.notify()  # a cancelled wait leaves nothing behind
    assert await waker.wait(60) is True


# ------------------------------------------------------------ the pod batch's queue


class _Lists(Api):
    """Answers the batch's pod LISTs after ``seconds`` each, one at a time (asserted),
    with a pod for every job the selector names."""

    def __init__(self, seconds: float) -> None:
        super().__init__(transport=None)  # type: ignore[arg-type]
        self.seconds = seconds
        self.in_flight = 0
        self.gate: asyncio.Event | None = None

    async def __call__(self, call: Any) -> Any:
        assert isinstance(call, ListObjects)
        self.in_flight += 1
        assert self.in_flight == 1  # one LIST in flight at a time
        try:
            if self.gate is not None:
                await self.gate.wait()
            await asyncio.sleep(self.seconds)
        finally:
            self.in_flight -= 1
        selector = call.label_selector or ""
        wanted = (
            selector.split(" in (", 1)[1].rstrip(")").split(",")
            if " in (" in selector
            else [selector.split("=", 1)[1]]
        )
        pods = [
            {"metadata": {"name": f"{n}-node-0", "labels": {"jobset.sigs.k8s.io/jobset-name": n}}}
            for n in wanted
        ]
        return {"items": pods, "metadata": {}}


class _CountingWaker(Waker):
    """A queued read's waker, counting how often its wait looks again."""

    looks: Counter[int] = Counter()

    async def wait(self, timeout: float | None) -> bool:
        _CountingWaker.looks[id(self)] += 1
        return await super().wait(timeout)


async def test_a_queued_pod_read_looks_again_only_when_it_can_go_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 200 waits, 10 jobs a LIST: 20 LISTs one after the other (a server slowed by
    # thousands of waits; the queue drains within the patience of the guard, which is
    # all a queued wait's own timer is). A queued wait looks when its batch has been
    # read or when it is next to lead (at most twice), not every second while the queue
    # drains (before: up to 20 looks a wait, ten thousand queued waits a second).
    monkeypatch.setattr(pod_batch, "Waker", _CountingWaker)
    _CountingWaker.looks = Counter()
    batch = PodBatch("default")
    batch.max_names = 10
    api = _Lists(0.02)
    pods = await asyncio.gather(*(batch.read(api, f"job-{i}") for i in range(200)))
    assert [p[0]["metadata"]["name"] for p in pods] == [f"job-{i}-node-0" for i in range(200)]
    looks = _CountingWaker.looks
    assert max(looks.values()) <= 2, looks.most_common(3)
    assert sum(looks.values()) <= 2 * 200
    assert pod_batch.FOLLOWER_PATIENCE > 20 * 0.02  # the premise


async def test_a_wait_that_ends_while_queued_hands_the_lead_on() -> None:
    batch = PodBatch("default")
    api = _Lists(0.0)
    api.gate = asyncio.Event()
    reads = [asyncio.ensure_future(batch.read(api, f"job-{i}")) for i in range(3)]
    await asyncio.sleep(0.01)
    assert api.in_flight == 1  # job-0 leads; the others are queued
    reads[0].cancel()  # the leader's wait is cancelled: the head leads now
    reads[1].cancel()  # ...and ends too: the one after it leads
    await asyncio.sleep(0.01)
    api.gate.set()
    pods = await reads[2]
    assert pods[0]["metadata"]["name"] == "job-2-node-0"
    assert reads[0].cancelled()
    assert reads[1].cancelled()


# -------------------------------------------------------- a job whose pods are gone


def _train() -> int:
    return 1


def test_the_slim_copy_says_whether_a_result_is_expected() -> None:
    from kf_trainer_core.manifest.builder import build_trainjob

    built = build_trainjob(TrainJobSpec(trainer=CustomTrainer(_train)), namespace="default")
    slim = slim_trainjob(built.manifest)
    assert slim["spec"]["trainer"][SLIM_EXPECTS_RESULT] is True
    assert "python" not in json.dumps(slim)  # still no program
    assert expects_result(slim, None) is True


def test_a_finished_job_whose_pods_are_gone_is_not_read_again(
    client: TrainerClient, server: KubeTestServer, calls: list[Any]
) -> None:
    """As on an API-only server, or after the pods were collected: the wait sees its job
    finish in the shared cache and finds no pod; whether a result was expected comes from
    the cached copy, not from a read of the whole job."""
    spec = TrainJobSpec(trainer=CustomTrainer(train_linear), options=[Suspend()])
    name = client.submit(spec).job.name  # suspended: no pod is made
    outcome: dict[str, Any] = {}

    def wait() -> None:
        outcome["out"] = client.wait_outputs(name, timeout=60)

    calls.clear()
    waiting = threading.Thread(target=wait)
    waiting.start()
    state = None
    for _ in range(600):  # until the shared informer holds it for the wait
        registry = [
            i for k, i in _sync_informers() if k == client._async._informer_key("trainjobs")
        ]
        state = registry[0].state if registry else None
        if state is not None and name in state.cache.full:
            break
        time.sleep(0.05)
    assert state is not None
    assert name in state.cache.full
    complete = {"type": "Complete", "status": "True", "reason": "JobsCompleted"}
    server.store.patch(
        TRAINJOBS, "default", name, {"status": {"conditions": [complete]}}, subresource="status"
    )
    waiting.join(60)
    out = outcome["out"]
    assert out.status is JobState.COMPLETE
    assert out.result_missing is not None
    assert out.result_missing.cause == "pod-gone"
    # Its pods listed once; the job itself never read by name.
    assert not [c for c in calls if isinstance(c, Get) and c.resource == TRAINJOBS]


def _sync_informers() -> list[tuple[Any, Any]]:
    """The informers the sync clients share (on the portal's loop)."""
    from kf_trainer_core.base.portal import portal
    from kf_trainer_core.programs import informer as informer_mod

    return list(informer_mod._registries.get(portal().loop, {}).items())


# ---------------------------------------------------- many waits on one finished job


def _log_result_spec(value: Any) -> TrainJobSpec:
    line = "##kf-trainer-result## " + json.dumps(value)
    scenario = {"preset": "success", "termination_message": None, "logs": [line]}
    return TrainJobSpec(
        trainer=CustomTrainer(train_linear, num_nodes=2),
        options=[Annotations({SCENARIO_ANNOTATION: json.dumps(scenario)})],
    )


async def test_concurrent_waits_on_one_job_read_its_result_once(
    aclient: AsyncTrainerClient, server: KubeTestServer, calls: list[Any]
) -> None:
    value = {"loss": 0.5, "rows": [1, 2, 3]}
    spec = _log_result_spec(value)
    name = (
        await aclient.submit(spec.model_copy(update={"options": [*spec.options, Suspend()]}))
    ).job.name
    # Eight waits in place before the job runs: its end wakes them together.
    waits = [asyncio.ensure_future(aclient.wait(name, timeout=60)) for _ in range(8)]
    informer = None
    for _ in range(600):
        await asyncio.sleep(0.02)
        informer = _async_informer(aclient)
        if informer is not None and len(informer.subscribers.get(name, ())) == 8:
            break
    assert informer is not None
    assert len(informer.subscribers[name]) == 8
    calls.clear()
    before = len(server.requests.records)
    await aclient.resume_job(name)
    done = await asyncio.gather(*waits)
    assert [result for _, result in done] == [value] * 8
    # Each caller owns its value: not one object handed to eight callers.
    assert len({id(result) for _, result in done}) == 8
    # One pod list and one log read for the eight waits (before: eight of each).
    records = server.requests.records[before:]
    assert len([r for r in records if r.resource == PODS.plural and r.verb == "list"]) == 1
    assert len([c for c in calls if isinstance(c, ReadLog)]) == 1
    assert len([c for c in calls if isinstance(c, ListObjects) and c.resource == PODS]) == 1


def _async_informer(client: AsyncTrainerClient) -> Any:
    from kf_trainer_core.programs import informer as informer_mod

    registry = informer_mod._registries.get(asyncio.get_running_loop(), {})
    return registry.get(client._informer_key("trainjobs"))


async def test_a_shared_read_that_fails_is_taken_over_by_a_follower() -> None:
    reads = SharedReads()
    answers = ["fail", "ok"]
    gate = asyncio.Event()

    async def read() -> int:
        answer = answers.pop(0)
        await gate.wait()
        if answer == "fail":
            raise RuntimeError("the leader's own error")
        return 2

    leader = asyncio.ensure_future(reads.run("k", read))
    await asyncio.sleep(0)
    follower = asyncio.ensure_future(reads.run("k", read))  # waits for the leader's read
    await asyncio.sleep(0)
    assert reads.runs == 1
    gate.set()
    with pytest.raises(RuntimeError):
        await leader
    assert await follower == 2  # told of the failure, it read itself
    assert reads.runs == 2
