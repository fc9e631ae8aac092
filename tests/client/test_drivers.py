"""The one trampoline both drivers share, run by each: retries and renewals, sinks,
and children spawned beside a program (stopped when the program that spawned them
ends). An in-memory transport stands in for the API: these are the driver's rules, the
transports' own behaviour is tested against the test server."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from kf_trainer_core.k8s.calls import Emit, Get, Join, Program, Sleep, Spawn
from kf_trainer_core.k8s.drivers import AsyncDriver, SyncDriver
from kf_trainer_core.k8s.errors import ApiError
from kf_trainer_core.k8s.resources import TRAINJOBS
from kf_trainer_core.k8s.retry import RetryPolicy

POLICY = RetryPolicy(attempts=4, base=0.001, cap=0.001)


class Answers:
    """Answers ``Get`` calls from a list: an ApiError is raised, anything else returned."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.connects = 0

    def connect(self) -> None:
        self.connects += 1

    def perform(self, call: Any) -> Any:
        answer = self.answers.pop(0)
        if isinstance(answer, ApiError):
            raise answer
        return answer

    def open_stream(self, call: Any) -> Any:
        raise NotImplementedError

    def read_line(self, stream: Any) -> bytes | None:
        raise NotImplementedError

    def close(self) -> None:
        pass


class AsyncAnswers:
    def __init__(self, *answers: Any) -> None:
        self.sync = Answers(*answers)

    async def connect(self) -> None:
        self.sync.connect()

    async def perform(self, call: Any) -> Any:
        return self.sync.perform(call)

    async def open_stream(self, call: Any) -> Any:
        raise NotImplementedError

    async def read_line(self, stream: Any) -> bytes | None:
        raise NotImplementedError

    async def close(self) -> None:
        pass


def read_twice() -> Program[list[Any]]:
    got = [(yield Get(TRAINJOBS, "ns", "a"))]
    try:
        got.append((yield Get(TRAINJOBS, "ns", "b")))
    except ApiError as err:
        got.append(err.code)
    return got


def answers() -> tuple[Any, ...]:
    # a: a 503 retried, then a 401 renewed, then the object; b: a 404, thrown in.
    return (ApiError(503, "Unavailable"), ApiError(401, "Unauthorized"), "A", ApiError(404))


def run_sync(program: Program[Any], transport: Any, **kw: Any) -> Any:
    return SyncDriver(transport, POLICY, **kw).run(program)


def run_async(program: Program[Any], transport: Any, **kw: Any) -> Any:
    return asyncio.run(AsyncDriver(transport, POLICY, **kw).run(program))


@pytest.mark.parametrize("face", ["sync", "async"])
def test_retries_renewals_and_errors_thrown_in(face: str) -> None:
    hooked: list[Any] = []
    if face == "sync":
        transport: Any = Answers(*answers())
        got = run_sync(read_twice(), transport, hook=hooked.append)
        connects = transport.connects
    else:
        transport = AsyncAnswers(*answers())
        got = run_async(read_twice(), transport, hook=hooked.append)
        connects = transport.sync.connects
    assert got == ["A", 404]
    assert connects == 1  # credentials renewed once, after the 401
    assert [c.name for c in hooked] == ["a", "a", "a", "b"]  # every attempt is seen


def with_sink(sink: list[Any]) -> Program[str]:
    yield Emit("to the driver")
    yield Emit("to the sink", to=sink.append)
    return "done"


@pytest.mark.parametrize("face", ["sync", "async"])
def test_an_emit_with_a_sink_goes_to_it(face: str) -> None:
    sink: list[Any] = []
    emitted: list[Any] = []
    if face == "sync":
        result = SyncDriver(Answers()).run(with_sink(sink), emitted.append)
    else:
        result = asyncio.run(AsyncDriver(AsyncAnswers()).run(with_sink(sink), emitted.append))
    assert result == "done"
    assert sink == ["to the sink"]
    assert emitted == ["to the driver"]


def counting() -> Program[None]:
    """Emits 0, 1, 2 ... forever (a log that never ends)."""
    n = 0
    while True:
        yield Emit(n)
        n += 1
        yield Sleep(0.001)


def short() -> Program[None]:
    yield Emit("only line")


def failing() -> Program[None]:
    yield Emit("before")
    raise RuntimeError("stream broke")


def parent(child: Program[None], lines: list[Any], errors: list[str], join: bool) -> Program[str]:
    handle = yield Spawn(child, on_emit=lines.append, on_error=lambda e: errors.append(str(e)))
    if join:
        yield Join(handle, 5.0)
    return "parent done"


def drive(face: str, program: Program[str]) -> str:
    if face == "sync":
        result: str = SyncDriver(Answers()).run(program)
        return result
    return asyncio.run(_drive_async(program))


async def _drive_async(program: Program[str]) -> str:
    result = await AsyncDriver(AsyncAnswers()).run(program)
    await asyncio.sleep(0.05)  # a cancelled child gets to see its cancellation
    return result


@pytest.mark.parametrize("face", ["sync", "async"])
def test_a_joined_child_runs_to_its_end(face: str) -> None:
    lines: list[Any] = []
    errors: list[str] = []
    assert drive(face, parent(short(), lines, errors, join=True)) == "parent done"
    assert lines == ["only line"]
    assert errors == []


@pytest.mark.parametrize("face", ["sync", "async"])
def test_a_childs_error_goes_to_its_handler(face: str) -> None:
    lines: list[Any] = []
    errors: list[str] = []
    drive(face, parent(failing(), lines, errors, join=True))
    assert lines == ["before"]
    assert errors == ["stream broke"]


def test_a_child_does_not_outlive_its_parent_sync() -> None:
    lines: list[Any] = []
    SyncDriver(Answers()).run(parent(counting(), lines, [], join=False))
    at_end = len(lines)
    time.sleep(0.1)  # a child left running would emit about a hundred more lines
    assert len(lines) <= at_end + 1  # stopped at its next line


async def test_a_child_does_not_outlive_its_parent_async() -> None:
    lines: list[Any] = []
    await AsyncDriver(AsyncAnswers()).run(parent(counting(), lines, [], join=False))
    at_end = len(lines)
    await asyncio.sleep(0.1)
    assert len(lines) == at_end  # cancelled at once
