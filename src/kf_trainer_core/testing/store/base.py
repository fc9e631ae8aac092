"""The store's state and its commit path: one global resourceVersion, the history
that watches replay from, the owner index and the subscribers told of every change."""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kf_trainer_core.emulation.registry import JSON, ChangeCallback, Key, WatchEvent
from kf_trainer_core.k8s.patch import json_copy
from kf_trainer_core.k8s.resources import Resource

_log = logging.getLogger("kf_trainer_core.testing.store")
_Callback = Callable[[WatchEvent], None]


@dataclass
class _HistoryEntry:
    rv: int
    event: WatchEvent
    namespace: str
    previous: JSON | None  # the object before the change (None for ADDED)


@dataclass
class _Subscriber:
    callback: _Callback | None
    copy: bool
    changes: ChangeCallback | None = None


@dataclass
class _Pending:
    events: deque[tuple[WatchEvent, JSON | None]] = field(default_factory=deque)
    dispatching: bool = False


class StoreBase:
    """The state of :class:`~kf_trainer_core.testing.store.Store` and how a change is
    committed and announced; reads and writes build on it."""

    def __init__(self, *, history_limit: int = 100_000) -> None:
        self.lock = threading.RLock()
        self._data: dict[Resource, dict[Key, JSON]] = {}
        self._rv = 0
        self._history: deque[_HistoryEntry] = deque()
        self._history_limit = history_limit
        self._horizon = 0  # history holds every change with rv > horizon
        self._owners: dict[str, set[tuple[Resource, Key]]] = {}  # owner uid -> dependents
        #: Called (under the lock) while an owner of that resource is being deleted in
        #: the foreground, after its dependents were deleted: ``hook(store, owner,
        #: removed)`` may create dependents again, as a controller racing the GC does.
        self.foreground_hooks: dict[
            Resource, Callable[[Any, JSON, list[tuple[Resource, JSON]]], None]
        ] = {}
        #: Seconds after an owner of that resource is deleted in the background before
        #: its dependents are collected (absent: at once, in the same write). The real
        #: garbage collector takes a pass of its own: 0.3-0.4 s for a TrainJob's JobSet.
        self.background_gc_delays: dict[Resource, float] = {}
        self._gc_passes = 0  # scheduled and not yet done
        self._gc_done = threading.Condition(self.lock)
        self._subscribers: list[_Subscriber] = []
        self._pending = _Pending()
        self._qlock = threading.Lock()

    @property
    def current_resource_version(self) -> str:
        """The latest committed resourceVersion."""
        return str(self._rv)

    @property
    def oldest_resource_version(self) -> str:
        """Versions older than this answer 410 Gone on watch/list-at-version."""
        return str(self._horizon)

    def _bucket(self, res: Resource) -> dict[Key, JSON]:
        return self._data.setdefault(res, {})

    def _key(self, res: Resource, namespace: str | None, name: str) -> Key:
        return ((namespace or "") if res.namespaced else "", name)

    def _commit(self, res: Resource, key: Key, old: JSON | None, new: JSON, kind: str) -> None:
        """Write one change: new resourceVersion, owner index, history, subscribers."""
        self._rv += 1
        new["metadata"]["resourceVersion"] = str(self._rv)
        bucket = self._bucket(res)
        if kind == "DELETED":
            bucket.pop(key, None)
        else:
            bucket[key] = new
        self._index_owners(res, key, old, None if kind == "DELETED" else new)
        event = WatchEvent(kind, res, new)
        self._history.append(_HistoryEntry(self._rv, event, key[0], old))
        while len(self._history) > self._history_limit:
            self._horizon = self._history.popleft().rv
        self._pending.events.append((event, old))

    def _index_owners(self, res: Resource, key: Key, old: JSON | None, new: JSON | None) -> None:
        def uids(o: JSON | None) -> set[str]:
            if o is None:
                return set()
            return {
                str(r.get("uid"))
                for r in o["metadata"].get("ownerReferences") or []
                if isinstance(r, dict) and r.get("uid")
            }

        before, after = uids(old), uids(new)
        for uid in before - after:
            deps = self._owners.get(uid)
            if deps is not None:
                deps.discard((res, key))
                if not deps:
                    del self._owners[uid]
        for uid in after - before:
            self._owners.setdefault(uid, set()).add((res, key))

    # ---------------------------------------------------------------- watch support

    def subscribe(
        self, callback: Callable[[WatchEvent], None], *, copy: bool = True
    ) -> Callable[[], None]:
        """Call ``callback`` after each committed change, in commit order, outside the
        lock (so it may call back into the store). Returns an unsubscribe function.
        ``copy=False`` hands over the stored object itself (faster; never mutate it)."""
        return self._add_subscriber(_Subscriber(callback, copy))

    def subscribe_changes(self, callback: ChangeCallback) -> Callable[[], None]:
        """Like :meth:`subscribe` but ``callback(event, previous)`` also gets the object
        as it was before the change (None for ADDED), uncopied: never mutate either. The
        watch fan-out uses it to tell when an object enters or leaves a selector."""
        return self._add_subscriber(_Subscriber(None, False, callback))

    def _add_subscriber(self, sub: _Subscriber) -> Callable[[], None]:
        with self._qlock:
            self._subscribers = [*self._subscribers, sub]

        def unsubscribe() -> None:
            with self._qlock:
                self._subscribers = [s for s in self._subscribers if s is not sub]

        return unsubscribe

    def _dispatch(self) -> None:
        # One thread at a time drains the queue, so subscribers see commit order even
        # when several threads write; a callback that writes (same thread) only queues.
        pending = self._pending
        with self._qlock:
            if pending.dispatching or not pending.events:
                return
            pending.dispatching = True
        try:
            while True:
                with self._qlock:
                    if not pending.events:
                        pending.dispatching = False
                        return
                    event, previous = pending.events.popleft()
                    subscribers = self._subscribers
                for sub in subscribers:
                    try:
                        if sub.changes is not None:
                            sub.changes(event, previous)
                        elif sub.callback is not None:
                            copied = json_copy(event.object) if sub.copy else event.object
                            sub.callback(event._replace(object=copied))
                    except Exception:
                        _log.exception("store subscriber %r failed", sub.callback or sub.changes)
        except BaseException:
            with self._qlock:
                pending.dispatching = False
            raise

    def wait_collected(self, timeout: float) -> bool:
        """Wait until no garbage collector pass is pending (see
        :attr:`background_gc_delays`); False on timeout."""
        with self._gc_done:
            return self._gc_done.wait_for(lambda: self._gc_passes == 0, timeout)

    def compact(self) -> None:
        """Forget history (fault injection): any older version now answers 410."""
        with self.lock:
            self._history.clear()
            self._horizon = self._rv

    def reset(self) -> None:
        """Clear everything but keep the resourceVersion counter monotonic (clients that
        remember versions must not see them reused). Subscribers are kept."""
        with self.lock:
            self._data.clear()
            self._owners.clear()
            self._history.clear()
            self._horizon = self._rv
            with self._qlock:
                self._pending.events.clear()
