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


class SyncDriver:
    """Runs programs with blocking I/O."""

    def __init__(
        self, transport: Any, policy: RetryPolicy = DEFAULT_POLICY, hook: CallHook | None = None
    ):
        self.transport = transport
        self.policy = policy
        self.hook = hook
        # Streams a program opened and has not closed: closed when it ends, however.
        self._streams: set[Any] = set()

    def close_streams(self, *, abort: bool = False) -> None:
        """Close every stream a running program holds. From another thread, pass
        ``abort``: the streams are broken without waiting on the reader."""
        for stream in list(self._streams):
            with contextlib.suppress(Exception):  # already broken: nothing to release
                if abort and hasattr(stream, "abort"):
                    stream.abort()
                else:
                    stream.close()
        if not abort:
            self._streams.clear()

    def _perform(self, effect: Any) -> Any:
        if isinstance(effect, Sleep):
            time.sleep(effect.seconds)
            return None
        if isinstance(effect, Await):
            return effect.waker.wait(effect.timeout)
        if isinstance(effect, ReadLine):
            return self.transport.read_line(effect.stream)
        if isinstance(effect, CloseStream):
            self._streams.discard(effect.stream)
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
                    self._streams.add(stream)
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
                    value = self._perform(effect)
                except ApiError as exc:
                    error = exc
        finally:
            program.close()
            self.close_streams()

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
        # Streams a program opened and has not closed: closed when it ends, however.
        self._streams: set[Any] = set()

    def close_streams(self) -> None:
        """Close every stream a running program holds (safe from another thread: a
        blocked read then returns)."""
        for stream in list(self._streams):
            with contextlib.suppress(Exception):  # already broken: nothing to release
                stream.close()
        self._streams.clear()

    async def _perform(self, effect: Any) -> Any:
        if isinstance(effect, Sleep):
            await asyncio.sleep(effect.seconds)
            return None
        if isinstance(effect, Await):
            return await effect.waker.wait(effect.timeout)
        if isinstance(effect, ReadLine):
            return await self.transport.read_line(effect.stream)
        if isinstance(effect, CloseStream):
            self._streams.discard(effect.stream)
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
                    self._streams.add(stream)
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
                    value = await self._perform(effect)
                except ApiError as exc:
                    error = exc
        finally:
            program.close()
            self.close_streams()

    async def iterate(self, program: Program[Any]) -> AsyncIterator[Any]:
        """Run ``program``, yielding what it emits."""
        value: Any = None
        error: BaseException | None = None
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
                    value = await self._perform(effect)
                except ApiError as exc:
                    error = exc
        finally:
            program.close()
            self.close_streams()
