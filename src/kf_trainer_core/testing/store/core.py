"""Writes of the store, with the generic registry's rules: create (names,
``generateName``, system metadata), update and the status subresource, patches,
read-modify-write, and deletion with finalizers and owner-reference cascades."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from kf_trainer_core.emulation.registry import (
    JSON,
    Admission,
    Key,
    StoreError,
    copy_obj,
    ensure_meta,
)
from kf_trainer_core.emulation.strategy import (
    check_preconditions,
    check_propagation,
    check_version,
    finish_update,
    mark_deleting,
    patched,
    prepare_create,
    prepare_update,
)
from kf_trainer_core.k8s.patch import json_copy
from kf_trainer_core.k8s.resources import NAMESPACES, Resource
from kf_trainer_core.testing.store.reads import StoreReads


class Store(StoreReads):
    """Thread-safe (one RLock) object store with a single global, monotonically increasing
    resourceVersion (stringified int), like etcd behind an apiserver.

    Every method returns deep copies; objects held inside are never mutated in place,
    so history entries and watch events can share them safely.
    """

    # ---------------------------------------------------------------- writes

    def create(
        self,
        res: Resource,
        obj: dict[str, Any],
        *,
        namespace: str | None = None,
        admission: Admission | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """Store a new object: sets uid, resourceVersion, creationTimestamp,
        generation=1 and namespace; honours ``generateName``. 409 AlreadyExists when an
        object of that name exists, 422 when the name is missing or malformed.
        ``admission`` may rewrite or reject the object (the server's CRD validation);
        ``dry_run`` does everything but store it."""
        with self.lock:
            new = prepare_create(
                res, obj, namespace, lambda ns, name: (ns, name) in self._bucket(res)
            )
            meta = new["metadata"]
            key = (str(meta.get("namespace") or ""), str(meta["name"]))
            if admission is not None:
                new = admission(res, new, None, None)
            if dry_run:
                new["metadata"].pop("resourceVersion", None)
                return copy_obj(new)
            self._commit(res, key, None, new, "ADDED")
        self._dispatch()
        return copy_obj(new)

    def update(
        self,
        res: Resource,
        obj: dict[str, Any],
        *,
        subresource: str | None = None,
        check_rv: bool = True,
        admission: Admission | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """Replace an object (PUT).

        With ``check_rv`` a resourceVersion in ``obj`` that differs from the stored one
        gives 409 Conflict (none at all means an unconditional update, as the apiserver
        allows). ``subresource="status"`` changes only ``status``; ``None`` ignores
        ``status`` for types with a status subresource; ``"*"`` (in-process callers only)
        writes both. ``metadata.generation`` grows when anything but metadata/status
        changes. A write that changes nothing does not bump the resourceVersion.
        ``admission`` and ``dry_run`` as for :meth:`create`.
        """
        meta = obj.get("metadata") or {}
        name = str(meta.get("name") or "")
        with self.lock:
            old = self._bucket(res).get(self._key(res, meta.get("namespace"), name))
            if old is None:
                raise StoreError.not_found(res, name)
            if check_rv:
                check_version(res, name, old, meta.get("resourceVersion"))
            result = self._replace(res, old, json_copy(obj), subresource, admission, dry_run)
        self._dispatch()
        return copy_obj(result)

    def _replace(
        self,
        res: Resource,
        old: JSON,
        new: JSON,
        subresource: str | None,
        admission: Admission | None = None,
        dry_run: bool = False,
    ) -> JSON:
        """Apply the registry's update strategy and commit; caller holds the lock."""
        old_meta = old["metadata"]
        new = prepare_update(res, old, new, subresource)
        if admission is not None:
            new = admission(res, new, old, subresource)
        new = finish_update(res, old, new, subresource)
        if new == old or dry_run:
            # No-op writes do not reach etcd: no new version, no event.
            return new
        key = self._key(res, old_meta.get("namespace"), old_meta["name"])
        meta = new["metadata"]
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            # The last finalizer went away: the pending deletion completes now.
            self._remove(res, key, new, "Background")
            return new
        self._commit(res, key, old, new, "MODIFIED")
        return new

    def patch(
        self,
        res: Resource,
        namespace: str | None,
        name: str,
        patch: Any,
        *,
        patch_type: str = "merge",
        subresource: str | None = None,
        admission: Admission | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """Patch an object. ``patch_type``: ``merge`` (RFC 7386), ``json`` (RFC 6902),
        ``strategic`` (merge, lists of named objects merge by name) or ``apply``
        (server-side apply, approximated as create-or-merge). A resourceVersion in the
        patched metadata acts as a precondition (409 when stale). ``admission`` and
        ``dry_run`` as for :meth:`create`."""
        if patch_type == "apply":
            return self._apply(res, namespace, name, patch, subresource, admission, dry_run)
        with self.lock:
            old = self._bucket(res).get(self._key(res, namespace, name))
            if old is None:
                raise StoreError.not_found(res, name)
            new = patched(res, name, old, patch, patch_type)
            result = self._replace(res, old, new, subresource, admission, dry_run)
        self._dispatch()
        return copy_obj(result)

    def _apply(
        self,
        res: Resource,
        namespace: str | None,
        name: str,
        patch: Any,
        subresource: str | None,
        admission: Admission | None,
        dry_run: bool,
    ) -> JSON:
        if not isinstance(patch, dict):
            raise StoreError.bad_request("an apply patch must be an object")
        if subresource is None and self.try_get(res, namespace, name) is None:
            body = json_copy(patch)
            ensure_meta(body)["name"] = name
            try:
                return self.create(
                    res, body, namespace=namespace, admission=admission, dry_run=dry_run
                )
            except StoreError as exc:
                if exc.reason != "AlreadyExists":
                    raise
        return self.patch(
            res,
            namespace,
            name,
            patch,
            subresource=subresource,
            admission=admission,
            dry_run=dry_run,
        )

    def mutate(
        self,
        res: Resource,
        namespace: str | None,
        name: str,
        fn: Callable[[dict[str, Any]], None],
        *,
        subresource: str | None = None,
    ) -> dict[str, Any]:
        """Read-modify-write under the lock: ``fn`` mutates a copy in place. The same
        rules as :meth:`update` apply (``subresource="status"`` for status changes, ``"*"``
        for both); no resourceVersion check since nothing can interleave."""
        with self.lock:
            old = self._bucket(res).get(self._key(res, namespace, name))
            if old is None:
                raise StoreError.not_found(res, name)
            new = json_copy(old)
            fn(new)
            result = self._replace(res, old, new, subresource)
        self._dispatch()
        return copy_obj(result)

    def delete(
        self,
        res: Resource,
        namespace: str | None,
        name: str,
        *,
        propagation: str = "Background",
        preconditions: dict[str, Any] | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """Delete an object and return its last state.

        Dependents (``metadata.ownerReferences[].uid`` == its uid) are deleted
        recursively; ``Orphan`` strips the owner reference from them instead;
        ``Foreground`` marks the owner (deletionTimestamp + ``foregroundDeletion``
        finalizer), deletes dependents, then the owner. An object with other finalizers
        only gets a deletionTimestamp; it goes once an update removes the last one.
        ``preconditions`` (``uid``/``resourceVersion``) give 409 Conflict on mismatch.
        ``dry_run`` checks and returns the object without deleting it.
        """
        check_propagation(propagation)
        with self.lock:
            key = self._key(res, namespace, name)
            old = check_preconditions(res, name, self._bucket(res).get(key), preconditions)
            if dry_run:
                return copy_obj(old)
            result = self._delete_locked(res, key, old, propagation)
        self._dispatch()
        return copy_obj(result)

    def _delete_locked(self, res: Resource, key: Key, old: JSON, propagation: str) -> JSON:
        meta = old["metadata"]
        finalizers = list(meta.get("finalizers") or [])
        if meta.get("deletionTimestamp") and propagation != "Foreground":
            return old  # already being deleted: nothing more to do
        if propagation == "Foreground" and self._owners.get(meta["uid"]):
            if "foregroundDeletion" not in finalizers:
                marked = copy_obj(old)
                mark_deleting(marked["metadata"], foreground=True)
                self._commit(res, key, old, marked, "MODIFIED")
            removed = self._subtree(meta["uid"])
            self._delete_dependents(meta["uid"])
            hook = self.foreground_hooks.get(res)
            if hook is not None:
                # A controller that re-creates dependents of the deleting owner (one
                # round of its race with the GC), then the GC's next pass.
                hook(self, copy_obj(self._bucket(res)[key]), removed)
                self._delete_dependents(meta["uid"])
            current = self._bucket(res)[key]
            done = copy_obj(current)
            done["metadata"]["finalizers"] = [
                f for f in done["metadata"].get("finalizers", []) if f != "foregroundDeletion"
            ]
            if not done["metadata"]["finalizers"]:
                del done["metadata"]["finalizers"]
                self._remove(res, key, done, "Background")
            else:
                self._commit(res, key, current, done, "MODIFIED")
            return done
        if finalizers:
            marked = copy_obj(old)
            mark_deleting(marked["metadata"])
            self._commit(res, key, old, marked, "MODIFIED")
            return marked
        gone = copy_obj(old)
        mark_deleting(gone["metadata"])
        self._remove(res, key, gone, propagation)
        return gone

    def _collect_orphans(self, uid: str, dependents: list[tuple[Resource, Key]]) -> None:
        """The collector's pass over the dependents of ``uid``, deleted in the
        background a moment ago: each one that still names it as owner is deleted (one
        taken over by another owner meanwhile is left alone)."""
        try:
            with self.lock:
                for dres, dkey in dependents:
                    dep = self._bucket(dres).get(dkey)
                    refs = (dep or {}).get("metadata", {}).get("ownerReferences") or []
                    if dep is not None and any(r.get("uid") == uid for r in refs):
                        self._delete_locked(dres, dkey, dep, "Background")
            self._dispatch()
        finally:
            with self._gc_done:
                self._gc_passes -= 1
                self._gc_done.notify_all()

    def _subtree(self, uid: str) -> list[tuple[Resource, JSON]]:
        """Copies of the objects ``uid`` owns, directly or not, owners before dependents."""
        out: list[tuple[Resource, JSON]] = []
        queue = [uid]
        while queue:
            owner = queue.pop(0)
            for dres, dkey in sorted(
                self._owners.get(owner, set()), key=lambda d: (d[0].plural, d[1])
            ):
                dep = self._bucket(dres).get(dkey)
                if dep is not None:
                    out.append((dres, copy_obj(dep)))
                    queue.append(str(dep["metadata"]["uid"]))
        return out

    def _delete_dependents(self, uid: str) -> None:
        """The GC's pass over a foreground-deleted owner: delete what it owns, in the
        foreground."""
        for dres, dkey in sorted(self._owners.get(uid, set()), key=lambda d: (d[0].plural, d[1])):
            dep = self._bucket(dres).get(dkey)
            if dep is not None:
                self._delete_locked(dres, dkey, dep, "Foreground")

    def _remove(self, res: Resource, key: Key, last: JSON, propagation: str) -> None:
        """Remove the object (DELETED event), then handle its dependents."""
        self._commit(res, key, self._bucket(res)[key], last, "DELETED")
        uid = last["metadata"]["uid"]
        dependents = sorted(self._owners.pop(uid, set()), key=lambda d: (d[0].plural, d[1]))
        delay = self.background_gc_delays.get(res)
        if dependents and delay and propagation == "Background":
            # The collector's own pass, later: until then the dependents stay, owned by
            # a uid that is gone (a controller may take them over meanwhile).
            timer = threading.Timer(delay, self._collect_orphans, (str(uid), dependents))
            timer.daemon = True
            self._gc_passes += 1
            timer.start()
            return
        if res == NAMESPACES:
            # Deleting a namespace deletes everything in it.
            for other, bucket in self._data.items():
                if other.namespaced:
                    dependents.extend((other, k) for k in sorted(bucket) if k[0] == key[1])
        for dres, dkey in dependents:
            dep = self._bucket(dres).get(dkey)
            if dep is None:
                continue
            if propagation == "Orphan":
                freed = json_copy(dep)
                refs = [
                    r for r in freed["metadata"].get("ownerReferences", []) if r.get("uid") != uid
                ]
                if refs:
                    freed["metadata"]["ownerReferences"] = refs
                else:
                    freed["metadata"].pop("ownerReferences", None)
                self._commit(dres, dkey, dep, freed, "MODIFIED")
            else:
                self._delete_locked(dres, dkey, dep, "Background")
