"""One read for many waits on the same finished job.

Several waits on one job (an Airflow DAG's sensor and its downstream trigger, a retried
task, the same job waited on from many tasks) see it finish together. Each used to read
the outcome on its own: the job's pods, node-0's log when the result is not in the
termination message, the job in full to tell whether a result was expected, the events
and the log tail of a failure; N waits made N of each. :class:`SharedReads` makes them
one: the first wait to ask for a key runs the read, the waits that ask while it runs
wait for its value (each gets a copy of its own), and a read that fails or is cancelled
is taken over by one of them, which then meets its own error if any.

Each :class:`~kf_trainer_core.programs.pod_batch.PodBatch` (one per namespace and event
loop) holds one; the read runs in the leading wait's own task.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, TypeVar

T = TypeVar("T")

#: What a follower hears when the read it waited for failed or was cancelled: it asks
#: again (one of the followers leads the next read, and meets its own error if any).
_AGAIN = object()


class SharedReads:
    """Concurrent reads of the same key, run once (see the module)."""

    def __init__(self) -> None:
        self._flights: dict[Hashable, asyncio.Future[Any]] = {}
        #: Reads run (for tests: one per key however many waits asked).
        self.runs = 0

    async def run(
        self,
        key: Hashable,
        read: Callable[[], Awaitable[T]],
        *,
        copy_value: Callable[[T], T] = copy.deepcopy,
    ) -> T:
        """The value of ``read()``, shared with the waits asking for ``key`` meanwhile:
        one of them runs it, the others wait for it and get ``copy_value`` of it (never
        the same mutable object as another caller)."""
        while True:
            flight = self._flights.get(key)
            if flight is None:
                return await self._lead(key, read)
            value = await asyncio.shield(flight)
            if value is not _AGAIN:
                return copy_value(value)

    async def _lead(self, key: Hashable, read: Callable[[], Awaitable[T]]) -> T:
        flight = self._flights[key] = asyncio.get_running_loop().create_future()
        self.runs += 1
        outcome: Any = _AGAIN
        try:
            outcome = await read()
            return outcome  # type: ignore[no-any-return]
        finally:
            del self._flights[key]
            flight.set_result(outcome)
