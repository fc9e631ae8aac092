"""How every request of the suite is made: :class:`Api` performs one
:mod:`call <kf_trainer_core.k8s.calls>` against a transport — the ``kubernetes_asyncio``
one of :mod:`kf_trainer_core.backends.kubernetes.transport` or the local backend's —
retrying what is transient with the shared :class:`RetryPolicy`, renewing credentials once
after a 401, and telling a hook of every try (request accounting in tests, tracing).

A call is data (what to ask); the transport turns it into a request and its answer into
JSON. Everything above — reads, submits, waits, deletes — awaits ``api(call)``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, Protocol

from kf_trainer_core.k8s.calls import Call, OpenLogStream, OpenWatch
from kf_trainer_core.k8s.errors import ApiError
from kf_trainer_core.k8s.retry import DEFAULT_POLICY, RetryPolicy

__all__ = ["Api", "CallHook", "Lines", "TransportProtocol"]

#: Called with each call, before each try of it.
CallHook = Callable[[Any], None]

#: Seconds of work after which reading a stream yields to the event loop: lines already
#: buffered are read without the loop's other tasks getting a turn otherwise, and a
#: burst of watch events would run as one long callback (a shared loop may be held for
#: well under ~50 ms).
SLICE_SECONDS = 0.005


class TransportProtocol(Protocol):
    """What performs calls (see :mod:`kf_trainer_core.backends`)."""

    async def connect(self) -> None:
        """(Re)load credentials: called again after a 401."""

    async def perform(self, call: Call) -> Any:
        """One request; JSON answers as dicts, logs as text. Raises ApiError."""

    async def open_stream(self, call: OpenWatch | OpenLogStream) -> Any:
        """A watch or log stream (it has ``close()``) for :meth:`read_line`."""

    async def read_line(self, stream: Any) -> bytes | None:
        """The stream's next line, ``None`` when the server ended it."""

    async def close(self) -> None:
        """Release connections."""


class Api:
    """Calls against one transport, with retries, renewal and a hook."""

    def __init__(
        self,
        transport: TransportProtocol,
        policy: RetryPolicy = DEFAULT_POLICY,
        hook: CallHook | None = None,
    ) -> None:
        self.transport = transport
        self.policy = policy
        self.hook = hook

    async def __call__(self, call: Call, via: Callable[[Any], Awaitable[Any]] | None = None) -> Any:
        """The call's answer; an :class:`ApiError` once retries are spent. ``via`` is
        what makes each try: the transport's ``perform`` unless said (:meth:`stream`
        passes its ``open_stream``). The tries are made here, not in a helper, so that
        a traceback from the transport is one frame away from the operation that asked."""
        perform = self.transport.perform if via is None else via
        attempt, renewed = 0, False
        limit = getattr(call, "attempts", None) or self.policy.attempts
        while True:
            if self.hook is not None:
                self.hook(call)
            try:
                return await perform(call)
            except ApiError as err:
                if err.unauthorized and not renewed:
                    # An exec plugin runs anew instead of replaying an expired token.
                    renewed = True
                    await self.transport.connect()
                    continue
                if not (self.policy.should_retry(attempt, err) and attempt + 1 < limit):
                    raise
                await self.sleep(self.policy.delay(attempt, err))
                attempt += 1

    @asynccontextmanager
    async def stream(self, call: OpenWatch | OpenLogStream) -> AsyncIterator[Lines]:
        """A watch or a followed log, opened with retries, closed when the block ends."""
        handle = await self(call, via=self.transport.open_stream)
        try:
            yield Lines(self.transport, handle)
        finally:
            handle.close()

    async def sleep(self, seconds: float) -> None:
        """Pause between tries, rounds and polls: every wait on time of the operations
        goes through here (a test's Api answers it at once and records it)."""
        await asyncio.sleep(seconds)

    async def close(self) -> None:
        await self.transport.close()


class Lines:
    """A stream's lines (``bytes``), until the server ends it; a dead connection
    (the transport's idle timeout) raises :class:`ApiError`."""

    def __init__(self, transport: TransportProtocol, handle: Any) -> None:
        self._transport = transport
        self._handle = handle
        self._slice = time.perf_counter()

    def __aiter__(self) -> Lines:
        return self

    async def __anext__(self) -> bytes:
        if time.perf_counter() - self._slice > SLICE_SECONDS:
            await asyncio.sleep(0)
            self._slice = time.perf_counter()
        line = await self._transport.read_line(self._handle)
        if line is None:
            raise StopAsyncIteration
        return line
