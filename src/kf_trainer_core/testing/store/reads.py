"""Reads of the store: gets, lists (now, or at an earlier version rebuilt from
history), pages with continue tokens, and the snapshots watches start from."""

from __future__ import annotations

import builtins
from typing import Any

from kf_trainer_core.emulation.paging import page, too_large
from kf_trainer_core.emulation.registry import (
    JSON,
    Key,
    StoreError,
    WatchEvent,
    copy_obj,
    parse_rv,
    sort_key,
)
from kf_trainer_core.emulation.selection import Selector
from kf_trainer_core.emulation.watch import too_old
from kf_trainer_core.k8s.patch import json_copy
from kf_trainer_core.k8s.resources import Resource
from kf_trainer_core.testing.store.base import StoreBase


class StoreReads(StoreBase):
    """Everything that reads the store (under its lock, handing out copies)."""

    def get(self, res: Resource, namespace: str | None, name: str) -> dict[str, Any]:
        """The object; :class:`StoreError` 404 when absent."""
        obj = self.try_get(res, namespace, name)
        if obj is None:
            raise StoreError.not_found(res, name)
        return obj

    def try_get(self, res: Resource, namespace: str | None, name: str) -> dict[str, Any] | None:
        """The object, or None when absent."""
        with self.lock:
            obj = self._bucket(res).get(self._key(res, namespace, name))
            return copy_obj(obj) if obj is not None else None

    def list(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> tuple[builtins.list[dict[str, Any]], str]:
        """Objects sorted by (namespace, name), and the list's resourceVersion.
        ``namespace=None`` lists every namespace."""
        items, rv, _ = self.page(
            res, namespace, label_selector=label_selector, field_selector=field_selector
        )
        return items, rv

    def page(
        self,
        res: Resource,
        namespace: str | None,
        *,
        resource_version: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        after: tuple[str, str] | None = None,
        limit: int | None = None,
    ) -> tuple[builtins.list[dict[str, Any]], str, int]:
        """One page of a list — objects after the (namespace, name) key ``after``, at
        most ``limit`` — at ``resource_version`` (None: now). Returns the page, the
        list's version and how many objects remain after it. Only the page is copied:
        paging through a namespace of 10,000 large objects costs each page its size."""
        selector = Selector.parse(namespace, label_selector, field_selector, res)
        with self.lock:
            if resource_version is None:
                state, list_rv = self._bucket(res), str(self._rv)
            else:
                target = parse_rv(resource_version)
                if target > self._rv:
                    raise too_large(target, self._rv)
                if target < self._horizon:
                    raise too_old(target, self._horizon)
                state = self._state_at(res, target)
                list_rv = str(target)
            selected = sorted(selector.select(state.values()), key=sort_key)
            items, remaining = page(selected, after, limit)
            return [json_copy(o) for o in items], list_rv, remaining

    def _state_at(self, res: Resource, target: int) -> dict[Key, JSON]:
        # The bucket as it was at ``target``: today's, with later changes undone.
        state = dict(self._bucket(res))
        for entry in reversed(self._history):
            if entry.rv <= target:
                break
            if entry.event.resource != res:
                continue
            key = self._key(res, entry.namespace, entry.event.object["metadata"]["name"])
            if entry.previous is None:
                state.pop(key, None)
            else:
                state[key] = entry.previous
        return state

    def check_not_older_than(self, target: int) -> None:
        """``resourceVersionMatch=NotOlderThan``: the store is never behind, so only a
        version from the future fails (the apiserver answers 504 after waiting)."""
        with self.lock:
            if target > self._rv:
                raise too_large(target, self._rv)

    def exists(self, res: Resource, namespace: str | None, name: str) -> bool:
        """Whether the object exists (no copy made)."""
        with self.lock:
            return self._key(res, namespace, name) in self._bucket(res)

    def count(self, res: Resource, namespace: str | None = None) -> int:
        """How many objects of ``res`` exist (in ``namespace``, or all)."""
        with self.lock:
            bucket = self._bucket(res)
            if not namespace or not res.namespaced:
                return len(bucket)
            return sum(1 for k in bucket if k[0] == namespace)

    def replay(
        self, res: Resource, namespace: str | None, resource_version: str | None
    ) -> tuple[builtins.list[tuple[WatchEvent, JSON | None]], int]:
        """Atomically: the events a new watch starts with, each with the object before
        it, and the version after which live events continue. ``resource_version``
        ``None``/``""``/``"0"`` gives synthetic ADDED events for the current state;
        otherwise the replayed history, 410 Gone ("too old resource version: X (Y)")
        when that version was compacted. Objects are not copied: never mutate them."""
        with self.lock:
            if resource_version in (None, "", "0"):
                every = Selector.parse(namespace, None, None, res)
                items = sorted(every.select(self._bucket(res).values()), key=sort_key)
                return [(WatchEvent("ADDED", res, o), None) for o in items], self._rv
            target = parse_rv(str(resource_version))
            if target < self._horizon:
                raise too_old(target, self._horizon)
            out: builtins.list[tuple[WatchEvent, JSON | None]] = []
            for entry in reversed(self._history):
                if entry.rv <= target:
                    break
                if entry.event.resource != res:
                    continue
                if namespace and res.namespaced and entry.namespace != namespace:
                    continue
                out.append((entry.event, entry.previous))
            out.reverse()
            return out, max(self._rv, target)
