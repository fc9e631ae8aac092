"""Shared, event-driven watching: one list+watch per namespace serves every wait.

An informer lists a resource once, then watches it from that ``resourceVersion``:
bookmarks keep the version fresh, a 410 Gone or a broken stream leads to a re-list
whose difference with the cache is delivered as changes — so a job that finished
while the connection was down is still seen finishing. Reconnects back off with
jitter and honour ``Retry-After``; a watch answered with 403 falls back to listing
every ``poll_interval``; a list answered with 403 marks the informer unavailable and
waits poll their job by name instead.

The bookkeeping (:class:`InformerState`) and the loop (:func:`watch_loop`) are apart;
an :class:`Informer` runs the loop as a task of one event loop and is shared through a
registry keyed by cluster, resource, namespace and selector — 1,000 deferred tasks in
one triggerer open one watch, not 1,000; every sync caller of a process shares the
portal's (:mod:`kf_trainer_core.base.portal`).
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import json
import logging
import time
import weakref
from collections.abc import Awaitable, Callable, Container, Iterator, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from kf_trainer_core.k8s.api import Api
from kf_trainer_core.k8s.calls import OpenWatch, watch_period
from kf_trainer_core.k8s.errors import ApiError
from kf_trainer_core.k8s.paging import DEFAULT_PAGE_SIZE, list_pages
from kf_trainer_core.k8s.resources import Resource
from kf_trainer_core.k8s.retry import RetryPolicy
from kf_trainer_core.k8s.selectors import LabelSelector
from kf_trainer_core.programs.wakers import Waker

log = logging.getLogger(__name__)

KeyFunc = Callable[[Mapping[str, Any]], str]


def by_name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


def by_involved_object(obj: Mapping[str, Any]) -> str:
    return str((obj.get("involvedObject") or {}).get("name", ""))


#: Annotations that repeat the whole object (``kubectl apply`` stores the applied
#: manifest, program included): never kept in a cache.
_BULKY_ANNOTATIONS = ("kubectl.kubernetes.io/last-applied-configuration",)


def slim_metadata(meta: Mapping[str, Any]) -> dict[str, Any]:
    """Metadata without what no wait reads: ``managedFields`` (often larger than the
    rest) and annotations that copy the object."""
    out = {k: v for k, v in meta.items() if k != "managedFields"}
    annotations = out.get("annotations")
    if annotations and any(a in annotations for a in _BULKY_ANNOTATIONS):
        out["annotations"] = {k: v for k, v in annotations.items() if k not in _BULKY_ANNOTATIONS}
    return out


def slim_trainjob(obj: Mapping[str, Any]) -> dict[str, Any]:
    """What waits need of a TrainJob. The spec (which embeds programs of up to
    128 KiB) stays out of the cache, so a namespace of large jobs costs little memory;
    of the program, only whether it reports a result (else a pod-less job is read again)."""
    from kf_trainer_core.cluster.results import result_expectation  # pydantic: not up front

    spec = obj.get("spec") or {}
    trainer = spec.get("trainer") or {}
    kept = {"numNodes": trainer["numNodes"]} if "numNodes" in trainer else {}  # shown
    kept.update(result_expectation(trainer))
    return {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "metadata": slim_metadata(obj.get("metadata") or {}),
        "spec": {
            **{k: spec[k] for k in ("suspend", "managedBy", "runtimeRef") if k in spec},
            **({"trainer": kept} if kept else {}),
        },
        "status": obj.get("status") or {},
    }


def label_predicate(selector: str | None) -> Callable[[Mapping[str, Any]], bool]:
    """Whether an object matches a label selector, as the server decides it: lets a
    wait tell that a job lies outside a narrowed informer."""
    parsed = LabelSelector.parse(selector)

    def matches(obj: Mapping[str, Any]) -> bool:
        return parsed.matches((obj.get("metadata") or {}).get("labels"))

    return matches


@dataclass(frozen=True)
class Change:
    """Something happened to the object(s) under ``key``; ``obj`` is ``None`` when
    the object is gone."""

    key: str
    name: str
    obj: dict[str, Any] | None


def _stub(name: str, version: str | None) -> dict[str, Any]:
    """How the cache shows a finished object nobody waits for: its name and version
    (enough to tell a re-list what changed), not its content. A wait that later asks
    for it reads the object by name once. Made on demand from :class:`Cache`'s compact
    record; never stored."""
    return {"metadata": {"name": name, "resourceVersion": version}}


class Cache(MutableMapping[str, dict[str, Any]]):
    """The informer's objects by name, in two tiers: objects kept in full (slimmed),
    and finished objects nobody waits for, of which only the version is kept — one
    string in a flat dict, not dicts per object: 10,000 of the suite's finished jobs
    cost about 1 MiB here, against 5 MiB as stub dicts.

    Reading a stubbed name gives a stub (``{"metadata": {name, version}}``);
    :meth:`stub` stubs a name."""

    __slots__ = ("full", "versions")

    def __init__(self) -> None:
        self.full: dict[str, dict[str, Any]] = {}
        self.versions: dict[str, str | None] = {}

    def __getitem__(self, name: str) -> dict[str, Any]:
        obj = self.full.get(name)
        if obj is not None:
            return obj
        if name in self.versions:
            return _stub(name, self.versions[name])
        raise KeyError(name)

    def __setitem__(self, name: str, obj: dict[str, Any]) -> None:
        self.versions.pop(name, None)
        self.full[name] = obj

    def stub(self, name: str, version: str | None) -> None:
        """Keep only ``version`` of ``name``."""
        self.full.pop(name, None)
        # The version string alone: what a re-list compares.
        self.versions[name] = version

    def __delitem__(self, name: str) -> None:
        if self.full.pop(name, None) is None:
            del self.versions[name]

    def __contains__(self, name: object) -> bool:
        return name in self.full or name in self.versions

    def __iter__(self) -> Iterator[str]:
        yield from self.full
        yield from self.versions

    def __len__(self) -> int:
        return len(self.full) + len(self.versions)

    def version(self, name: str) -> str | None:
        """The cached version of ``name`` (``None`` if absent or unversioned)."""
        obj = self.full.get(name)
        return _rv(obj) or None if obj is not None else self.versions.get(name)


@dataclass
class InformerState:
    """List+watch bookkeeping for one resource in one namespace.

    Lists are paginated (``page_size`` objects a request) and each page is slimmed
    before the next arrives. With ``finished``, the cache is bounded: a finished
    object that no subscriber asks for (``wanted``) is kept as a stub."""

    resource: Resource
    namespace: str | None
    field_selector: str | None = None
    label_selector: str | None = None
    key: KeyFunc = by_name
    slim: Callable[[Mapping[str, Any]], dict[str, Any]] = dict
    #: Objects for which this is true may be reduced to stubs when nobody waits on them.
    finished: Callable[[Mapping[str, Any]], bool] | None = None
    page_size: int | None = DEFAULT_PAGE_SIZE
    resource_version: str | None = None
    cache: Cache = field(default_factory=Cache)
    #: Keys some subscriber waits on (kept in full whatever their state).
    wanted: Container[str] = field(default_factory=set)
    synced: bool = False
    watch_forbidden: bool = False
    list_forbidden: bool = False

    def _put(self, cache: Cache, obj: Mapping[str, Any]) -> dict[str, Any] | None:
        """Store ``obj`` in ``cache``, in full or as a stub; return what subscribers
        may see of it (``None`` for a stub)."""
        name = by_name(obj)
        if self.finished is not None and self.key(obj) not in self.wanted and self.finished(obj):
            cache.stub(name, _rv(obj) or None)
            return None
        kept = cache[name] = self.slim(obj)
        return kept

    async def list_changes(self, api: Api) -> list[Change]:
        """List a page at a time (each page slimmed before the next is asked for), then
        replace the cache; return what differs from before."""
        fresh = Cache()

        def keep(items: list[dict[str, Any]]) -> None:
            for item in items:
                self._put(fresh, item)

        def restart() -> None:
            fresh.full.clear()
            fresh.versions.clear()

        meta = await list_pages(
            api,
            self.resource,
            self.namespace,
            keep,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
            page_size=self.page_size,
            restart=restart,
        )
        return self._replace({"metadata": meta}, fresh)

    def apply_list(self, listing: Mapping[str, Any]) -> list[Change]:
        """Replace the cache with a fresh list (``listing``'s items); report what
        differs from before (including what vanished while we were not watching)."""
        fresh = Cache()
        for item in listing.get("items") or []:
            self._put(fresh, item)
        return self._replace(listing, fresh)

    def _replace(self, listing: Mapping[str, Any], fresh: Cache) -> list[Change]:
        changes = []
        old = self.cache
        for name, obj in fresh.full.items():
            if name not in old or old.version(name) != _rv(obj):
                changes.append(Change(self.key(obj), name, obj))
        # A stub is keyed as the key function sees it: by name, or by nothing.
        for name, version in fresh.versions.items():
            if name not in old or old.version(name) != version:
                changes.append(Change(self.key(fresh[name]), name, None))
        for name in old:
            if name not in fresh:
                changes.append(Change(self.key(old[name]), name, None))
        self.cache = fresh
        self.resource_version = (
            str((listing.get("metadata") or {}).get("resourceVersion") or "") or None
        )
        self.synced = True
        return changes

    def apply_event(self, event: Mapping[str, Any]) -> list[Change]:
        """Apply one watch event. Raises :class:`ApiError` for an ERROR event (410
        means: re-list)."""
        kind = event.get("type")
        obj = event.get("object") or {}
        if kind == "ERROR":
            raise ApiError.from_response(int(obj.get("code") or 500), json.dumps(obj))
        version = (obj.get("metadata") or {}).get("resourceVersion")
        if version:
            self.resource_version = str(version)
        if kind == "BOOKMARK":
            return []
        name = by_name(obj)
        if kind == "DELETED":
            self.cache.pop(name, None)
            return [Change(self.key(obj), name, None)]
        return [Change(self.key(obj), name, self._put(self.cache, obj))]

    def release(self, key: str) -> None:
        """Nobody waits on ``key`` any more: its finished objects become stubs."""
        if self.finished is None:
            return
        # Keyed by name (TrainJobs): one lookup, not a scan of the cache per ending wait
        # (a thousand waits ending together would cost a million comparisons).
        full = self.cache.full
        names = [key] if self.key is by_name else list(full)
        for name in names:
            obj = full.get(name)
            if obj is not None and self.key(obj) == key and self.finished(obj):
                self.cache.stub(name, _rv(obj) or None)

    def objects_for(self, key: str) -> list[dict[str, Any]]:
        """Cached objects under ``key`` (stubs are not objects: a wait reads those)."""
        full = self.cache.full
        if self.key is by_name:
            # One lookup, not a scan: a thousand waits woken at once over a cache of
            # thousands of jobs would otherwise cost a million comparisons.
            obj = full.get(key)
            return [] if obj is None else [obj]
        return [o for o in full.values() if self.key(o) == key]


def _rv(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


async def watch_loop(
    api: Api,
    state: InformerState,
    dispatch: Callable[[list[Change]], None],
    *,
    stop: Callable[[], bool],
    policy: RetryPolicy,
    watch_timeout: float = 60,
    poll_interval: float = 2.0,
) -> None:
    """List, then watch from the listed version, until ``stop()``.

    ``watch_timeout`` is the transport's idle timeout (``KubernetesConfig.watch_timeout``):
    each watch asks the server to end it sooner (:func:`watch_period`), so only a dead
    connection is silent that long; its read fails and the watch resumes from the last
    version seen."""
    attempt = 0
    while not stop():
        if state.resource_version is None or state.watch_forbidden:
            was_synced = state.synced
            try:
                changes = await state.list_changes(api)
            except ApiError as err:
                if err.forbidden:
                    state.list_forbidden = True
                    dispatch([])  # wake waiters: they poll their own job now
                    await api.sleep(poll_interval * 5)
                    continue
                await api.sleep(policy.delay(attempt, err))
                attempt += 1
                continue
            state.list_forbidden = False
            # The first list makes the cache authoritative: wake every waiter, not only
            # those whose objects it listed. A wait that began before it (on a job the
            # list does not select: a foreign one, a wrong name) looks by name now
            # instead of sleeping to its timeout.
            dispatch(changes if was_synced else [])
            if state.watch_forbidden:
                await api.sleep(poll_interval)
                continue
        call = OpenWatch(
            state.resource,
            state.namespace,
            state.resource_version,
            state.label_selector,
            state.field_selector,
            timeout_seconds=watch_period(watch_timeout),
        )
        failure: ApiError | None = None
        try:
            async with api.stream(call) as lines:
                try:
                    async for line in lines:
                        if stop():
                            break
                        if not line.strip():
                            continue
                        changes = state.apply_event(json.loads(line))
                        attempt = 0
                        if changes:
                            dispatch(changes)
                except ApiError as err:
                    failure = err
                except ValueError as err:  # a torn JSON line from a cut connection
                    failure = ApiError(0, "BadWatchLine", str(err))
        except ApiError as err:  # the watch could not be opened
            if err.forbidden:
                log.info(
                    "watch on %s is forbidden: polling every %ss instead",
                    state.resource,
                    poll_interval,
                )
                state.watch_forbidden = True
            elif err.gone:
                state.resource_version = None
            else:
                await api.sleep(policy.delay(attempt, err))
                attempt += 1
            continue
        if failure is not None:
            if failure.gone:
                state.resource_version = None
            else:
                # A broken or silent stream (watch_timeout without a byte): said once
                # per outage, then resumed from the last version seen.
                if attempt == 0:
                    log.info(
                        "watch on %s lost (%s): resuming from resourceVersion %s",
                        state.resource.plural,
                        failure,
                        state.resource_version,
                    )
                await api.sleep(policy.delay(attempt, failure))
                attempt += 1


# ----------------------------------------------------------------------- informers


class Informer:
    """An informer: the subscribers, the cache, and the loop, run as a task of the
    event loop that made it."""

    #: How long an informer keeps watching after its last subscriber left, so that
    #: back-to-back waits (a DAG's next task) reuse the connection.
    linger = 30.0

    def __init__(
        self,
        state: InformerState,
        make_api: Callable[[], Awaitable[Api]],
        *,
        watch_timeout: float,
        poll_interval: float,
        policy: RetryPolicy,
    ) -> None:
        self.state = state
        #: Subscriptions by key: a change reaches its own key's subscribers with one
        #: lookup, whatever the number of other waits (1,000 waits finishing together
        #: must not cost 1,000 x 1,000 visits).
        self.subscribers: dict[str, set[Subscription]] = {}
        # The cache keeps in full what someone waits on: the subscribers' keys.
        state.wanted = self.subscribers
        self.idle_since: float | None = time.monotonic()
        self.error: BaseException | None = None
        self._make_api = make_api
        self._watch_timeout = watch_timeout
        self._poll_interval = poll_interval
        self._policy = policy
        self._shutdown = False
        self._task: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        """Whether the loop runs (and holds its watch)."""
        return self._task is not None

    async def _run(self) -> None:
        api = None
        try:
            api = await self._make_api()
            await watch_loop(
                api,
                self.state,
                self._dispatch,
                stop=self._stop,
                policy=self._policy,
                watch_timeout=self._watch_timeout,
                poll_interval=self._poll_interval,
            )
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            self._failed(exc)
        finally:
            self._task = None
            self.state.resource_version = None
            self.state.synced = False
            if api is not None:
                # The informer owns its connection: release it even when cancelled
                # (an event loop shutting down).
                await asyncio.shield(api.close())

    def _dispatch(self, changes: list[Change]) -> None:
        """Wake the subscribers of the changed keys (every subscriber for no change: the
        informer's own state changed)."""
        if changes:
            subs = self.subscribers
            targets = [s for key in {c.key for c in changes} for s in subs.get(key, ())]
        else:
            targets = [s for group in self.subscribers.values() for s in group]
        for sub in targets:
            sub.waker.notify()

    def _failed(self, exc: BaseException) -> None:
        """The loop died: surface it to the waiters instead of dying silently."""
        if not self._shutdown:
            log.error("informer for %s stopped", self.state.resource, exc_info=exc)
        self.error = exc
        self._dispatch([])

    def subscribe(self, key: str, waker: Waker) -> Subscription:
        """Wake ``waker`` on news of ``key``; start the loop if it is not running."""
        sub = Subscription(self, key, waker)
        self.subscribers.setdefault(key, set()).add(sub)
        self.idle_since = None
        if self._task is None:
            self.error = None
            self._shutdown = False
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"kf-informer-{self.state.resource.plural}"
            )
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        subs = self.subscribers.get(sub.key)
        if subs is not None:
            subs.discard(sub)
            if not subs:
                del self.subscribers[sub.key]
                self.state.release(sub.key)
        if not self.subscribers:
            self.idle_since = time.monotonic()

    @property
    def synced(self) -> bool:
        return self.state.synced

    def shutdown(self) -> None:
        """Stop the loop now (from the loop's own thread)."""
        self._shutdown = True
        if self._task is not None:
            self._task.cancel()

    def _stop(self) -> bool:
        return bool(
            self._shutdown
            or (
                not self.subscribers
                and self.idle_since is not None
                and time.monotonic() - self.idle_since > self.linger
            )
        )


class Subscription:
    """Interest in one key of an informer: the informer wakes ``waker`` on news."""

    def __init__(self, informer: Informer, key: str, waker: Waker) -> None:
        self.informer = informer
        self.key = key
        self.waker = waker

    def objects(self) -> list[dict[str, Any]]:
        """The cached objects under the key (a copy of the list)."""
        return self.informer.state.objects_for(self.key)

    def track(self, obj: Mapping[str, Any]) -> None:
        """``obj`` was read by name (see :meth:`JobSubscription.track`): nothing to do."""

    @property
    def synced(self) -> bool:
        return self.informer.synced

    @property
    def unavailable(self) -> bool:
        """The informer cannot serve (listing forbidden, or its loop died): poll by
        name."""
        return self.informer.state.list_forbidden or self.informer.error is not None

    def close(self) -> None:
        self.informer.unsubscribe(self)


class JobSubscription:
    """The jobs a wait looks at: the shared informer of the suite's own jobs and, for a
    job the suite did not create (made with the Kubeflow SDK or kubectl), a watch on
    that one name — so that foreign jobs never enter, nor cost, the shared path.

    Quacks like :class:`Subscription`; :meth:`track` is told of every object the wait
    reads by name and switches to the per-name watch when the object lies outside the
    shared informer's selector."""

    def __init__(
        self,
        shared: Subscription,
        selects: Callable[[Mapping[str, Any]], bool],
        open_named: Callable[[], Subscription],
    ) -> None:
        self.shared = shared
        self.named: Subscription | None = None
        self._selects = selects
        self._open_named = open_named

    @property
    def active(self) -> Subscription:
        return self.named if self.named is not None else self.shared

    def track(self, obj: Mapping[str, Any]) -> None:
        """``obj`` was read by name: follow it by name if the shared informer cannot."""
        if self.named is None and not self._selects(obj):
            self.named = self._open_named()

    def objects(self) -> list[dict[str, Any]]:
        return self.active.objects()

    @property
    def synced(self) -> bool:
        return self.active.synced

    @property
    def unavailable(self) -> bool:
        return self.active.unavailable

    def close(self) -> None:
        self.shared.close()
        if self.named is not None:
            self.named.close()


# ------------------------------------------------------------------------ registry

# One registry per event loop: informers are bound to the loop that runs their task.
_registries: weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop, dict[tuple[Any, ...], Informer]
] = weakref.WeakKeyDictionary()


