"""The controller's one worker thread: a queue of work items and a heap of timers.

Store changes and finished subprocesses post work items; timed steps sit in the heap,
each guarded by a :class:`~kf_trainer_core.testing.controller.state.Token` that
cancels it. Everything runs guarded: an unexpected exception is logged and the worker
carries on.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable

from kf_trainer_core.testing.controller.state import Token

_log = logging.getLogger(__name__)


class Worker:
    """Runs posted work and due timers on one thread; ``after_batch`` runs after each
    batch (the status flush)."""

    def __init__(self, clock_scale: float, after_batch: Callable[[], None]) -> None:
        self.clock_scale = clock_scale
        self.cv = threading.Condition()
        self._after_batch = after_batch
        self._queue: deque[Callable[[], None]] = deque()
        self._heap: list[tuple[float, int, Token, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._busy = False
        self._running = False
        self._thread: threading.Thread | None = None
        self._active_runs = 0

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> bool:
        """Start the thread; False when it runs already."""
        with self.cv:
            if self._running:
                return False
            self._running = True
        self._thread = threading.Thread(
            target=self._loop, name="kf-sim-trainer-controller", daemon=True
        )
        self._thread.start()
        return True

    def stop(self) -> bool:
        """Stop the thread (waiting for it); whether it was running."""
        with self.cv:
            was_running = self._running
            self._running = False
            self.cv.notify_all()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=10)
        self._thread = None
        return was_running

    def clear(self) -> None:
        """Drop queued work and pending timers."""
        with self.cv:
            self._queue.clear()
            self._heap.clear()

    def run_on_worker(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the worker and wait for it (directly when no worker runs or
        when called from the worker)."""
        thread = self._thread
        if thread is None or not thread.is_alive() or thread is threading.current_thread():
            fn()
            return
        done = threading.Event()

        def wrapped() -> None:
            try:
                fn()
            finally:
                done.set()

        self.post(wrapped)
        done.wait(30)

    # ------------------------------------------------------------------ work

    def post(self, fn: Callable[[], None]) -> None:
        with self.cv:
            self._queue.append(fn)
            self.cv.notify_all()

    def after(self, delay: float, token: Token, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the worker after ``delay`` scenario seconds (scaled), unless
        ``token`` is cancelled by then."""
        when = time.monotonic() + max(0.0, delay) * self.clock_scale
        with self.cv:
            heapq.heappush(self._heap, (when, next(self._seq), token, fn))
            self.cv.notify_all()

    # ------------------------------------------------------------------ runs and idleness

    def run_started(self) -> None:
        """A real run began: the worker is not idle until :meth:`run_finished`."""
        with self.cv:
            self._active_runs += 1

    def run_finished(self, report: Callable[[], None]) -> None:
        """Post a run's end to the worker, then release the idle counter (the queued
        item keeps the worker busy in between)."""
        self.post(report)
        with self.cv:
            self._active_runs -= 1
            self.cv.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self.cv:
            while True:
                if self._idle_locked():
                    return True
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self.cv.wait(min(remaining, 0.05))

    def _idle_locked(self) -> bool:
        if self._queue or self._busy or self._active_runs:
            return False
        return all(entry[2].cancelled for entry in self._heap)

    # ------------------------------------------------------------------ the loop

    def _loop(self) -> None:
        while True:
            with self.cv:
                while self._running:
                    if self._queue:
                        break
                    now = time.monotonic()
                    while self._heap and self._heap[0][2].cancelled:
                        heapq.heappop(self._heap)  # drop cancelled timers early
                    if self._heap and self._heap[0][0] <= now:
                        break
                    timeout = (self._heap[0][0] - now) if self._heap else None
                    self.cv.wait(timeout)
                if not self._running:
                    return
                items = list(self._queue)
                self._queue.clear()
                due: list[tuple[Token, Callable[[], None]]] = []
                now = time.monotonic()
                while self._heap and self._heap[0][0] <= now:
                    _, _, token, fn = heapq.heappop(self._heap)
                    if not token.cancelled:
                        due.append((token, fn))
                self._busy = True
            try:
                for fn in items:
                    guarded(fn)
                for token, fn in due:
                    # An earlier item of this batch (a deletion, a suspend) may have
                    # cancelled it meanwhile.
                    if not token.cancelled:
                        guarded(fn)
                guarded(self._after_batch)
            finally:
                with self.cv:
                    self._busy = False
                    self.cv.notify_all()


def guarded(fn: Callable[[], None]) -> None:
    """Run ``fn``; an exception is logged, not raised (a simulator bug must not kill
    the worker)."""
    try:
        fn()
    except Exception:
        _log.exception("simulated Trainer controller: internal error (ignored)")
