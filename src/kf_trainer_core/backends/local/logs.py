"""Container logs as files: one ``<RFC3339Nano> <text>`` line per log line, as the
kubelet's CRI log files keep them; ``timestamps``, ``sinceTime``, ``tailLines`` and
``limitBytes`` are the test bed's rules (:mod:`kf_trainer_core.emulation.logs`).

The supervisor writes them (:class:`LogWriter`); any process reads or follows them
(:func:`read_log`, :class:`LogFollower`). A ``.done`` file next to a log says its
container has ended, which is how a follower knows the stream is over; a log that
vanishes (its pod was deleted) ends the stream too.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import deque
from pathlib import Path
from typing import Final

from kf_trainer_core.emulation.logs import (
    Line,
    format_stamp,
    parse_stamp,
    render,
    select,
    shown_stamp,
)

#: What :meth:`LogFollower.poll` returns when no line is ready yet.
PENDING: Final = b"\x00pending"


class LogWriter:
    """Appends timestamped lines to one container's log. Thread-safe: the ranks of a
    node write into one pod log. Stamps strictly increase, so a follower resuming
    from a line's timestamp never confuses two lines."""

    def __init__(self, path: Path, done: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.done = done
        self._fh = path.open("ab")
        self._last = 0
        self._lock = threading.Lock()
        self.closed = False

    def write(self, text: str) -> None:
        """Append ``text`` (split at newlines) and flush, so followers see it now."""
        with self._lock:
            if self.closed:
                return
            out = []
            for line in text.split("\n"):
                stamp = max(time.time_ns(), self._last + 1)
                self._last = stamp
                out.append(f"{format_stamp(stamp)} {line}\n")
            self._fh.write("".join(out).encode("utf-8", errors="replace"))
            self._fh.flush()

    def close(self) -> None:
        """End the log: followers drain it and stop."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            self._fh.close()
            with contextlib.suppress(FileNotFoundError):  # the pod was deleted meanwhile
                self.done.touch()


def _line(raw: bytes) -> Line:
    """A stored line: its stamp (ns; 0 when it has none to read) and its text."""
    stamp, _, text = raw.decode("utf-8", errors="replace").partition(" ")
    try:
        return parse_stamp(stamp), text
    except ValueError:
        return 0, text


def _shown(lines: list[Line], timestamps: bool) -> list[bytes]:
    return [
        (f"{shown_stamp(t)} {text}" if timestamps else text).encode("utf-8", errors="replace")
        for t, text in lines
    ]


def read_log(
    path: Path,
    *,
    tail_lines: int | None = None,
    since_time: str | None = None,
    timestamps: bool = False,
    limit_bytes: int | None = None,
) -> str:
    """A container's log now, as the API returns it (each line newline-terminated)."""
    raw = path.read_bytes().split(b"\n")
    if raw and raw[-1] == b"":
        raw.pop()
    since = parse_stamp(since_time) if since_time else None
    body = render(select(map(_line, raw), since, tail_lines), timestamps)
    if limit_bytes is not None:
        body = body[:limit_bytes]
    return body.decode("utf-8", errors="replace")


class LogFollower:
    """Follows one container's log (``follow=true``): the selected history first,
    then each new line, until the container ended and everything was read."""

    def __init__(
        self,
        path: Path,
        done: Path,
        *,
        since_time: str | None = None,
        tail_lines: int | None = None,
        timestamps: bool = True,
    ) -> None:
        self.path = path
        self.done = done
        self.since = parse_stamp(since_time) if since_time else None
        self.tail = tail_lines
        self.timestamps = timestamps
        self._fh = path.open("rb")
        self._partial = b""
        self._first = True
        self._buffer: deque[bytes] = deque()
        self.ended = False

    def poll(self) -> bytes | None:
        """The next line, ``None`` at the end, or :data:`PENDING`."""
        if self._buffer:
            return self._buffer.popleft()
        if self.ended:
            return None
        # Look for the end marker before reading: whatever was written before it
        # appeared is then certainly in what we read next.
        finished = self.done.exists()
        data = self._fh.read()
        if data:
            chunks = (self._partial + data).split(b"\n")
            self._partial = chunks.pop()
            tail = self.tail if self._first else None
            self._first = False
            chosen = select(map(_line, chunks), self.since, tail)
            self._buffer.extend(_shown(chosen, self.timestamps))
            if self._buffer:
                return self._buffer.popleft()
        if finished or not self.path.exists():
            self.ended = True
            rest, self._partial = self._partial, b""
            chosen = select([_line(rest)], self.since, None) if rest else []
            selected = _shown(chosen, self.timestamps)
            return selected[0] if selected else None
        return PENDING

    def close(self) -> None:
        self.ended = True
        self._fh.close()