#: Above this many informers, stopped ones without subscribers are dropped from a
#: registry (each wait on a foreign job adds a per-name informer; a triggerer that
#: runs for weeks must not keep them all).
_PRUNE_ABOVE = 64


def informer(key: tuple[Any, ...], factory: Callable[[], Informer]) -> Informer:
    """The informer for ``key`` in the running event loop, created on first use."""
    registry = _registries.setdefault(asyncio.get_running_loop(), {})
    found = registry.get(key)
    if found is None:
        if len(registry) > _PRUNE_ABOVE:
            for old_key, old in list(registry.items()):
                if not old.subscribers and not old.running:
                    del registry[old_key]
        found = registry[key] = factory()
    return found


def open_watch_count(cluster: str | None = None) -> int:
    """Informers currently running, each holding one watch (a test and benchmark
    probe); ``cluster`` counts only those of one config (``KubernetesConfig.cache_key``)."""
    return sum(
        1
        for registry in list(_registries.values())
        for key, found in list(registry.items())
        if cluster in (None, key[0]) and found.running
    )


@atexit.register
def shutdown_informers(*, lingering_only: bool = False) -> None:
    """Stop every running informer of this process, quietly (also run at interpreter
    exit; a test stopping a server stops them first, so that they do not retry against
    a closed port). ``lingering_only`` stops only those no wait uses any more (see
    :attr:`Informer.linger`). A later wait starts them again."""
    try:
        here: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        here = None
    for loop, registry in list(_registries.items()):
        running = [
            i for i in registry.values() if i.running and not (lingering_only and i.subscribers)
        ]
        if not running or loop.is_closed():
            continue
        if loop is here or not loop.is_running():
            for found in running:
                found.shutdown()  # ends at the loop's next turn
            continue

        async def stopped(informers: list[Informer] = running) -> None:
            tasks = [i._task for i in informers if i._task is not None]
            for found in informers:
                found.shutdown()
            await asyncio.wait(tasks, timeout=2.0)

        # From another thread (the portal's loop): return once they have ended.
        with contextlib.suppress(RuntimeError, TimeoutError, concurrent.futures.TimeoutError):
            asyncio.run_coroutine_threadsafe(stopped(), loop).result(3.0)
