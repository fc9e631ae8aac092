"""Run programs (see :mod:`kf_trainer_core.k8s.calls`) against a transport.

How a program is advanced — results sent in, API errors thrown in, retries with the
shared :class:`RetryPolicy`, credentials renewed after a 401, streams owned and closed,
children spawned and stopped — is written once, in :class:`_Run`. The two drivers only
perform the I/O a run asks for: :class:`SyncDriver` blocking, :class:`AsyncDriver`
awaiting. Transports are typed by :class:`SyncTransportProtocol` and
:class:`AsyncTransportProtocol` (the ``kubernetes`` / ``kubernetes_asyncio`` transports of
:mod:`kf_trainer_core.backends.kubernetes.transport` and the local backend's of
:mod:`kf_trainer_core.backends.local.transport`).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from kf_trainer_core.k8s.calls import (
    Await,
    Call,
    CloseStream,
    Effect,
    Emit,
    Join,
    OpenLogStream,
    OpenWatch,
    Program,
    ReadLine,
    Sleep,
    Spawn,
)
from kf_trainer_core.k8s.errors import ApiError
from kf_trainer_core.k8s.retry import DEFAULT_POLICY, RetryPolicy

T = TypeVar("T")

#: Seconds of work after which an async run yields to its event loop (see
#: ``AsyncDriver._steps``): well under the ~50 ms a shared loop may be held.
_SLICE = 0.005

#: Called with each call the driver performs (request accounting in tests, tracing).
CallHook = Callable[[Any], None]


class SyncTransportProtocol(Protocol):
    """What :class:`SyncDriver` performs calls with (blocking)."""

    def connect(self) -> None:
        """(Re)load credentials: called again after a 401."""

    def perform(self, call: Call) -> Any:
        """One request; JSON answers as dicts, logs as text. Raises ApiError."""

    def open_stream(self, call: OpenWatch | OpenLogStream) -> Any:
        """A watch or log stream (it has ``close()``) for :meth:`read_line`."""

    def read_line(self, stream: Any) -> bytes | None:
        """The stream's next line, ``None`` when the server ended it."""

    def close(self) -> None:
        """Release connections."""


class AsyncTransportProtocol(Protocol):
    """What :class:`AsyncDriver` performs calls with (the same surface, awaited)."""

    async def connect(self) -> None: ...

    async def perform(self, call: Call) -> Any: ...

    async def open_stream(self, call: OpenWatch | OpenLogStream) -> Any: ...

    async def read_line(self, stream: Any) -> bytes | None: ...

    async def close(self) -> None: ...


class SyncDriverProtocol(Protocol):
    """What runs a program with blocking I/O (an informer's thread, a sync client)."""

    transport: SyncTransportProtocol

    def run(self, program: Program[T], on_emit: Callable[[Any], None] | None = None) -> T: ...

    def iterate(self, program: Program[Any]) -> Iterator[Any]: ...

    def close_streams(self, *, abort: bool = False) -> None: ...


class AsyncDriverProtocol(Protocol):
    """What runs a program inside an event loop."""

    transport: AsyncTransportProtocol

    async def run(self, program: Program[T], on_emit: Callable[[Any], None] | None = None) -> T: ...

    def iterate(self, program: Program[Any]) -> AsyncIterator[Any]: ...

    def close_streams(self, *, abort: bool = False) -> None: ...


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


@dataclass(frozen=True)
class _Reconnect:
    """Internal effect: reload the transport's credentials (after a 401)."""


@dataclass
class _Failed:
    """An API error a driver met performing an effect, for the run to handle."""

    error: ApiError


class _Child:
    """A program spawned by another (see :class:`~kf_trainer_core.k8s.calls.Spawn`):
    a thread or a task, and how to stop it."""

    def __init__(self, handle: Any, stop: Callable[[], None]) -> None:
        self.handle = handle
        self.stop = stop


