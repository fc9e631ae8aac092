"""The test server's request log: every request it answered, for tests and
benchmarks (API calls per job)."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass

from kf_trainer_core.testing.faults import resource_matches

__all__ = ["RequestLog", "RequestRecord"]

_TOKEN_SPLIT = re.compile(r"[,=!()\s]+")


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One request the server answered."""

    time: float  # time.time() when it arrived
    method: str
    path: str
    query: dict[str, str]
    verb: str  # get, list, watch, create, update, patch, delete, deletecollection
    resource: str  # plural ("" for discovery and other non-resource paths)
    subresource: str | None
    namespace: str | None
    name: str | None
    status: int
    user_agent: str
    group: str = ""
    duration: float = 0.0  # seconds to the response headers (streams: to their start)
    dry_run: bool = False  # dryRun=All: in the query, or in a delete's options body

    def mentions(self, job: str) -> bool:
        """Whether the request is about TrainJob ``job``: the TrainJob (or a JobSet) by
        name, its pods and their logs by name prefix, events by involvedObject.name, or a
        label/field selector naming it."""
        prefix = job + "-"
        if self.name is not None and (self.name == job or self.name.startswith(prefix)):
            return True
        for key in ("labelSelector", "fieldSelector"):
            selector = self.query.get(key)
            if selector and job in selector:
                for token in _TOKEN_SPLIT.split(selector):
                    if token == job or token.startswith(prefix):
                        return True
        return False


class RequestLog:
    """Every request the server answered, for tests and benchmarks (API calls per job)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._records: list[RequestRecord] = []

    def append(self, record: RequestRecord) -> None:
        """Record one request."""
        with self._lock:
            self._records.append(record)

    @property
    def records(self) -> list[RequestRecord]:
        """A snapshot of the records, oldest first."""
        with self._lock:
            return list(self._records)

    def filter(
        self,
        job: str | None = None,
        verb: str | None = None,
        resource: str | None = None,
        *,
        status: int | None = None,
    ) -> list[RequestRecord]:
        """Records matching all given criteria. ``resource`` is a plural (matching its
        subresources too), ``plural/subresource`` (``pods/log``) or ``*``."""
        out = []
        for r in self.records:
            if verb is not None and r.verb != verb:
                continue
            if not resource_matches(resource, r.resource, r.subresource):
                continue
            if status is not None and r.status != status:
                continue
            if job is not None and not r.mentions(job):
                continue
            out.append(r)
        return out

    def count(
        self,
        job: str | None = None,
        verb: str | None = None,
        resource: str | None = None,
        *,
        status: int | None = None,
    ) -> int:
        """How many requests match (see :meth:`filter`); a watch counts once."""
        return len(self.filter(job, verb, resource, status=status))

    def clear(self) -> None:
        """Forget every record."""
        with self._lock:
            self._records.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._records)

    def __iter__(self) -> Iterator[RequestRecord]:
        return iter(self.records)
