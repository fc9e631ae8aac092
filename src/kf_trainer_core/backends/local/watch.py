"""Watches of the local backend: ``{"type", "object"}`` JSON lines from the store's
change log, as the apiserver streams them (an object entering or leaving the watch's
selector is ADDED or DELETED, by the registry's rule: the log keeps a modified object's
previous state for it), and the registry of open watches that lets a
read wait until this process's informers hold what it returns."""

from __future__ import annotations

import contextlib
import json
import threading
import time
import weakref
from collections import deque
from pathlib import Path

from kf_trainer_core.backends.local._common import Paths
from kf_trainer_core.backends.local.logs import PENDING
from kf_trainer_core.backends.local.recovery import check_supervisors
from kf_trainer_core.backends.local.store import TRAINJOBS, Kind, Selector, Store
from kf_trainer_core.emulation.registry import parse_rv
from kf_trainer_core.emulation.watch import bookmark_line, dumps, error_line, event_line, too_old

#: How often a stream looks for news (the change log, a growing log file).
POLL_SECONDS = 0.05
#: A watch sends a BOOKMARK (its current version) when quiet this long.
BOOKMARK_SECONDS = 2.0


class _Streams:
    """The watch streams open in this process, so that a read can wait until they
    have delivered what it returns (see
    :meth:`~kf_trainer_core.backends.local.api.LocalApi.get`)."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.open: weakref.WeakSet[WatchStream] = weakref.WeakSet()

    def catch_up(self, db: str, kind: Kind, namespace: str | None, rv: int, timeout: float) -> None:
        """Wait (at most ``timeout``) until every open watch of ``kind`` covering
        ``namespace`` has handed out everything up to version ``rv`` and its reader
        came back for more — that is, took it in."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                lagging = [
                    s
                    for s in self.open
                    if s.db == db
                    and s.kind is kind
                    and not s.closed
                    and (s.namespace is None or namespace is None or s.namespace == namespace)
                    and s.acked < rv
                ]
                if not lagging:
                    return
                for stream in lagging:
                    stream.wake.set()
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                self.cond.wait(min(remaining, POLL_SECONDS))


STREAMS = _Streams()


class WatchStream:
    """A watch: ``{"type", "object"}`` JSON lines from the change log after a version,
    BOOKMARKs when quiet, an ERROR 410 when that version was pruned; it ends after
    ``timeout_seconds``, as the apiserver ends a watch."""

    def __init__(
        self,
        db: Path,
        kind: Kind,
        selector: Selector,
        resource_version: str | None,
        timeout_seconds: int,
        bookmarks: bool,
    ) -> None:
        self.store = Store(db, init_schema=False)
        self.db = str(db)
        self.paths = Paths(Path(db).parent)
        self.kind = kind
        self.namespace = selector.namespace
        self.selector = selector
        self.bookmarks = bookmarks
        self.deadline = time.monotonic() + max(1, timeout_seconds)
        self.buffer: deque[bytes] = deque()
        self.closed = False
        self.last_sent = time.monotonic()
        #: Set to poll now instead of after the interval (a reader waits for us).
        self.wake = threading.Event()
        #: Every change up to this version was handed out and taken in by the reader.
        self.acked = 0
        if resource_version in (None, "", "0"):
            # "Any version": the current objects as ADDED, then what follows.
            items, rv = self.store.select(kind, selector)
            self.buffer.extend(event_line("ADDED", dumps(item)) for item in items)
            self.cursor = rv
        else:
            try:
                self.cursor = parse_rv(str(resource_version))
            except Exception:
                self.store.close()
                raise
            self.acked = self.cursor
        with STREAMS.cond:
            STREAMS.open.add(self)

    def _ack(self) -> None:
        if self.cursor > self.acked:
            with STREAMS.cond:
                self.acked = self.cursor
                STREAMS.cond.notify_all()

    def poll(self) -> bytes | None:
        """The next line, ``None`` at the end, or :data:`PENDING`."""
        if self.buffer:
            self.last_sent = time.monotonic()
            return self.buffer.popleft()
        if self.closed:
            return None
        # The reader is back with the buffer drained: it has taken in all it was given.
        self._ack()
        if self.kind is TRAINJOBS:
            # Waits watch here: a job whose supervisor died turns Failed in the change
            # log that this stream reads next.
            check_supervisors(self.paths, self.store)
        now = time.monotonic()
        if now >= self.deadline:
            self.close()
            return None
        limit = 500
        changes, current, horizon = self.store.changes(
            self.kind, self.namespace, self.cursor, limit
        )
        if self.cursor < horizon:
            self.close()
            return error_line(too_old(self.cursor, horizon))
        for change in changes:
            # The change log holds the object as the line carries it: parsed only to
            # be matched against a selector (the namespace was matched in SQL).
            if self.selector.everything:
                self.buffer.append(event_line(change.type, change.data.encode()))
                continue
            obj = json.loads(change.data)
            previous = None if change.prev is None else json.loads(change.prev)
            chosen = self.selector.reported(change.type, obj, previous)
            if chosen is not None:
                data = change.data.encode() if chosen[1] is obj else dumps(chosen[1])
                self.buffer.append(event_line(chosen[0], data))
        if len(changes) >= limit:
            self.cursor = changes[-1].rv
        else:
            self.cursor = max(current, self.cursor)
        if self.buffer:
            self.last_sent = now
            return self.buffer.popleft()
        self._ack()  # nothing of ours up to the cursor
        if self.bookmarks and now - self.last_sent >= BOOKMARK_SECONDS:
            self.last_sent = now
            return bookmark_line(self.kind, self.cursor)
        return PENDING

    def close(self) -> None:
        with STREAMS.cond:
            STREAMS.open.discard(self)
            STREAMS.cond.notify_all()
        if not self.closed:
            self.closed = True
            with contextlib.suppress(Exception):
                self.store.close()
