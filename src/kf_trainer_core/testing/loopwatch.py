"""Find what blocks an event loop: every callback the loop runs is timed, and those
that keep the process busy for longer than a threshold are recorded with the stack
they were blocked in.

An event loop shared by many waits (an Airflow triggerer, a Prefect worker running
async tasks, any program with an ``AsyncTrainerClient``) stalls every one of them for
as long as one callback runs. asyncio's debug mode reports slow callbacks by their wall
time, which on a loaded machine also counts the time the operating system gave to
other processes, so a threshold of 50 ms cannot be tested on a shared machine.
:class:`LoopWatch` measures, for each callback, its *blocked* time: the wall time less
the time the loop's thread sat runnable in the kernel's run queue, waiting for a core
(Linux reports it per thread in ``/proc/self/task/<tid>/schedstat``). What remains is
the callback's own work, synchronous I/O, and waiting for the GIL held by another thread
of the process — everything that the code run on the loop is answerable for. Where
that file is missing the wall time is used. A sampler thread records the loop thread's
stack while a callback runs long, so a report names the code that blocked.

Use it in a process of its own, installed before the code under test is imported
(imports made on the loop are part of what blocks)::

    watch = LoopWatch(threshold=0.05)
    watch.install()
    asyncio.run(main())
    watch.uninstall()
    print(watch.report())

It is a test tool: the product never imports it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import os
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

__all__ = ["LoopWatch", "SlowCallback"]

# How often the sampler looks at the running callback.
_SAMPLE_EVERY = 0.01
# Stack samples kept per slow callback (the first ones name where it was blocked).
_SAMPLES_KEPT = 4


@dataclass
class SlowCallback:
    """One callback that blocked the loop for ``blocked`` seconds (``wall`` by the
    clock, ``cpu`` of them on a core), with up to a few stack samples taken while it
    ran."""

    what: str
    wall: float
    cpu: float
    blocked: float
    gc: float
    stacks: list[list[str]] = field(default_factory=list)

    def mentions(self, fragment: str) -> bool:
        """Whether a frame of a sampled stack lies in a file whose path holds
        ``fragment``."""
        return any(fragment in line for stack in self.stacks for line in stack)

    def as_dict(self) -> dict[str, Any]:
        """JSON form."""
        return dataclasses.asdict(self)


def _describe(handle: asyncio.Handle) -> str:
    callback = getattr(handle, "_callback", None)
    owner = getattr(callback, "__self__", None)
    if isinstance(owner, asyncio.Task):
        coro = owner.get_coro()
        name = getattr(coro, "__qualname__", None) or repr(coro)
        return f"task {owner.get_name()} ({name})"
    return repr(callback)[:200]


class _RunQueue:
    """Nanoseconds a thread has spent runnable but not running (0 when unknown)."""

    def __init__(self) -> None:
        self._fd: int | None = None
        try:
            path = f"/proc/self/task/{threading.get_native_id()}/schedstat"
            self._fd = os.open(path, os.O_RDONLY)
        except OSError:
            self._fd = None

    def waited(self) -> float:
        if self._fd is None:
            return 0.0
        try:
            return int(os.pread(self._fd, 128, 0).split()[1]) / 1e9
        except (OSError, ValueError, IndexError):
            return 0.0

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _stack_of(frame: Any) -> list[str]:
    summary = traceback.extract_stack(frame, limit=40)
    return [f"{f.filename}:{f.lineno} {f.name}" for f in summary]


class LoopWatch:
    """Times each callback run by event loops of the thread that calls :meth:`install`.

    :param threshold: seconds of blocked time from which a callback is recorded.
    """

    def __init__(self, threshold: float = 0.05) -> None:
        self.threshold = threshold
        self.slow: list[SlowCallback] = []
        self.callbacks = 0
        self.max_cpu = 0.0
        self.max_wall = 0.0
        self.max_blocked = 0.0
        #: Seconds the garbage collector ran inside callbacks, and its longest run.
        self.gc_total = 0.0
        self.gc_longest = 0.0
        self._gc_spent = 0.0
        self._gc_since: float | None = None
        self._queue: _RunQueue | None = None
        self._thread = 0
        self._started: float | None = None
        self._samples: list[list[str]] = []
        self._original: Any = None
        self._stop = threading.Event()
        self._sampler: threading.Thread | None = None

    def install(self) -> None:
        """Start timing the callbacks of this thread's event loops."""
        self._thread = threading.get_ident()
        self._queue = queue = _RunQueue()
        gc.callbacks.append(self._on_gc)
        self._original = original = asyncio.events.Handle._run
        watch = self

        def timed_run(handle: asyncio.Handle) -> None:
            if threading.get_ident() != watch._thread:
                original(handle)
                return
            watch._samples = []
            gc0 = watch._gc_spent
            queued0 = queue.waited()
            cpu0 = time.thread_time()
            watch._started = wall0 = time.perf_counter()
            try:
                original(handle)
            finally:
                watch._started = None
                wall = time.perf_counter() - wall0
                cpu = time.thread_time() - cpu0
                queued = queue.waited() - queued0
                collected = watch._gc_spent - gc0
                # The collector's pauses are the interpreter's, sized by the whole
                # process's heap (the host's modules included): counted apart.
                blocked = max(0.0, wall - queued - collected)
                watch._account(handle, wall, cpu, blocked, collected)

        asyncio.events.Handle._run = timed_run  # type: ignore[method-assign,assignment]
        self._sampler = threading.Thread(target=self._sample, name="loopwatch", daemon=True)
        self._sampler.start()

    def uninstall(self) -> None:
        """Stop timing (idempotent)."""
        if self._original is not None:
            asyncio.events.Handle._run = self._original  # type: ignore[method-assign]
            self._original = None
        self._stop.set()
        if self._sampler is not None:
            self._sampler.join(1)
        if self._queue is not None:
            self._queue.close()
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if threading.get_ident() != self._thread:
            return
        if phase == "start":
            self._gc_since = time.perf_counter()
        elif self._gc_since is not None:
            spent = time.perf_counter() - self._gc_since
            self._gc_since = None
            self._gc_spent += spent
            self.gc_longest = max(self.gc_longest, spent)

    def _account(
        self, handle: asyncio.Handle, wall: float, cpu: float, blocked: float, collected: float
    ) -> None:
        self.callbacks += 1
        self.gc_total += collected
        self.max_cpu = max(self.max_cpu, cpu)
        self.max_wall = max(self.max_wall, wall)
        self.max_blocked = max(self.max_blocked, blocked)
        if blocked >= self.threshold:
            slow = SlowCallback(
                _describe(handle), wall, cpu, blocked, collected, list(self._samples)
            )
            self.slow.append(slow)

    def _sample(self) -> None:
        half = self.threshold / 4
        while not self._stop.wait(_SAMPLE_EVERY):
            started = self._started
            if started is None or time.perf_counter() - started < half:
                continue
            if len(self._samples) >= _SAMPLES_KEPT:
                continue
            frame = sys._current_frames().get(self._thread)
            if frame is not None and self._started == started:
                self._samples.append(_stack_of(frame))

    def report(self, limit: int = 10) -> str:
        """The slow callbacks, worst first, each with the innermost frames of its
        samples."""
        lines = [
            f"{len(self.slow)} of {self.callbacks} callbacks blocked the loop for "
            f">= {self.threshold * 1000:.0f} ms (worst: {self.max_blocked * 1000:.0f} ms "
            f"blocked, {self.max_cpu * 1000:.0f} ms CPU, {self.max_wall * 1000:.0f} ms wall); "
            f"garbage collection {self.gc_total * 1000:.0f} ms in all, longest "
            f"{self.gc_longest * 1000:.0f} ms (not counted as blocked)"
        ]
        for slow in sorted(self.slow, key=lambda s: -s.blocked)[:limit]:
            lines.append(
                f"- {slow.blocked * 1000:.0f} ms blocked ({slow.cpu * 1000:.0f} ms CPU, "
                f"{slow.wall * 1000:.0f} ms wall): {slow.what}"
            )
            for stack in slow.stacks[:2]:
                lines.extend(f"    {line}" for line in stack[-12:])
                lines.append("    --")
        return "\n".join(lines)
