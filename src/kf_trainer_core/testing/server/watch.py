"""Watches: the fan-out of committed changes to open streams, each stream's
filtering (an object entering or leaving a selector), bookmarks, ``sendInitialEvents``,
timeouts and the 410 of an expired resourceVersion."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Callable
from typing import Any

from aiohttp import web

from kf_trainer_core.emulation.registry import parse_rv
from kf_trainer_core.emulation.selection import Selector
from kf_trainer_core.emulation.watch import (
    bookmark_line,
    dumps,
    error_line,
    event_line,
)
from kf_trainer_core.k8s.selectors import FieldSelector
from kf_trainer_core.testing.server.base import ServerBase, Stream
from kf_trainer_core.testing.server.request import int_param, truthy
from kf_trainer_core.testing.server.routing import (
    EVENTS_V1,
    Ctx,
    core_event_to_v1,
    events_v1_field_selector,
)
from kf_trainer_core.testing.store import PODS, Resource, StoreError, WatchEvent

JSON = dict[str, Any]


class Encoded:
    """One change, serialised once per event type and view, shared by all watchers."""

    __slots__ = ("_event", "_lines", "_objects")

    def __init__(self, event: WatchEvent) -> None:
        self._event = event
        self._objects: dict[bool, bytes] = {}
        self._lines: dict[tuple[str, bool], bytes] = {}

    def line(self, event_type: str, v1_events: bool) -> bytes:
        key = (event_type, v1_events)
        data = self._lines.get(key)
        if data is None:
            obj = self._objects.get(v1_events)
            if obj is None:
                source = self._event.object
                obj = self._objects[v1_events] = dumps(
                    core_event_to_v1(source) if v1_events else source
                )
            data = self._lines[key] = event_line(event_type, obj)
        return data


class Watcher(Stream):
    """One open watch stream: filters, buffers and writes events in order."""

    def __init__(
        self,
        server: ServerBase,
        res: Resource,
        view: Resource,
        selector: Selector,
        start_rv: int,
        bookmarks: bool,
    ) -> None:
        super().__init__()
        self.server = server
        self.res = res
        self.view = view
        self.v1_events = view is EVENTS_V1
        self.selector = selector
        self.start_rv = start_rv
        self.bookmarks = bookmarks
        self.buffer: list[bytes] = []
        self.finish = False  # end once the buffer is written
        self.sent = 0

    def offer(
        self, event: WatchEvent, previous: JSON | None, encoded: Encoded, live: bool = True
    ) -> None:
        """Queue ``event`` if this watch selects it (as ADDED/MODIFIED/DELETED the way
        the apiserver's watch cache does when an object enters or leaves a selector)."""
        if self.closed or self.finish:
            return
        obj = event.object
        meta = obj["metadata"]
        if live and int(meta["resourceVersion"]) <= self.start_rv:
            return  # already part of this watch's initial state or replay
        chosen = self.selector.reported(event.type, obj, previous)
        if chosen is None:
            return
        event_type, shown = chosen
        if shown is not obj:  # an object leaving the selector: its previous state
            encoded = Encoded(event._replace(object=shown))
        faults = self.server.faults
        if faults.drop_event():
            self.close()  # the connection "broke" before this event got through
            return
        self.buffer.append(encoded.line(event_type, self.v1_events))
        self.sent += 1
        limit = faults.drop_after
        if limit is not None and self.sent >= limit:
            self.finish = True
        if len(self.buffer) > self.server.watch_buffer_limit:
            self.close()  # an unresponsive consumer, as the apiserver drops it
        self.wake.set()

    def bookmark(self, rv: int, *, initial_end: bool = False) -> None:
        """Queue a BOOKMARK carrying ``rv`` (in order after every queued event)."""
        self.buffer.append(bookmark_line(self.view, rv, initial_end=initial_end))
        self.wake.set()


class WatchMixin(ServerBase):
    """Watch streams of :class:`~kf_trainer_core.testing.server.KubeTestServer`."""

    _watchers: dict[Resource, set[Watcher]]
    _open_watches: int

    def drop_watches(self, *, abort: bool = False) -> int:
        """End every open watch stream (``abort``: reset the connection instead of
        ending the stream cleanly). Returns how many were open."""
        return self._on_loop(lambda: self._end_watches(abort)) or 0

    def _end_watches(self, abort: bool) -> int:
        # On the loop.
        watchers = [w for open_ in self._watchers.values() for w in open_]
        for w in watchers:
            w.close(abort=abort)
        return len(watchers)

    @property
    def open_watches(self) -> int:
        """How many watch streams are open now."""
        return self._open_watches

    def add_commit_hook(self, hook: Callable[[WatchEvent], None]) -> Callable[[], None]:
        """Call ``hook(event)`` for every committed change, on the store's thread,
        *before* any watch hears of it (a ``store.subscribe`` callback may run after a
        watching client has already returned). Benchmarks stamp changes with it. Returns
        a function that removes the hook."""
        self._commit_hooks = [*self._commit_hooks, hook]

        def remove() -> None:
            self._commit_hooks = [h for h in self._commit_hooks if h is not hook]

        return remove

    def _on_change(self, event: WatchEvent, previous: JSON | None) -> None:
        for hook in self._commit_hooks:
            hook(event)
        # Store thread: batch changes into one loop callback (thousands of writes per
        # second would otherwise mean thousands of cross-thread wake-ups).
        with self._inbox_lock:
            self._inbox.append((event, previous))
            if self._inbox_scheduled:
                return
            self._inbox_scheduled = True
        loop = self._loop
        try:
            if loop is None or loop.is_closed():
                raise RuntimeError("no loop")
            loop.call_soon_threadsafe(self._drain_inbox)
        except RuntimeError:
            with self._inbox_lock:
                self._inbox.clear()
                self._inbox_scheduled = False

    def _drain_inbox(self) -> None:
        with self._inbox_lock:
            batch, self._inbox = self._inbox, []
            self._inbox_scheduled = False
        for event, previous in batch:
            self._fanned_rv = int(event.object["metadata"]["resourceVersion"])
            if event.type == "DELETED" and event.resource is PODS and self._followers:
                # Log streams of a deleted pod end (they check that the pod still exists).
                meta = event.object["metadata"]
                for follower in self._followers:
                    if follower.pod == (meta.get("namespace"), meta["name"]):
                        follower.wake.set()
            watchers = self._watchers.get(event.resource)
            if not watchers:
                continue
            encoded = Encoded(event)
            for w in watchers:
                w.offer(event, previous, encoded)

    async def _watch(self, request: web.BaseRequest, ctx: Ctx) -> web.StreamResponse:
        route = ctx.route
        res, view = route.res, route.view
        assert res is not None
        assert view is not None
        query = request.query
        field_selector = query.get("fieldSelector")
        if view is EVENTS_V1:
            field_selector = events_v1_field_selector(field_selector)
        selector = Selector.parse(route.namespace, query.get("labelSelector"), field_selector, res)
        if route.name is not None:  # /watch/namespaces/ns/pods/name (deprecated form)
            fields = FieldSelector((*selector.fields.terms, ("metadata.name", True, route.name)))
            selector = Selector(selector.namespace, selector.labels, fields)
        rv = query.get("resourceVersion")
        bookmarks = truthy(query.get("allowWatchBookmarks"))
        initial = truthy(query.get("sendInitialEvents"))
        if initial and query.get("resourceVersionMatch") != "NotOlderThan":
            raise StoreError(
                422,
                "Invalid",
                'ListOptions.meta.k8s.io "" is invalid: sendInitialEvents: Forbidden: '
                "sendInitialEvents is forbidden for watch unless resourceVersionMatch is set "
                "to NotOlderThan",
            )
        timeout = int_param(query, "timeoutSeconds")
        duration = float(timeout) if timeout is not None and timeout > 0 else self.watch_timeout

        response = web.StreamResponse(status=200)
        response.content_type = "application/json"
        response.headers["Cache-Control"] = "no-cache, private"
        response.headers["Audit-Id"] = str(uuid.uuid4())
        try:
            if initial:
                # sendInitialEvents: the current state as ADDED events, then a bookmark.
                if rv not in (None, "", "0"):
                    self.store.check_not_older_than(parse_rv(str(rv)))
                replay, start_rv = self.store.replay(res, route.namespace, "0")
            else:
                replay, start_rv = self.store.replay(res, route.namespace, rv)
        except StoreError as err:
            if err.code != 410:
                raise
            # The apiserver answers an expired version inside a successful watch.
            await response.prepare(request)
            self._record(request, ctx, 200)
            await response.write(error_line(err))
            await response.write_eof()
            return response

        watcher = Watcher(self, res, view, selector, start_rv, bookmarks)
        # Registering in the same loop step as the snapshot leaves no gap: later
        # changes reach the watcher through _drain_inbox, older ones are skipped.
        for event, previous in replay:
            watcher.offer(event, previous, Encoded(event), live=False)
        if initial:
            watcher.bookmark(start_rv, initial_end=True)
        self._watchers.setdefault(res, set()).add(watcher)
        self._open_watches += 1
        try:
            await response.prepare(request)
            self._record(request, ctx, 200)
            await self._pump(request, response, watcher, duration)
        except (ConnectionResetError, asyncio.CancelledError):
            watcher.closed = True
        finally:
            self._watchers.get(res, set()).discard(watcher)
            self._open_watches -= 1
        return response

    async def _pump(
        self,
        request: web.BaseRequest,
        response: web.StreamResponse,
        watcher: Watcher,
        duration: float,
    ) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + duration
        last_bookmark = loop.time()
        while True:
            if watcher.closed:
                if watcher.abort and request.transport is not None:
                    request.transport.abort()
                    return
                break
            if watcher.buffer:
                data = b"".join(watcher.buffer)
                watcher.buffer.clear()
                await response.write(data)
                continue
            if watcher.finish:
                break
            now = loop.time()
            if now >= deadline:
                break  # timeoutSeconds: the stream ends cleanly, without a bookmark
            wait = deadline - now
            if watcher.bookmarks:
                # Read the interval each time: tests change it on a running server.
                due = last_bookmark + self.bookmark_interval
                if now >= due:
                    # Every event up to _fanned_rv is already buffered ahead of it.
                    watcher.bookmark(max(self._fanned_rv, watcher.start_rv))
                    last_bookmark = now
                    continue
                wait = min(wait, due - now)
            # No await since the buffer check: clearing cannot lose a wake-up.
            watcher.wake.clear()
            with contextlib.suppress(asyncio.TimeoutError, TimeoutError):
                await asyncio.wait_for(watcher.wake.wait(), timeout=max(wait, 0.0))
        await response.write_eof()
