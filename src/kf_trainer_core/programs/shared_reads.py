"""One read for many waits on the same finished job.

Several waits on one job (an Airflow DAG's sensor and its downstream trigger, a retried
task, the same job waited on from many tasks) see it finish together. Each used to read
the outcome on its own: the job's pods, node-0's log when the result is not in the
termination message, the job in full to tell whether a result was expected, the events
and the log tail of a failure; N waits made N of each. :class:`SharedReads` makes them
one: the first wait to ask for a key runs the read, the waits that ask while it runs
wait for its value (each gets a copy of its own), and a read that fails or is cancelled
is taken over by one of them, which then meets its own error if any.

Each :class:`~kf_trainer_core.programs.pod_batch.PodBatch` (one per namespace and
process, or event loop) holds one. As with the batch, the read runs inside the leading
wait's own program, so it is written once for the sync and the async client; only the
waker differs.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

from kf_trainer_core.k8s.calls import Await, Program

T = TypeVar("T")

#: How a wait runs a read shared under a key (:meth:`SharedReads.sharer`).
Share = Callable[[Hashable, Callable[[], Program[Any]]], Program[Any]]

#: A waiting follower looks again after this long without news. Every end of a read
#: (its value, an error, a cancellation) wakes its followers: a guard only.
FOLLOWER_PATIENCE = 30.0


class _Flight:
    """One read in progress and the wakers of the waits that wait for it."""

    __slots__ = ("done", "ok", "value", "wakers")

    def __init__(self) -> None:
        self.done = False
        self.ok = False
        self.value: Any = None
        self.wakers: list[Any] = []


class SharedReads:
    """Concurrent reads of the same key, run once (see the module)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._flights: dict[Hashable, _Flight] = {}
        #: Reads run (for tests: one per key however many waits asked).
        self.runs = 0

    def sharer(self, waker: Any) -> Share:
        """How one wait, woken through ``waker`` (its own), runs its shared reads."""

        def share(key: Hashable, read: Callable[[], Program[Any]]) -> Program[Any]:
            return self.run(key, read, waker)

        return share

    def run(
        self,
        key: Hashable,
        read: Callable[[], Program[T]],
        waker: Any,
        *,
        copy_value: Callable[[T], T] = copy.deepcopy,
    ) -> Program[T]:
        """The value of ``read()``, shared with the waits asking for ``key`` meanwhile:
        one of them runs it, the others wait (woken through their ``waker``) and get
        ``copy_value`` of it (never the same mutable object as another caller)."""
        while True:
            with self._lock:
                flight = self._flights.get(key)
                leading = flight is None
                if flight is None:
                    flight = self._flights[key] = _Flight()
                    self.runs += 1
                else:
                    flight.wakers.append(waker)
            if leading:
                return (yield from self._lead(key, flight, read))
            while not flight.done:
                yield Await(waker, FOLLOWER_PATIENCE)
            if flight.ok:
                value: T = flight.value
                return copy_value(value)
            # The read failed or its wait was cancelled: ask again (one of the
            # followers leads the next read).

    def _lead(self, key: Hashable, flight: _Flight, read: Callable[[], Program[T]]) -> Program[T]:
        ok = False
        value: Any = None
        try:
            value = yield from read()
            ok = True
            return value  # type: ignore[no-any-return]
        finally:
            with self._lock:
                del self._flights[key]
                flight.ok, flight.value, flight.done = ok, value, True
                wakers = flight.wakers
            for waker in wakers:
                waker.notify()