class _Run(Generic[T]):
    """One program's run: the trampoline both drivers share.

    :meth:`next_effect` advances the program to the next effect a driver must perform
    (``None`` once it returned, its value in :attr:`result`); :meth:`settle` gives the
    driver's outcome back. Emits with a sink, stream closes, retries and renewals are
    handled here, so the drivers differ only in how they perform I/O."""

    def __init__(self, program: Program[T], driver: _DriverBase[Any]) -> None:
        self.program = program
        self.driver = driver
        self.owned: set[Any] = set()  # streams opened by this run
        self.children: list[_Child] = []  # programs it spawned
        self.result: Any = None
        self._value: Any = None
        self._error: BaseException | None = None
        self._pending: list[Effect | _Reconnect] = []  # a retry's sleep, then the call
        self._call: Effect | None = None  # the call in flight, while it is retried
        self._attempt = 0
        self._renewed = False
        driver._runs[id(self.owned)] = self.owned

    def __enter__(self) -> _Run[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """End the run: close the program, its streams, and stop its children (a
        follower spawned by a program does not outlive it)."""
        self.program.close()
        for child in self.children:
            child.stop()
        _close_all(self.owned)
        self.driver._runs.pop(id(self.owned), None)

    def next_effect(self) -> Effect | _Reconnect | None:
        while True:
            if self._pending:
                effect = self._pending.pop(0)
                if self._call is effect:
                    self._hook(effect)
                return effect
            error, self._error = self._error, None
            try:
                effect = (
                    self.program.throw(error)
                    if error is not None
                    else self.program.send(self._value)
                )
            except StopIteration as stop:
                self.result = stop.value
                return None
            self._value = None
            if isinstance(effect, Emit) and effect.to is not None:
                effect.to(effect.value)
            elif isinstance(effect, CloseStream):
                self.owned.discard(effect.stream)
                effect.stream.close()
            elif isinstance(effect, (Sleep, Await, ReadLine, Emit, Spawn, Join)):
                return effect
            else:  # an API call: retried and renewed here until it settles
                self._call, self._attempt, self._renewed = effect, 0, False
                self._hook(effect)
                return effect

    def _hook(self, effect: Effect) -> None:
        if self.driver.hook is not None:
            self.driver.hook(effect)

    def settle(self, outcome: Any, effect: Effect | _Reconnect) -> None:
        """The driver's outcome of ``effect``: its value, or a :class:`_Failed`."""
        call = self._call
        if call is None or effect is not call:
            if call is not None:  # a retry's pause or a renewal, before the call again
                if isinstance(outcome, _Failed):
                    self._error, self._call, self._pending = outcome.error, None, []
            elif isinstance(outcome, _Failed):
                self._error = outcome.error
            else:
                if isinstance(effect, Spawn):
                    self.children.append(outcome)
                self._value = outcome
            return
        self._call = None
        if not isinstance(outcome, _Failed):
            if isinstance(effect, (OpenWatch, OpenLogStream)):
                self.owned.add(outcome)
            self._value = outcome
            return
        err = outcome.error
        policy = self.driver.policy
        if err.unauthorized and not self._renewed:
            self._renewed = True
            self._call, self._pending = call, [_Reconnect(), call]
        elif policy.should_retry(self._attempt, err) and self._attempt + 1 < (
            getattr(call, "attempts", None) or policy.attempts
        ):
            self._call, self._pending = call, [Sleep(policy.delay(self._attempt, err)), call]
            self._attempt += 1
        else:
            self._error = err


TransportT = TypeVar("TransportT", SyncTransportProtocol, AsyncTransportProtocol)


class _DriverBase(Generic[TransportT]):
    def __init__(
        self,
        transport: TransportT,
        policy: RetryPolicy = DEFAULT_POLICY,
        hook: CallHook | None = None,
    ) -> None:
        self.transport: TransportT = transport
        self.policy = policy
        self.hook = hook
        # Streams opened by the programs running now, each run's in a set of its own:
        # a run closes only its own when it ends (a log follower iterating on this
        # driver keeps its stream while other calls run and end), and
        # ``close_streams`` reaches all of them.
        self._runs: dict[int, set[Any]] = {}

    def close_streams(self, *, abort: bool = False) -> None:
        """Close every stream the running programs hold (a shutdown). From another
        thread, pass ``abort``: the streams are broken without waiting on the reader
        (an async driver's streams: a blocked read then returns)."""
        for owned in list(self._runs.values()):
            _close_all(owned, abort=abort)


class SyncDriver(_DriverBase[SyncTransportProtocol]):
    """Runs programs with blocking I/O."""

    def _perform(self, effect: Any) -> Any:
        try:
            if isinstance(effect, Sleep):
                return time.sleep(effect.seconds)
            if isinstance(effect, Await):
                return effect.waker.wait(effect.timeout)
            if isinstance(effect, ReadLine):
                return self.transport.read_line(effect.stream)
            if isinstance(effect, Spawn):
                return self._spawn(effect)
            if isinstance(effect, Join):
                return self._join(effect)
            if isinstance(effect, _Reconnect):
                return self.transport.connect()
            if isinstance(effect, (OpenWatch, OpenLogStream)):
                return self.transport.open_stream(effect)
            return self.transport.perform(effect)
        except ApiError as err:
            return _Failed(err)

    def _spawn(self, spawn: Spawn) -> _Child:
        # Its own driver over the same transport: a run's streams stay its own.
        driver = SyncDriver(self.transport, self.policy, self.hook)
        stop = threading.Event()

        def body() -> None:
            try:
                for item in driver.iterate(spawn.program):
                    if spawn.on_emit is not None:
                        spawn.on_emit(item)
                    if stop.is_set():
                        return
            except Exception as exc:
                if spawn.on_error is None:
                    raise
                spawn.on_error(exc)

        thread = threading.Thread(target=body, name=spawn.name, daemon=True)
        thread.start()
        return _Child(thread, stop.set)

    @staticmethod
    def _join(join: Join) -> None:
        child: _Child = join.child
        child.handle.join(join.timeout)
        child.stop()

    def iterate(self, program: Program[Any]) -> Iterator[Any]:
        """Run ``program``, yielding what it emits; its return value is the
        generator's return value (``yield from`` gets it)."""
        with _Run(program, self) as run:
            while (effect := run.next_effect()) is not None:
                if isinstance(effect, Emit):
                    yield effect.value
                else:
                    run.settle(self._perform(effect), effect)
            return run.result  # type: ignore[no-any-return]

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


@dataclass
class _Done:
    value: Any


class AsyncDriver(_DriverBase[AsyncTransportProtocol]):
    """Runs the same programs inside an event loop."""

    async def _perform(self, effect: Any) -> Any:
        try:
            if isinstance(effect, Sleep):
                return await asyncio.sleep(effect.seconds)
            if isinstance(effect, Await):
                return await effect.waker.wait(effect.timeout)
            if isinstance(effect, ReadLine):
                return await self.transport.read_line(effect.stream)
            if isinstance(effect, Spawn):
                return self._spawn(effect)
            if isinstance(effect, Join):
                return await self._join(effect)
            if isinstance(effect, _Reconnect):
                return await self.transport.connect()
            if isinstance(effect, (OpenWatch, OpenLogStream)):
                return await self.transport.open_stream(effect)
            return await self.transport.perform(effect)
        except ApiError as err:
            return _Failed(err)

    def _spawn(self, spawn: Spawn) -> _Child:
        driver = AsyncDriver(self.transport, self.policy, self.hook)

        async def body() -> None:
            try:
                async for item in driver.iterate(spawn.program):
                    if spawn.on_emit is not None:
                        spawn.on_emit(item)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if spawn.on_error is None:
                    raise
                spawn.on_error(exc)

        task = asyncio.get_running_loop().create_task(body(), name=spawn.name)

        def stop() -> None:
            task.cancel()

        return _Child(task, stop)

    @staticmethod
    async def _join(join: Join) -> None:
        task: asyncio.Task[None] = join.child.handle
        try:
            await asyncio.wait_for(asyncio.shield(task), join.timeout)
        except (asyncio.TimeoutError, Exception):
            task.cancel()

    async def _steps(self, program: Program[Any]) -> AsyncGenerator[Emit | _Done, None]:
        # An effect whose answer is already there (lines buffered on a watch stream)
        # is awaited without the task giving up the loop: a burst of events would run
        # as one long callback. Past a slice of work, the task yields to the loop.
        slice_start = time.perf_counter()
        with _Run(program, self) as run:
            while (effect := run.next_effect()) is not None:
                if isinstance(effect, Emit):
                    yield effect
                else:
                    run.settle(await self._perform(effect), effect)
                if time.perf_counter() - slice_start > _SLICE:
                    await asyncio.sleep(0)
                    slice_start = time.perf_counter()
            yield _Done(run.result)

    async def run(self, program: Program[T], on_emit: Callable[[Any], None] | None = None) -> T:
        """Run ``program`` to its end and return its value."""
        steps = self._steps(program)
        try:
            async for step in steps:
                if isinstance(step, _Done):
                    return step.value  # type: ignore[no-any-return]
                if on_emit is not None:
                    on_emit(step.value)
        finally:
            await steps.aclose()
        raise AssertionError("unreachable: a run ends with its result")  # pragma: no cover

    async def iterate(self, program: Program[Any]) -> AsyncIterator[Any]:
        """Run ``program``, yielding what it emits."""
        steps = self._steps(program)
        try:
            async for step in steps:
                if isinstance(step, _Done):
                    return
                yield step.value
        finally:
            await steps.aclose()
