"""The pods of finished jobs, read for many waits in few requests.

A wait that sees its job finish reads the job's pods once (the function's result is in
node-0's termination message; the steps are shown with the job). With thousands of
waits in one process — an Airflow triggerer — and hundreds of jobs finishing a second,
one LIST per job is the wait's largest cost: on a real kube-apiserver each waits its
turn behind the others (measured: 1,000 waits at 200 completions a second spent 280 ms
of their 350 ms median in that read). So the waits of one namespace share a
:class:`PodBatch`: the first wait to ask leads and lists the pods of every job asked
for so far in one request (``jobset-name in (a,b,...)``); the waits that ask while it
is in flight wait for the next batch, which the first of them leads when the running
one ends. The number of requests follows the server's round-trip time, not the number
of completions, and a lone wait still makes exactly the one request it made before.

The batch runs in the waits' own tasks (a leader's LIST is one of its calls); the waits
of one batch share an event loop.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from kf_trainer_core.k8s.api import Api
from kf_trainer_core.k8s.paging import list_all
from kf_trainer_core.k8s.resources import PODS
from kf_trainer_core.k8s.trainjob import JOBSET_NAME_LABEL
from kf_trainer_core.programs.reads import pod_selector, pods_by_job
from kf_trainer_core.programs.shared_reads import SharedReads
from kf_trainer_core.programs.wakers import Waker

#: Jobs per LIST at most (a selector of 50 names of up to 63 characters stays ~3 KiB).
MAX_NAMES = 50
#: A follower looks again after this long even without news. Every way a batch ends
#: wakes its members and the next leader (an error or a cancelled leader included), so
#: this is a guard only, never the pace of a queue.
FOLLOWER_PATIENCE = 30.0
_ABSENT = object()

PodsReader = Callable[[str], Awaitable[list[dict[str, Any]]]]


@dataclass(eq=False)
class _Ticket:
    """One wait's request for one job's pods; ``news`` is set when its pods are read
    or when it is next to lead."""

    name: str
    pods: list[dict[str, Any]] | None = None
    news: Waker = field(default_factory=lambda: Waker(fired=False))

    def notify(self) -> None:
        self.news.notify()


class PodBatch:
    """The shared state of the batched pod reads of one namespace (see the module)."""

    max_names = MAX_NAMES

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        # Insertion-ordered: the oldest tickets lead and join batches first.
        self._queue: dict[_Ticket, None] = {}
        self._leading = False
        #: Whole outcomes read once for the waits on one finished job (see
        #: :mod:`~kf_trainer_core.programs.shared_reads`).
        self.shared = SharedReads()

    def reader(self, api: Api) -> PodsReader:
        """A pod reader for one wait."""
        return functools.partial(self.read, api)

    async def read(self, api: Api, name: str) -> list[dict[str, Any]]:
        """The pods of job ``name``, read in a batch with those of other waits."""
        ticket = _Ticket(name)
        self._queue[ticket] = None
        try:
            while True:
                if ticket.pods is not None:
                    return ticket.pods
                if not self._leading:
                    return await self._lead(api, ticket, self._take(ticket))
                # Woken when its batch is read or when it is next to lead: a queued
                # wait never polls (thousands queued behind a slow server would
                # otherwise each look every second, and slow the process further).
                await ticket.news.wait(FOLLOWER_PATIENCE)
        finally:
            # A wait that ends while queued (cancelled, timed out) leaves the queue; if
            # it was to lead next, the one after it is told instead.
            queued = self._queue.pop(ticket, _ABSENT) is not _ABSENT
            head = next(iter(self._queue), None) if queued and not self._leading else None
            if head is not None:
                head.notify()

    def _take(self, ticket: _Ticket) -> list[_Ticket]:
        """Become the leader of a batch holding ``ticket`` and the
        oldest other queued tickets (the queue's head only: no scan of the queue)."""
        self._leading = True
        self._queue.pop(ticket, None)
        others = list(itertools.islice(self._queue, self.max_names - 1))
        for t in others:
            del self._queue[t]
        return [ticket, *others]

    async def _lead(self, api: Api, ticket: _Ticket, batch: list[_Ticket]) -> list[dict[str, Any]]:
        names = sorted({t.name for t in batch})
        # One name: the selector the job's other pod reads use (the same request as
        # before batching). From the watch cache ("0"): the pods' final state reached
        # it before the Job, JobSet and Trainer controllers — reading that cache —
        # could mark the job finished, and a consistent list would wait for the cache
        # to catch up with etcd (~100 ms on a server taking writes).
        selector = (
            pod_selector(names[0])
            if len(names) == 1
            else f"{JOBSET_NAME_LABEL} in ({','.join(names)})"
        )
        try:
            listing = await list_all(
                api, PODS, self.namespace, label_selector=selector, resource_version="0"
            )
        except BaseException:
            # The others ask again (each then leads, and meets its own error if any).
            self._queue = {**dict.fromkeys(t for t in batch if t is not ticket), **self._queue}
            raise
        finally:
            # Whichever way the batch ended, the next one gets a leader. (Waking is
            # only marking: what follows runs before any woken wait does.)
            self._leading = False
            first = next(iter(self._queue), None)
            if first is not None:
                first.notify()
        by_job = pods_by_job(listing["items"])
        for t in batch:
            t.pods = list(by_job.get(t.name, []))
            if t is not ticket:
                t.notify()
        return by_job.get(ticket.name, [])


# ------------------------------------------------------------------------ registry

# A batch never mixes the waits of two event loops.
_batches: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple[Any, ...], PodBatch]] = (
    weakref.WeakKeyDictionary()
)


def pod_batch(key: tuple[Any, ...], namespace: str) -> PodBatch:
    """The batch for ``key`` (cluster and namespace) in the running event loop."""
    registry = _batches.setdefault(asyncio.get_running_loop(), {})
    batch = registry.get(key)
    if batch is None:
        batch = registry[key] = PodBatch(namespace)
    return batch
