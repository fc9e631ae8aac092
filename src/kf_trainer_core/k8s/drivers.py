"""Run programs (see :mod:`kf_trainer_core.k8s.calls`) against a transport.

The two drivers are the only place where sync and async differ: how to wait, how to
perform one call. Retrying transient failures (with the shared :class:`RetryPolicy`)
and renewing credentials after a 401 happen here, for every call of every program.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, TypeVar

from kf_trainer_core.k8s.calls import (
    Await,
    CloseStream,
    Emit,
    OpenLogStream,
    OpenWatch,
    Program,
    ReadLine,
    Sleep,
)
from kf_trainer_core.k8s.errors import ApiError
from kf_trainer_core.k8s.retry import DEFAULT_POLICY, RetryPolicy

T = TypeVar("T")

#: Called with each call the driver performs (request accounting in tests, tracing).
CallHook = Callable[[Any], None]


def _close_all(streams: set[Any], *, abort: bool = False) -> None:
    """Close ``streams`` (``abort``: break them without waiting on a reader in another
    thread, and leave them listed for their run to close)."""
    for stream in list(streams):
        with contextlib.suppress(Exception):  # already broken: nothing to release
            if abort and hasattr(stream, "abort"):
                stream.abort()
            else:
                stream.close()
    if not abort:
        streams.clear()


class SyncDriver:
    """Runs programs with blocking I/O."""

    def __init__(
        self, transport: Any, policy: RetryPolicy = DEFAULT_POLICY, hook: CallHook | None = None
    ):
        self.transport = transport
        self.policy = policy
        self.hook = hook
        # Streams opened by the programs running now, each run's in a set of its own:
        # a run closes only its own when it ends (a log follower iterating on this
        # driver keeps its stream while other calls run and end), and
        # ``close_streams`` reaches all of them.
        self._runs: dict[int, set[Any]] = {}

    def close_streams(self, *, abort: bool = False) -> None:
        """Close every stream the running programs hold (a shutdown). From another
        thread, pass ``abort``: the streams are broken without waiting on the reader."""
        for owned in list(self._runs.values()):
            _close_all(owned, abort=abort)

    def _perform(self, effect: Any, owned: set[Any]) -> Any:
        if isinstance(effect, Sleep):
            time.sleep(effect.seconds)
            return None
        if isinstance(effect, Await):
            return effect.waker.wait(effect.timeout)
        if isinstance(effect, ReadLine):
            return self.transport.read_line(effect.stream)
        if isinstance(effect, CloseStream):
            owned.discard(effect.stream)
            effect.stream.close()
            return None
        renewed = False
        attempt = 0
        while True:
            if self.hook is not None:
                self.hook(effect)
            try:
                if isinstance(effect, (OpenWatch, OpenLogStream)):
                    stream = self.transport.open_stream(effect)
                    owned.add(stream)
                    return stream
                return self.transport.perform(effect)
            except ApiError as err:
                if err.unauthorized and not renewed:
                    renewed = True
                    self.transport.connect()
                    continue
                if not self.policy.should_retry(attempt, err):
                    raise
                time.sleep(self.policy.delay(attempt, err))
                attempt += 1

    def iterate(self, program: Program[Any]) -> Iterator[Any]:
        """Run ``program``, yielding what it emits; its return value is the
        generator's return value (``yield from`` gets it)."""
        value: Any = None
        error: BaseException | None = None
        owned: set[Any] = set()
        self._runs[id(owned)] = owned
        try:
            while True:
                try:
                    effect = program.throw(error) if error is not None else program.send(value)
                except StopIteration as stop:
                    return stop.value  # type: ignore[no-any-return]
                value, error = None, None
                if isinstance(effect, Emit):
                    yield effect.value
                    continue
                try:
                    value = self._perform(effect, owned)
                except ApiError as exc:
                    error = exc
        finally:
            program.close()
            _close_all(owned)
            self._runs.pop(id(owned), None)

    def run(self, program: Program[T], on_emit: Callable[[Any], None] | None = None) -> T:
        """Run ``program`` to its end and return its value."""
        gen = self.iterate(program)
        while True:
            try:
                item = next(gen)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
            if on_emit is not None:
                on_emit(item)


class AsyncDriver:
    """Runs the same programs inside an event loop."""

    def __init__(
        self, transport: Any, policy: RetryPolicy = DEFAULT_POLICY, hook: CallHook | None = None
    ):
        self.transport = transport
        self.policy = policy
        self.hook = hook
        # Each running program's streams, as in SyncDriver: a run closes only its own.
        self._runs: dict[int, set[Any]] = {}

    def close_streams(self) -> None:
        """Close every stream the running programs hold (safe from another thread: a
        blocked read then returns)."""
        for owned in list(self._runs.values()):
            _close_all(owned)

    async def _perform(self, effect: Any, owned: set[Any]) -> Any:
        if isinstance(effect, Sleep):
            await asyncio.sleep(effect.seconds)
            return None
        if isinstance(effect, Await):
            return await effect.waker.wait(effect.timeout)
        if isinstance(effect, ReadLine):
            return await self.transport.read_line(effect.stream)
        if isinstance(effect, CloseStream):
            owned.discard(effect.stream)
            effect.stream.close()
            return None
        renewed = False
        attempt = 0
        while True:
            if self.hook is not None:
                self.hook(effect)
            try:
                if isinstance(effect, (OpenWatch, OpenLogStream)):
                    stream = await self.transport.open_stream(effect)
                    owned.add(stream)
                    return stream
                return await self.transport.perform(effect)
            except ApiError as err:
                if err.unauthorized and not renewed:
                    renewed = True
                    await self.transport.connect()
                    continue
                if not self.policy.should_retry(attempt, err):
                    raise
                await asyncio.sleep(self.policy.delay(attempt, err))
                attempt += 1

    async def run(self, program: Program[T], on_emit: Callable[[Any], None] | None = None) -> T:
        """Run ``program`` to its end and return its value."""
        value: Any = None
        error: BaseException | None = None
        owned: set[Any] = set()
        self._runs[id(owned)] = owned
        try:
            while True:
                try:
                    effect = program.throw(error) if error is not None else program.send(value)
                except StopIteration as stop:
                    return stop.value  # type: ignore[no-any-return]
                value, error = None, None
                if isinstance(effect, Emit):
                    if on_emit is not None:
                        on_emit(effect.value)
                    continue
                try:
                    value = await self._perform(effect, owned)
                except ApiError as exc:
                    error = exc
        finally:
            program.close()
            _close_all(owned)
            self._runs.pop(id(owned), None)

    async def iterate(self, program: Program[Any]) -> AsyncIterator[Any]:
        """Run ``program``, yielding what it emits."""
        value: Any = None
        error: BaseException | None = None
        owned: set[Any] = set()
        self._runs[id(owned)] = owned
        try:
            while True:
                try:
                    effect = program.throw(error) if error is not None else program.send(value)
                except StopIteration:
                    return
                value, error = None, None
                if isinstance(effect, Emit):
                    yield effect.value
                    continue
                try:
                    value = await self._perform(effect, owned)
                except ApiError as exc:
                    error = exc
        finally:
            program.close()
            _close_all(owned)
            self._runs.pop(id(owned), None)
