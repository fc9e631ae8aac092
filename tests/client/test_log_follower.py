"""The one log follower beside a wait (``programs/logs.py``: ``LogFollower``), which the
client's ``run`` and a task's wait (``tasks/``) both use: its lines reach the sink in
order, it drains after the job ended, it stops at once when the wait gave up or the task
was cancelled — also while it drains —, and its trouble never hides the wait's outcome.

The lines come from scripted async generators (the client's ``get_job_logs`` is one);
the end-to-end runs over HTTP are in test_client_sync/test_client_async,
test_result_unreadable and test_multikueue.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from kf_trainer_core.base.aio import deadline
from kf_trainer_core.cluster.status import Failure
from kf_trainer_core.errors import TrainJobFailedError
from kf_trainer_core.programs.logs import LogFollower

#: A guard, not a measure: a follower that drained when it should have stopped would
#: hang on an endless log; this turns the hang into a failure.
GUARD_SECONDS = 30.0


class Script:
    """A log that writes ``before``, then (once ``ended`` is set: the job ended) writes
    ``after`` and ends — or never ends (``endless``), or breaks (``breaks``)."""

    def __init__(
        self,
        before: list[str],
        after: list[str] | None = None,
        *,
        endless: bool = False,
        breaks: Exception | None = None,
    ) -> None:
        self.before, self.after = before, after or []
        self.endless, self.breaks = endless, breaks
        self.ended = asyncio.Event()
        self.written = asyncio.Event()  # ``before`` was written
        self.closed = False

    async def lines(self) -> AsyncIterator[str]:
        try:
            for line in self.before:
                yield line
            self.written.set()
            if self.breaks is not None:
                raise self.breaks
            await self.ended.wait()
            for line in self.after:
                yield line
            if self.endless:
                await asyncio.Event().wait()
        finally:
            self.closed = True


async def beside(follower: LogFollower, wait: Callable[[], Awaitable[None]]) -> None:
    """``wait()`` with ``follower`` beside it, as ``run`` and a task's wait do."""
    async with deadline(GUARD_SECONDS), follower:
        await wait()


def failed(job_ended: asyncio.Event | None = None) -> TrainJobFailedError:
    if job_ended is not None:
        job_ended.set()
    return TrainJobFailedError(None, Failure(reason="Error"))


async def test_lines_reach_the_sink_in_order_and_drain_after_the_job_ended() -> None:
    log = Script(["a", "b"], ["c", "d"])
    got: list[str] = []
    async with LogFollower(log.lines(), got.append) as follower:
        await log.written.wait()
        log.ended.set()  # the wait returns: the last lines are still to come
    assert got == ["a", "b", "c", "d"]
    assert follower.followed
    assert follower.shown == 4
    assert log.closed


async def test_a_failed_job_drains_its_last_lines_and_its_failure_stands() -> None:
    log = Script(["a"], ["Traceback", "RuntimeError: the loss is nan"])
    got: list[str] = []

    async def wait() -> None:
        await log.written.wait()
        raise failed(log.ended)

    with pytest.raises(TrainJobFailedError):
        await beside(LogFollower(log.lines(), got.append), wait)
    assert got == ["a", "Traceback", "RuntimeError: the loss is nan"]


async def test_the_drain_is_bounded_for_a_log_that_stays_open() -> None:
    log = Script(["a"], ["b"], endless=True)
    got: list[str] = []
    follower = LogFollower(log.lines(), got.append)
    follower.DRAIN_SECONDS = 0.05
    async with follower:
        await log.written.wait()
        log.ended.set()
    assert got == ["a", "b"]
    assert log.closed  # cancelled after the bound, its stream closed


async def test_a_wait_that_gave_up_stops_the_follow_at_once() -> None:
    # A timeout, a deletion: the job has not ended, its log would go on.
    log = Script(["a"], endless=True)
    follower = LogFollower(log.lines(), lambda line: None)
    follower.DRAIN_SECONDS = 3600  # a drain here would hang: the guard says so

    async def wait() -> None:
        await log.written.wait()
        raise ValueError("the wait gave up")

    with pytest.raises(ValueError, match="gave up"):
        await beside(follower, wait)
    assert log.closed


async def test_a_task_cancelled_while_the_log_drains_leaves_no_follow_behind() -> None:
    log = Script(["a"], endless=True)
    follower = LogFollower(log.lines(), lambda line: None)
    follower.DRAIN_SECONDS = 3600

    async def waiting() -> None:
        async with follower:
            await log.written.wait()
            log.ended.set()  # the job ended: the follower drains (for an hour)

    task = asyncio.get_running_loop().create_task(waiting())
    await log.ended.wait()
    await asyncio.sleep(0)  # into the drain
    task.cancel()  # the orchestrator kills the task
    with pytest.raises(asyncio.CancelledError):
        await task
    assert log.closed  # the follow was cancelled with it, not left running


async def test_trouble_with_the_log_is_told_and_never_hides_the_wait() -> None:
    # By default, a last line to the sink.
    log = Script(["a"], breaks=ConnectionError("kubelet refused"))
    got: list[str] = []
    async with LogFollower(log.lines(), got.append) as follower:
        await log.written.wait()
        outcome = "complete"
    assert outcome == "complete"
    assert got == ["a", "[kf-trainer] log stream ended: kubelet refused"]
    assert follower.followed  # some of it was shown

    # Told elsewhere (a task's warning); nothing shown: the task may print the tail.
    told: list[Exception] = []
    broken = Script([], breaks=ConnectionError("kubelet refused"))
    follower = LogFollower(broken.lines(), got.append, on_error=told.append)

    async def wait() -> None:
        await broken.written.wait()
        raise failed()

    with pytest.raises(TrainJobFailedError):
        await beside(follower, wait)
    assert [str(e) for e in told] == ["kubelet refused"]
    assert not follower.followed


async def test_a_sink_that_raises_never_hides_the_wait() -> None:
    log = Script(["a"], ["b"])
    called = asyncio.Event()

    def sink(line: str) -> None:
        called.set()
        raise OSError("the task's log is closed")

    async with LogFollower(log.lines(), sink):
        await called.wait()
        outcome = "complete"
    assert outcome == "complete"
    assert log.closed


async def test_nothing_to_follow_is_the_same_block() -> None:
    async with LogFollower(None, print) as follower:
        pass
    assert not follower.followed
