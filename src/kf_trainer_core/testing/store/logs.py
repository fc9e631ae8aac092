"""Container logs of the test bed's pods: what the kubelet would keep and serve (the
query's rules: :mod:`kf_trainer_core.emulation.logs`)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from kf_trainer_core.emulation.logs import Line, select, stamp_of

_LogKey = tuple[str, str, str]


@dataclass
class _Stream:
    lines: list[Line] = field(default_factory=list)
    closed: bool = False


class PodLogs:
    """Container logs: line-timestamped, closable (follow streams end after draining).

    Writers (the simulated controller, tests) call :meth:`append` and :meth:`close`
    from any thread; readers poll :meth:`read_from` and register a wake-up with
    :meth:`listen` to follow without busy waiting.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._streams: dict[_LogKey, _Stream] = {}
        self._previous: dict[_LogKey, _Stream] = {}
        self._listeners: dict[_LogKey, list[Callable[[], None]]] = {}
        #: How far the nodes' clocks run ahead of this machine's (negative: behind).
        #: Log lines are stamped, and ``sinceSeconds`` measured, with the node's
        #: clock, as the kubelet does (see ``FaultInjector.skew_node_clock``).
        self.skew = timedelta(0)

    def now(self) -> datetime:
        """The nodes' clock: what stamps a log line written now."""
        return datetime.now(timezone.utc) + self.skew

    def append(
        self,
        namespace: str,
        pod: str,
        container: str,
        text: str,
        *,
        timestamp: datetime | None = None,
    ) -> None:
        """Append one or more lines (split on newlines; a trailing newline is optional).
        Each line is stored with ``timestamp`` or now; lines in one call get distinct,
        increasing timestamps so ``sinceTime`` can tell them apart."""
        parts = text.split("\n")
        if parts and parts[-1] == "" and len(parts) > 1:
            parts.pop()
        base = stamp_of(timestamp or self.now())
        key = (namespace, pod, container)
        with self._lock:
            s = self._streams.setdefault(key, _Stream())
            if s.closed:
                # A new container instance started (restart): keep the old as "previous".
                self._previous[key] = s
                s = self._streams[key] = _Stream()
            for i, line in enumerate(parts):
                s.lines.append((base + i * 1_000, line))  # a microsecond apart
            listeners = list(self._listeners.get(key, ()))
        for wake in listeners:
            wake()

    def close(self, namespace: str, pod: str, container: str) -> None:
        """The container terminated: follow streams end once they have drained."""
        key = (namespace, pod, container)
        with self._lock:
            self._streams.setdefault(key, _Stream()).closed = True
            listeners = list(self._listeners.get(key, ()))
        for wake in listeners:
            wake()

    def lines(
        self,
        namespace: str,
        pod: str,
        container: str,
        *,
        since: datetime | int | None = None,
        tail: int | None = None,
        previous: bool = False,
    ) -> list[Line]:
        """Stored ``(stamp, line)`` pairs (stamps in ns since the epoch), filtered by
        ``since`` (inclusive; a datetime or a stamp) and the last ``tail`` lines;
        ``previous`` reads the prior container instance."""
        key = (namespace, pod, container)
        with self._lock:
            s = (self._previous if previous else self._streams).get(key)
            out = list(s.lines) if s else []
        floor = stamp_of(since) if isinstance(since, datetime) else since
        return select(out, floor, tail)

    def read_from(
        self, namespace: str, pod: str, container: str, start: int
    ) -> tuple[list[Line], bool]:
        """Lines from index ``start`` on, and whether the stream is closed (for follow)."""
        with self._lock:
            s = self._streams.get((namespace, pod, container))
            if s is None:
                return [], False
            return s.lines[start:], s.closed

    def has_previous(self, namespace: str, pod: str, container: str) -> bool:
        """Whether a terminated earlier instance of the container left logs."""
        with self._lock:
            return (namespace, pod, container) in self._previous

    def is_closed(self, namespace: str, pod: str, container: str) -> bool:
        """Whether the container's current log stream is closed."""
        with self._lock:
            s = self._streams.get((namespace, pod, container))
            return bool(s and s.closed)

    def listen(
        self, namespace: str, pod: str, container: str, wake: Callable[[], None]
    ) -> Callable[[], None]:
        """Call ``wake()`` (from the writer's thread) on every append/close; returns an
        unregister function."""
        key = (namespace, pod, container)
        with self._lock:
            self._listeners.setdefault(key, []).append(wake)

        def unlisten() -> None:
            with self._lock:
                lst = self._listeners.get(key)
                if lst and wake in lst:
                    lst.remove(wake)
                if not lst:
                    self._listeners.pop(key, None)

        return unlisten

    def reset(self) -> None:
        """Forget every log; followers are woken so they can end."""
        with self._lock:
            for s in self._streams.values():
                s.closed = True
            listeners = [w for lst in self._listeners.values() for w in lst]
            self._streams.clear()
            self._previous.clear()
        for wake in listeners:
            wake()
