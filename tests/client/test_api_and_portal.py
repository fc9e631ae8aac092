"""The rules every request and every sync call go through: the Api's retries and
renewals (a 503 tried again, a 401 renewed once, an error raised once the tries are
spent, each try seen by the hook); the task scope's children, which never outlive the
block that started them; and the portal, the one bridge from sync code — usable from
inside a running event loop, interruptible, and cancelling the coroutine of a call that
is interrupted, after its clean-up has run. An in-memory transport stands in for the
API: the transports' own behaviour is tested against the test server."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from kf_trainer_core.base.aio import TaskScope, deadline
from kf_trainer_core.base.portal import interruption_cause, portal
from kf_trainer_core.k8s.api import Api
from kf_trainer_core.k8s.calls import Get, ReadLog
from kf_trainer_core.k8s.errors import ApiError
from kf_trainer_core.k8s.resources import TRAINJOBS
from kf_trainer_core.k8s.retry import RetryPolicy

POLICY = RetryPolicy(attempts=4, base=0.001, cap=0.001)


class Answers:
    """Answers calls from a list: an ApiError is raised, anything else returned."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.connects = 0

    async def connect(self) -> None:
        self.connects += 1

    async def perform(self, call: Any) -> Any:
        answer = self.answers.pop(0)
        if isinstance(answer, ApiError):
            raise answer
        return answer

    async def open_stream(self, call: Any) -> Any:
        raise NotImplementedError

    async def read_line(self, stream: Any) -> bytes | None:
        raise NotImplementedError

    async def close(self) -> None:
        pass


def test_retries_renewals_and_errors() -> None:
    hooked: list[Any] = []
    # a: a 503 retried, then a 401 renewed, then the object; b: a 404, raised.
    transport = Answers(
        ApiError(503, "Unavailable"), ApiError(401, "Unauthorized"), "A", ApiError(404)
    )
    api = Api(transport, POLICY, hooked.append)

    async def read_twice() -> list[Any]:
        got = [await api(Get(TRAINJOBS, "ns", "a"))]
        try:
            await api(Get(TRAINJOBS, "ns", "b"))
        except ApiError as err:
            got.append(err.code)
        return got

    assert asyncio.run(read_twice()) == ["A", 404]
    assert transport.connects == 1  # credentials renewed once, after the 401
    assert [c.name for c in hooked] == ["a", "a", "a", "b"]  # every try is seen


def test_a_call_tries_at_most_its_own_attempts() -> None:
    transport = Answers(*(ApiError(503, "Unavailable") for _ in range(6)))
    api = Api(transport, POLICY)
    call = ReadLog("ns", "pod", "node", attempts=2)
    with pytest.raises(ApiError):
        asyncio.run(api(call))
    assert len(transport.answers) == 4  # two tries, not the policy's four


async def test_a_child_does_not_outlive_its_scope() -> None:
    lines: list[int] = []

    async def counting() -> None:
        n = 0
        while True:
            lines.append(n)
            n += 1
            await asyncio.sleep(0.001)

    async with TaskScope() as scope:
        scope.start(counting())
        await asyncio.sleep(0.02)
    at_end = len(lines)
    await asyncio.sleep(0.05)
    assert len(lines) == at_end  # cancelled when the block ended


async def test_a_drained_child_ends_by_itself_or_is_cancelled() -> None:
    async def short() -> str:
        return "done"

    async def endless() -> None:
        await asyncio.sleep(3600)

    async with TaskScope() as scope:
        quick = scope.start(short())
        await TaskScope.drain(quick, 1.0)
        assert quick.result() == "done"
        slow = scope.start(endless())
        await TaskScope.drain(slow, 0.01)
        assert slow.cancelled()


async def test_a_deadline_raises_timeout_error() -> None:
    with pytest.raises((TimeoutError, asyncio.TimeoutError)):
        async with deadline(0.01):
            await asyncio.sleep(1)
    async with deadline(None):  # no deadline
        await asyncio.sleep(0)


def test_the_portal_runs_a_call_from_inside_a_running_event_loop() -> None:
    async def inner() -> str:
        return threading.current_thread().name

    async def notebook_cell() -> str:
        # A sync call made while this thread's own loop runs (a notebook, an async flow).
        return portal().call(inner())

    assert asyncio.run(notebook_cell()) == "kf-trainer-portal"


def test_the_portal_is_one_per_process() -> None:
    assert portal() is portal()


def test_an_interrupted_call_cancels_its_coroutine_after_its_clean_up() -> None:
    seen: list[str] = []

    async def long_wait() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError as exc:
            await asyncio.sleep(0.05)  # clean-up that takes a moment
            seen.append(type(interruption_cause(exc)).__name__)
            raise

    # The interruption lands in the calling thread, as an orchestrator's timeout does.
    main = threading.get_ident()

    def interrupt() -> None:
        time.sleep(0.3)
        import ctypes

        ctypes.pythonapi.PyThreadState_SetAsyncExc(
            ctypes.c_ulong(main), ctypes.py_object(KeyboardInterrupt)
        )

    threading.Thread(target=interrupt, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        portal().call(long_wait())
    assert seen == ["KeyboardInterrupt"]  # the clean-up ran before the caller went on


def test_a_long_wait_wakes_less_often_but_never_less_than_its_longest_slice() -> None:
    # 500 sync waits in fixed 0.5 s slices kept 3.6% of a core busy doing nothing: a
    # caller's slices grow, bounded so that an interruption still lands within one.
    from itertools import islice

    from kf_trainer_core.base.portal import LONG_SLICE_SECONDS, SLICE_SECONDS, _slices

    first = list(islice(_slices(), 40))
    assert first[:4] == [SLICE_SECONDS] * 4
    assert first == sorted(first)
    assert first[-1] == LONG_SLICE_SECONDS == max(first)
    # Over a minute's wait: about 40 wakes, not 120.
    total, wakes = 0.0, 0
    for length in _slices():
        total, wakes = total + length, wakes + 1
        if total >= 60:
            break
    assert wakes <= 40


def test_a_call_from_the_portals_own_loop_is_refused() -> None:
    async def nested() -> None:
        async def nothing() -> None:
            return None

        portal().call(nothing())

    with pytest.raises(RuntimeError, match="would wait for itself"):
        portal().call(nested())


EXIT_SCRIPT = r"""
from kf_trainer_core.client import TrainerClient
from kf_trainer_core.config import KubernetesConfig
from kf_trainer_core.errors import TrainJobTimeoutError
from kf_trainer_core.spec import CustomTrainer, TrainJobSpec
from kf_trainer_core.testing.server import KubeTestServer

kube = KubeTestServer().start()
client = TrainerClient(KubernetesConfig(kubeconfig=str(kube.kubeconfig())))
name = client.submit(TrainJobSpec(trainer=CustomTrainer("def train():\n    return 1\n"))).job.name
try:
    client.wait(name, timeout=0.5)  # the shared informers stay, watching
except TrainJobTimeoutError:
    pass
kube.stop()  # their next reconnects fail, as the interpreter exits
print("exiting")
"""


def test_a_process_exits_quietly_with_informers_running() -> None:
    """The portal stops before the interpreter's thread pools do: informers still
    watching at exit end quietly, their connections closed (stopped later, their last
    reconnects failed in aiohttp's executor calls, logged as errors, sessions unclosed)."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", EXIT_SCRIPT], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "exiting"
    assert "Traceback" not in done.stderr, done.stderr
    assert "Unclosed" not in done.stderr, done.stderr
