"""A Kubernetes-API test server: real HTTP, apiserver semantics, no cluster.

:class:`KubeTestServer` serves :class:`~kf_trainer_core.testing.store.Store` over
aiohttp on loopback, in a background thread with its own event loop, so the real
``kubernetes`` and ``kubernetes_asyncio`` clients can be pointed at it with a
kubeconfig. It implements what the suite's client relies on: discovery, CRUD with
optimistic concurrency and the status subresource, merge/JSON/strategic patches,
label and field selectors, pagination, watches (resume, bookmarks, timeouts, 410),
pod logs (follow, tail, since), CRD defaulting/pruning/validation of TrainJobs with the
upstream CRDs, Status error bodies as the apiserver shapes them, request accounting
(:class:`RequestLog`) and fault injection (:mod:`kf_trainer_core.testing.faults`).

Example::

    with KubeTestServer() as server:
        kubernetes.config.load_kube_config(config_file=str(server.kubeconfig()))
        ...
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import concurrent.futures
import contextlib
import importlib
import json
import logging
import math
import re
import socket
import tempfile
import threading
import time
import uuid
import warnings
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, TypeVar

import yaml
from aiohttp import web

from kf_trainer_core.kueue import LOCAL_QUEUES, VISIBILITY_LOCAL_QUEUES, WORKLOADS
from kf_trainer_core.testing import crd
from kf_trainer_core.testing.crd import find_upstream
from kf_trainer_core.testing.faults import FaultInjector
from kf_trainer_core.testing.store import (
    CLUSTER_TRAINING_RUNTIMES,
    EVENTS,
    NAMESPACES,
    PODS,
    RESOURCES,
    SERVICEACCOUNTS,
    Admission,
    FieldSelector,
    LabelSelector,
    PodLogs,
    Resource,
    Store,
    StoreError,
    WatchEvent,
    has_status_subresource,
)

__all__ = ["EVENTS_V1", "KubeTestServer", "RequestLog", "RequestRecord", "core_event_to_v1"]

_log = logging.getLogger(__name__)
_T = TypeVar("_T")
JSON = dict[str, Any]

#: events.k8s.io/v1 events: a second view of the core v1 Event objects.
EVENTS_V1 = Resource("events.k8s.io", "v1", "events", "Event")

_VERBS_ALL = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
_SHORT_NAMES = {
    "pods": ["po"],
    "events": ["ev"],
    "configmaps": ["cm"],
    "namespaces": ["ns"],
    "serviceaccounts": ["sa"],
}
# Registries that answer DELETE with the deleted object rather than a Status Success.
_RETURNS_DELETED_OBJECT = frozenset({PODS, NAMESPACES})
_DEFAULT_NAMESPACES = ("default", "kf-test")
_PATCH_TYPES = {
    "application/merge-patch+json": "merge",
    "application/json-patch+json": "json",
    "application/strategic-merge-patch+json": "strategic",
    "application/apply-patch+yaml": "apply",
}
_TOKEN_SPLIT = re.compile(r"[,=!()\s]+")


# --------------------------------------------------------------------------- accounting


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
        subresources too) or ``plural/subresource`` (``pods/log``)."""
        out = []
        for r in self.records:
            if verb is not None and r.verb != verb:
                continue
            if resource is not None:
                if "/" in resource:
                    if f"{r.resource}/{r.subresource}" != resource:
                        continue
                elif r.resource != resource:
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


# --------------------------------------------------------------------------- upstream


_RUNTIME_CACHE: dict[Path, list[JSON]] = {}


def _load_runtimes(upstream: Path) -> list[JSON]:
    """The default ClusterTrainingRuntimes as the kustomize overlay installs them (its
    labels added, untagged images pinned), parsed once per process."""
    cached = _RUNTIME_CACHE.get(upstream)
    if cached is not None:
        return cached
    root = upstream / "kubeflow-trainer" / "runtimes"
    labels: dict[str, str] = {}
    tags: dict[str, str] = {}
    overlay = root / "overlays-runtimes-kustomization.yaml"
    if overlay.exists():
        spec = yaml.safe_load(overlay.read_text()) or {}
        for entry in spec.get("labels") or []:
            labels.update(entry.get("pairs") or {})
        tags = {i["name"]: i["newTag"] for i in spec.get("images") or [] if "newTag" in i}
    runtimes: list[JSON] = []
    for path in sorted(root.rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "ClusterTrainingRuntime":
                doc.setdefault("metadata", {}).setdefault("labels", {}).update(labels)
                _pin_images(doc, tags)
                runtimes.append(doc)
    _RUNTIME_CACHE[upstream] = runtimes
    return runtimes


def _pin_images(node: Any, tags: dict[str, str]) -> None:
    if isinstance(node, dict):
        image = node.get("image")
        if isinstance(image, str) and image in tags:
            node["image"] = f"{image}:{tags[image]}"
        for value in node.values():
            _pin_images(value, tags)
    elif isinstance(node, list):
        for value in node:
            _pin_images(value, tags)


# --------------------------------------------------------------------------- helpers


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def _error(code: int, reason: str, message: str, details: JSON | None = None) -> StoreError:
    return StoreError(code, reason, message, details)


def _not_found_path() -> StoreError:
    return _error(404, "NotFound", "the server could not find the requested resource", {})


def _method_not_allowed() -> StoreError:
    return _error(
        405,
        "MethodNotAllowed",
        "the server does not allow this method on the requested resource",
        {},
    )


def _truthy(value: str | None) -> bool:
    return value is not None and value.lower() in ("true", "1")


def _format_log_time(when: datetime) -> str:
    # Go's RFC3339Nano: fractional seconds without trailing zeros.
    text = when.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f").rstrip("0").rstrip(".")
    return text + "Z"


def _parse_time(text: str) -> datetime:
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise StoreError.bad_request(
            f'parsing time "{text}" as "2006-01-02T15:04:05Z07:00": cannot parse'
        ) from None
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


def _int_param(query: Any, key: str) -> int | None:
    raw = query.get(key)
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise StoreError.bad_request(f'{key}: Invalid value: "{raw}": must be an integer') from None


def core_event_to_v1(obj: JSON) -> JSON:
    """A core/v1 Event as events.k8s.io/v1 shows it (renamed and deprecated fields)."""
    out: JSON = {"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": obj["metadata"]}
    renames = {
        "involvedObject": "regarding",
        "related": "related",
        "message": "note",
        "reason": "reason",
        "type": "type",
        "action": "action",
        "series": "series",
        "eventTime": "eventTime",
        "reportingComponent": "reportingController",
        "reportingInstance": "reportingInstance",
        "source": "deprecatedSource",
        "firstTimestamp": "deprecatedFirstTimestamp",
        "lastTimestamp": "deprecatedLastTimestamp",
        "count": "deprecatedCount",
    }
    for old, new in renames.items():
        if old in obj:
            out[new] = obj[old]
    out.setdefault("eventTime", None)
    return out


_V1_EVENT_FIELDS = {
    "regarding.": "involvedObject.",
    "reportingController": "reportingComponent",
    "deprecatedSource": "source",
}


def _events_v1_field_selector(text: str | None) -> str | None:
    if not text:
        return text
    for new, old in _V1_EVENT_FIELDS.items():
        text = text.replace(new, old)
    return text


# --------------------------------------------------------------------------- routing


@dataclass
class _Route:
    res: Resource | None = None  # None: a discovery/non-resource path
    view: Resource | None = None  # the type as served (EVENTS_V1 for events.k8s.io)
    namespace: str | None = None
    name: str | None = None
    subresource: str | None = None
    watch_path: bool = False  # the deprecated /watch/ prefix
    discovery: JSON | None = None
    text: str | None = None


@dataclass
class _Ctx:
    """What the access log records about one request, filled in as it is understood."""

    start: float
    verb: str = "get"
    route: _Route = field(default_factory=_Route)
    name: str | None = None
    recorded: bool = False


# --------------------------------------------------------------------------- watch


class _Encoded:
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
                obj = self._objects[v1_events] = _dumps(
                    core_event_to_v1(source) if v1_events else source
                )
            head = b'{"type":"' + event_type.encode() + b'","object":'
            data = self._lines[key] = head + obj + b"}\n"
        return data


class _Watcher:
    """One open watch stream: filters, buffers and writes events in order."""

    def __init__(
        self,
        server: KubeTestServer,
        res: Resource,
        view: Resource,
        namespace: str | None,
        labels: LabelSelector,
        fields: FieldSelector,
        start_rv: int,
        bookmarks: bool,
    ) -> None:
        self.server = server
        self.res = res
        self.view = view
        self.v1_events = view is EVENTS_V1
        self.namespace = namespace if res.namespaced else None
        self.labels = labels
        self.fields = fields
        self.filtered = not labels.empty or not fields.empty
        self.start_rv = start_rv
        self.bookmarks = bookmarks
        self.buffer: list[bytes] = []
        self.wake = asyncio.Event()
        self.closed = False
        self.abort = False
        self.finish = False  # end once the buffer is written
        self.sent = 0

    def _match(self, obj: JSON) -> bool:
        return self.labels.matches(obj["metadata"].get("labels")) and self.fields.matches(obj)

    def offer(
        self, event: WatchEvent, previous: JSON | None, encoded: _Encoded, live: bool = True
    ) -> None:
        """Queue ``event`` if this watch selects it (as ADDED/MODIFIED/DELETED the way
        the apiserver's watch cache does when an object enters or leaves a selector)."""
        if self.closed or self.finish:
            return
        obj = event.object
        meta = obj["metadata"]
        if live and int(meta["resourceVersion"]) <= self.start_rv:
            return  # already part of this watch's initial state or replay
        if self.namespace and meta.get("namespace") != self.namespace:
            return
        event_type = event.type
        if self.filtered:
            if event_type == "DELETED":
                if not self._match(previous if previous is not None else obj):
                    return
            else:
                now = self._match(obj)
                before = previous is not None and event_type != "ADDED" and self._match(previous)
                if now and before:
                    event_type = "MODIFIED"
                elif now:
                    event_type = "ADDED"
                elif before:
                    event_type = "DELETED"
                else:
                    return
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
        meta: JSON = {"resourceVersion": str(rv)}
        if initial_end:
            meta["annotations"] = {"k8s.io/initial-events-end": "true"}
        body = {
            "type": "BOOKMARK",
            "object": {
                "kind": self.view.kind,
                "apiVersion": self.view.api_version,
                "metadata": meta,
            },
        }
        self.buffer.append(_dumps(body) + b"\n")
        self.wake.set()

    def close(self, *, abort: bool = False) -> None:
        """End the stream without writing what is still buffered."""
        self.closed = True
        self.abort = self.abort or abort
        self.wake.set()


class _Follower:
    """One open ``follow=true`` log stream."""

    def __init__(self, namespace: str, pod: str) -> None:
        self.pod = (namespace, pod)
        self.wake = asyncio.Event()
        self.closed = False
        self.abort = False

    def close(self, *, abort: bool = False) -> None:
        self.closed = True
        self.abort = self.abort or abort
        self.wake.set()


# --------------------------------------------------------------------------- server


class KubeTestServer:
    """A Kubernetes-API server for tests, on ``127.0.0.1`` (ephemeral port by default).

    It runs in a background thread with its own event loop; all public methods are
    called from other threads. ``store``, ``logs``, ``faults`` and ``requests`` expose
    its state; ``controller`` is the simulated Trainer controller (when that module is
    available). Namespaces ``default`` and ``kf-test`` and the upstream default
    ClusterTrainingRuntimes are seeded at construction and by :meth:`reset`.
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        upstream: Path | None = None,
        bookmark_interval: float = 5.0,
        watch_timeout: float = 1800.0,
        user: str = "system:serviceaccount:default:default",
        enforce_namespaces: bool = True,
        seed: bool = True,
    ) -> None:
        """``upstream``: the shared/upstream folder (found automatically when None).
        ``bookmark_interval``: seconds between BOOKMARK events on watches that allow
        them (the apiserver sends about one a minute). ``watch_timeout``: how long a
        watch without ``timeoutSeconds`` stays open. ``user``: the name in 403 messages.
        ``enforce_namespaces``: creating in a missing namespace is 404, as the
        apiserver's NamespaceLifecycle admission does. ``seed``: seed namespaces and
        runtimes now."""
        self.host = host
        self._port = port
        self.store = Store()
        self.logs = PodLogs()
        self.faults = FaultInjector(self)
        self.requests = RequestLog()
        self.default_bookmark_interval = bookmark_interval
        self.bookmark_interval = bookmark_interval
        self.watch_timeout = watch_timeout
        self.watch_buffer_limit = 100_000
        self.user = user
        self.enforce_namespaces = enforce_namespaces
        self._token_check: Callable[[str], bool] | None = None
        #: The TrainJob status server, when enabled (:meth:`enable_status_server`).
        self.status_server: Any = None
        self._controller: Any = None
        self._controller_started = False
        #: The simulated Kueue (:meth:`install_kueue`); None: Kueue is not installed.
        self.kueue: Any = None

        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.ServerRunner | None = None
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._watchers: dict[Resource, set[_Watcher]] = {}
        self._open_watches = 0  # kept apart so other threads can read it safely
        #: Response body bytes sent since start (a benchmark probe: what clients received).
        self.bytes_sent = 0
        self._followers: set[_Follower] = set()
        self._fanned_rv = 0
        self._inbox: list[tuple[WatchEvent, JSON | None]] = []
        self._inbox_lock = threading.Lock()
        self._inbox_scheduled = False
        self._lifecycle = threading.Lock()
        self._commit_hooks: list[Callable[[WatchEvent], None]] = []
        self.store.subscribe_changes(self._on_change)

        self.upstream = upstream if upstream is not None else find_upstream()
        self._schemas: dict[Resource, crd.CRDSchema] = {}
        self._load_schemas()
        if seed:
            self._seed()

    # ------------------------------------------------------------- schemas

    def _load_schemas(self) -> None:
        if self.upstream is None or not self.upstream.is_dir():
            warnings.warn(
                "kf_trainer_core.testing: the upstream CRDs (shared/upstream) were not found; "
                "the test server skips CRD schema checks and seeds no runtimes",
                RuntimeWarning,
                stacklevel=3,
            )
            self.upstream = None
            return
        try:
            schemas = crd.load_upstream_crds(self.upstream)
        except Exception as exc:  # a broken CRD file must not take the server down
            warnings.warn(
                f"loading the upstream CRDs failed: {exc!r}", RuntimeWarning, stacklevel=3
            )
            return
        for res in RESOURCES:
            schema = schemas.get(f"{res.plural}.{res.group}") if res.group else None
            if schema is not None:
                self._schemas[res] = schema

    @property
    def validates(self) -> bool:
        """Whether TrainJobs are checked against the upstream CRD schema."""
        return bool(self._schemas)

    def _admission(self, mode: str, warnings_out: list[str]) -> Admission:
        """CRD handling of a custom resource write: unknown fields (Strict: 400; Warn:
        warning), pruning, defaulting, then OpenAPI + CEL validation (422)."""

        def admit(res: Resource, new: JSON, old: JSON | None, subresource: str | None) -> JSON:
            if self.kueue is not None and subresource is None:
                new = self.kueue.mutate(res, new, old)  # Kueue's job webhook
            schema = self._schemas.get(res)
            if schema is None:
                return new
            unknown = list(schema.unknown_fields(new))
            if unknown:
                if mode == "Strict":
                    raise StoreError.bad_request(crd.format_unknown_fields(unknown))
                if mode == "Warn":
                    warnings_out.extend(f'unknown field "{path}"' for path in unknown)
                new = schema.prune(new)
            new = schema.apply_defaults(new)
            errors = schema.validate(new, old=old, subresource=subresource)
            if errors:
                raise self._invalid(res, new, errors)
            return dict(new)

        return admit

    def _invalid(self, res: Resource, obj: JSON, errors: list[crd.FieldError]) -> StoreError:
        name = str(obj.get("metadata", {}).get("name") or "")
        body = crd.invalid_status(res.kind, res.group, name, errors)
        return StoreError(422, "Invalid", body["message"], body["details"])

    # ------------------------------------------------------------- lifecycle

    @property
    def port(self) -> int:
        """The TCP port (known once started)."""
        return self._port

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://{self.host}:{self._port}"

    @property
    def running(self) -> bool:
        """Whether the server accepts connections."""
        return self._runner is not None

    def start(self, *, controller: bool = False) -> KubeTestServer:
        """Start serving (and the simulated controller when ``controller``)."""
        with self._lifecycle:
            if self._thread is None:
                loop = asyncio.new_event_loop()
                ready = threading.Event()

                def run() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(ready.set)
                    loop.run_forever()

                self._loop = loop
                self._thread = threading.Thread(target=run, name="kube-test-server", daemon=True)
                self._thread.start()
                ready.wait()
            if self._runner is None:
                self._call(self._astart())
        if controller and self.controller is not None and not self._controller_started:
            self.controller.start()
            self._controller_started = True
        return self

    def install_kueue(self) -> Any:
        """Install the simulated Kueue (:mod:`kf_trainer_core.testing.kueue`): its
        Workload CRD (from the upstream folder), the visibility API and admission.
        Returns the :class:`~kf_trainer_core.testing.kueue.KueueSimulator` to configure
        queues on. :meth:`reset` uninstalls it."""
        from kf_trainer_core.testing.kueue import KueueSimulator, load_workload_crd

        if self.kueue is None:
            if self.upstream is not None:
                self._schemas[WORKLOADS] = load_workload_crd(self.upstream)
            self.kueue = KueueSimulator(self.store)
            self.kueue.start()
        return self.kueue

    def uninstall_kueue(self) -> None:
        """Remove the simulated Kueue: Kueue paths answer 404 again."""
        if self.kueue is not None:
            self.kueue.stop()
            self.kueue = None
            self._schemas.pop(WORKLOADS, None)

    def stop(self) -> None:
        """Stop serving, end every stream and the controller; the data stays."""
        self.uninstall_kueue()
        self.disable_status_server()
        with self._lifecycle:
            if self._controller_started:
                self._controller.stop()
                self._controller_started = False
            if self._loop is None:
                return
            if self._runner is not None:
                self._call(self._astop(abort=False))
            loop, thread = self._loop, self._thread
            loop.call_soon_threadsafe(loop.stop)
            if thread is not None:
                thread.join(10)
            loop.close()
            self._loop = None
            self._thread = None
            if self._executor is not None:
                self._executor.shutdown(wait=False)
                self._executor = None

    def restart(self, downtime: float = 0.0, *, abort: bool = False) -> None:
        """Simulate an apiserver restart: same port, same data, every open connection
        (watches, log follows, keep-alive) dropped; new connections are refused for
        ``downtime`` seconds. Streams end cleanly, as a graceful apiserver shutdown ends
        them; ``abort=True`` resets their connections instead (a crash)."""
        with self._lifecycle:
            if self._runner is None:
                raise RuntimeError("the server is not running")
            self._call(self._astop(abort=abort))
            if downtime > 0:
                time.sleep(downtime)
            self._call(self._astart())

    def __enter__(self) -> KubeTestServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _call(self, coro: Awaitable[_T]) -> _T:
        """Run ``coro`` on the server's loop and wait for it (from another thread)."""
        if self._loop is None:
            raise RuntimeError("the server is not running")

        async def wrapper() -> _T:
            return await coro

        return asyncio.run_coroutine_threadsafe(wrapper(), self._loop).result(30)

    def _on_loop(self, fn: Callable[[], _T]) -> _T | None:
        """Run ``fn`` on the server's loop (directly when not running)."""
        if self._loop is None:
            return fn()

        async def wrapper() -> _T:
            return fn()

        return self._call(wrapper())

    async def _astart(self) -> None:
        server = web.Server(self._handle, handler_cancellation=True)
        runner = web.ServerRunner(server, shutdown_timeout=0.5, handle_signals=False)
        await runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self._port))
        sock.listen(1024)
        sock.setblocking(False)
        self._port = sock.getsockname()[1]
        await web.SockSite(runner, sock).start()
        self._runner = runner
        self._fanned_rv = int(self.store.current_resource_version)

    async def _astop(self, *, abort: bool) -> None:
        self._close_streams(abort=abort)
        runner, self._runner = self._runner, None
        if runner is not None:
            await asyncio.sleep(0)  # let the streams see their close flag
            await runner.cleanup()

    def _close_streams(self, *, abort: bool) -> int:
        n = 0
        for watchers in self._watchers.values():
            for w in watchers:
                w.close(abort=abort)
                n += 1
        for f in self._followers:
            f.close(abort=abort)
        return n

    def drop_log_streams(self, *, abort: bool = False) -> int:
        """End every open log follow stream (``abort``: reset the connection). Returns
        how many were open."""

        def run() -> int:
            followers = list(self._followers)
            for f in followers:
                f.close(abort=abort)
            return len(followers)

        return self._on_loop(run) or 0

    def drop_watches(self, *, abort: bool = False) -> int:
        """End every open watch stream (``abort``: reset the connection instead of
        ending the stream cleanly). Returns how many were open."""

        def run() -> int:
            n = 0
            for watchers in self._watchers.values():
                for w in watchers:
                    w.close(abort=abort)
                    n += 1
            return n

        return self._on_loop(run) or 0

    @property
    def open_watches(self) -> int:
        """How many watch streams are open now."""
        return self._open_watches

    # ------------------------------------------------------------- state

    @property
    def controller(self) -> Any:
        """The simulated Trainer controller (created on first use), or None when
        :mod:`kf_trainer_core.testing.controller` does not exist (yet)."""
        if self._controller is None:
            try:
                module = importlib.import_module("kf_trainer_core.testing.controller")
            except ModuleNotFoundError as exc:
                if exc.name != "kf_trainer_core.testing.controller":
                    raise
                return None
            self._controller = module.TrainerController(self.store, self.logs)
        return self._controller

    def reset(self) -> None:
        """Back to a fresh server: objects, logs, faults, the request log and the token
        requirement cleared, open streams ended, the bookmark interval restored, the
        controller reset; namespaces and upstream runtimes seeded again."""
        self._on_loop(lambda: self._close_streams(abort=False))
        self.disable_status_server()
        self.faults.clear()
        self.uninstall_kueue()
        if self._controller is not None:
            self._controller.reset()
        self.store.reset()
        self.logs.reset()
        self._token_check = None
        self.bookmark_interval = self.default_bookmark_interval
        self._seed()
        self.requests.clear()

    def _seed(self) -> None:
        for ns in _DEFAULT_NAMESPACES:
            self.store.create(
                NAMESPACES,
                {
                    "metadata": {"name": ns, "labels": {"kubernetes.io/metadata.name": ns}},
                    "spec": {"finalizers": ["kubernetes"]},
                    "status": {"phase": "Active"},
                },
            )
            self.store.create(SERVICEACCOUNTS, {"metadata": {"name": "default"}}, namespace=ns)
        self.seed_upstream_runtimes()

    def seed_upstream_runtimes(self) -> list[str]:
        """Create the upstream default ClusterTrainingRuntimes (``torch-distributed``, ...)
        that are missing; returns the names created."""
        if self.upstream is None:
            return []
        created: list[str] = []
        admit = self._admission("Ignore", [])
        for runtime in _load_runtimes(self.upstream):
            name = runtime["metadata"]["name"]
            if self.store.try_get(CLUSTER_TRAINING_RUNTIMES, None, name) is not None:
                continue
            try:
                self.store.create(CLUSTER_TRAINING_RUNTIMES, runtime, admission=admit)
            except StoreError as exc:
                _log.warning("upstream runtime %s rejected (%s); stored unvalidated", name, exc)
                self.store.create(CLUSTER_TRAINING_RUNTIMES, runtime)
            created.append(name)
        return created

    def require_token(self, tokens: set[str] | Callable[[str], bool] | None) -> None:
        """Answer 401 to requests without an accepted bearer token (None: no auth)."""
        if tokens is None:
            self._token_check = None
        elif callable(tokens):
            self._token_check = tokens
        else:
            accepted = frozenset(tokens)
            self._token_check = accepted.__contains__

    def enable_status_server(self) -> Any:
        """Turn on the Trainer's TrainJob status server (feature gate ``TrainJobStatus``):
        an HTTPS endpoint that writes ``status.trainerStatus`` through the CRD's
        validation, and the controller's injection of its URL, CA and token into trainer
        pods (see :mod:`kf_trainer_core.testing.status_server`). Returns it."""
        from kf_trainer_core.testing.status_server import StatusServer

        if self.status_server is None:
            self.status_server = StatusServer(self.store, self._admission("Strict", []))
        self.status_server.start()
        if self.controller is not None:
            self.controller.status_server = self.status_server
        return self.status_server

    def disable_status_server(self) -> None:
        """Turn the status server off again (pods created later get no variables)."""
        server, self.status_server = self.status_server, None
        if server is not None:
            server.stop()
        if self._controller is not None:
            self._controller.status_server = None

    def forbid(self, verb: str, resource: str, namespace: str | None = None) -> None:
        """Deny ``verb`` on ``resource`` (403, as RBAC would); see :class:`FaultInjector`."""
        self.faults.forbid(verb, resource, namespace)

    def kubeconfig(
        self,
        path: Path | None = None,
        *,
        namespace: str = "default",
        token: str | None = None,
        context: str = "kf-test",
        user: JSON | None = None,
    ) -> Path:
        """Write a kubeconfig for this server and return its path (a temporary file when
        ``path`` is None). ``user`` replaces the user entry (e.g. an ``exec`` plugin)."""
        if not self._port:
            raise RuntimeError("start() the server before asking for a kubeconfig")
        user_entry: JSON = dict(user) if user is not None else {}
        if token is not None and user is None:
            user_entry["token"] = token
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": context, "cluster": {"server": self.url}}],
            "users": [{"name": context, "user": user_entry}],
            "contexts": [
                {
                    "name": context,
                    "context": {"cluster": context, "user": context, "namespace": namespace},
                }
            ],
            "current-context": context,
            "preferences": {},
        }
        if path is None:
            fd, name = tempfile.mkstemp(prefix="kf-test-kubeconfig-", suffix=".yaml")
            path = Path(name)
            with open(fd, "w") as fh:
                yaml.safe_dump(config, fh, sort_keys=False)
        else:
            path.write_text(yaml.safe_dump(config, sort_keys=False))
        return path

    # ------------------------------------------------------------- fan-out

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
            encoded = _Encoded(event)
            for w in watchers:
                w.offer(event, previous, encoded)

    # ------------------------------------------------------------- HTTP

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        ctx = _Ctx(start=time.monotonic())
        status = 500
        try:
            response = await self._serve(request, ctx)
            status = response.status
            # Streams are written by now; a plain response is about to be.
            body = getattr(response, "body", None)
            self.bytes_sent += len(body) if isinstance(body, bytes) else response.body_length
            return response
        except StoreError as err:
            response = self._error_response(err)
            status = response.status
            return response
        except asyncio.CancelledError:
            status = 499  # the client went away (nginx's code for it)
            raise
        except Exception as exc:
            _log.exception("test server failed on %s %s", request.method, request.path_qs)
            internal = _error(
                500,
                "InternalError",
                f"Internal error occurred: {exc}",
                {"causes": [{"message": str(exc)}]},
            )
            return self._error_response(internal)
        finally:
            if not ctx.recorded:
                self._record(request, ctx, status)

    def _record(self, request: web.BaseRequest, ctx: _Ctx, status: int) -> None:
        ctx.recorded = True
        route = ctx.route
        self.requests.append(
            RequestRecord(
                time=time.time(),
                method=request.method,
                path=request.path,
                query=dict(request.query),
                verb=ctx.verb,
                resource=route.res.plural if route.res else "",
                subresource=route.subresource,
                namespace=route.namespace,
                name=ctx.name or route.name,
                status=status,
                user_agent=request.headers.get("User-Agent", ""),
                group=route.view.group if route.view else "",
                duration=time.monotonic() - ctx.start,
            )
        )

    def _error_response(self, err: StoreError) -> web.Response:
        response = web.Response(
            status=err.code, body=_dumps(err.status()), content_type="application/json"
        )
        if err.retry_after is not None:
            # delta-seconds must be a whole number (urllib3 rejects fractions).
            response.headers["Retry-After"] = str(max(0, math.ceil(err.retry_after)))
        return response

    def _json(
        self,
        obj: Any,
        status: int = 200,
        warnings_list: list[str] | None = None,
        pretty: bool = False,
    ) -> web.Response:
        body = (json.dumps(obj, indent=2).encode() + b"\n") if pretty else _dumps(obj)
        response = web.Response(status=status, body=body, content_type="application/json")
        response.headers["Audit-Id"] = str(uuid.uuid4())
        for text in warnings_list or ():
            escaped = text.replace("\\", "\\\\").replace('"', '\\"')
            response.headers.add("Warning", f'299 - "{escaped}"')
        return response

    async def _serve(self, request: web.BaseRequest, ctx: _Ctx) -> web.StreamResponse:
        route = self._route(request.path)
        ctx.route = route
        query = request.query
        method = request.method
        if route.res is None:
            ctx.verb = "get"
            await self._pre_checks(request, ctx)
            if method != "GET":
                raise _method_not_allowed()
            if route.text is not None:
                return web.Response(text=route.text, content_type="text/plain")
            if route.discovery is None:
                raise _not_found_path()
            return self._json(route.discovery)
        ctx.verb = self._verb(method, route, query)
        await self._pre_checks(request, ctx)
        res = route.res
        if route.view is EVENTS_V1 and ctx.verb not in ("get", "list", "watch"):
            raise _method_not_allowed()
        if route.subresource == "log":
            if method != "GET":
                raise _method_not_allowed()
            return await self._pod_log(request, ctx)
        if route.view is VISIBILITY_LOCAL_QUEUES:
            if route.subresource != "pendingworkloads" or ctx.verb != "get":
                raise _not_found_path()
            summary = self.kueue.pending_workloads(route.namespace or "", route.name or "")
            return self._json(summary)
        if route.subresource is not None and route.subresource != "status":
            raise _not_found_path()
        if route.subresource == "status" and not has_status_subresource(res):
            raise _not_found_path()
        pretty = _truthy(query.get("pretty"))
        if ctx.verb == "get":
            obj = self.store.get(res, route.namespace, route.name or "")
            return self._json(self._present(obj, route), pretty=pretty)
        if ctx.verb == "list":
            return self._json(self._list(route, query), pretty=pretty)
        if ctx.verb == "watch":
            return await self._watch(request, ctx)
        if ctx.verb == "create":
            return await self._create(request, ctx)
        if ctx.verb in ("update", "patch"):
            return await self._write(request, ctx)
        if ctx.verb == "delete":
            return await self._delete(request, ctx)
        if ctx.verb == "deletecollection":
            return await self._delete_collection(request, ctx)
        raise _method_not_allowed()

    async def _pre_checks(self, request: web.BaseRequest, ctx: _Ctx) -> None:
        """Injected latency, authentication, injected failures, RBAC denials."""
        route = ctx.route
        plural = route.res.plural if route.res else ""
        delay = self.faults.delay_for(ctx.verb, plural, route.subresource)
        if delay > 0:
            await asyncio.sleep(delay)
        check = self._token_check
        if check is not None:
            header = request.headers.get("Authorization", "")
            token = header[7:].strip() if header[:7].lower() == "bearer " else ""
            if not token or not check(token):
                raise _error(401, "Unauthorized", "Unauthorized")
        failure = self.faults.take_failure(ctx.verb, plural, route.subresource)
        if failure is not None:
            raise failure
        if route.res is not None and self.faults.forbidden(
            ctx.verb, plural, route.subresource, route.namespace
        ):
            raise self._forbidden(ctx)

    def _forbidden(self, ctx: _Ctx) -> StoreError:
        route = ctx.route
        view = route.view or route.res
        assert view is not None
        resource = view.plural + (f"/{route.subresource}" if route.subresource else "")
        subject = f'{view.qualified} "{route.name}"' if route.name else view.qualified
        scope = (
            f'in the namespace "{route.namespace}"' if route.namespace else "at the cluster scope"
        )
        message = (
            f'{subject} is forbidden: User "{self.user}" cannot {ctx.verb} resource '
            f'"{resource}" in API group "{view.group}" {scope}'
        )
        details: JSON = {}
        if route.name:
            details["name"] = route.name
        if view.group:
            details["group"] = view.group
        details["kind"] = view.plural
        return _error(403, "Forbidden", message, details)

    @staticmethod
    def _verb(method: str, route: _Route, query: Any) -> str:
        if method == "GET":
            if route.watch_path or _truthy(query.get("watch")):
                return "watch"
            if route.name is None:
                return "list"
            return "get"
        if method == "POST":
            if route.name is not None:
                raise _method_not_allowed()
            return "create"
        if method in ("PUT", "PATCH") and route.name is None:
            raise _method_not_allowed()
        if method == "PUT":
            return "update"
        if method == "PATCH":
            return "patch"
        if method == "DELETE":
            return "delete" if route.name is not None else "deletecollection"
        raise _method_not_allowed()

    # ------------------------------------------------------------- routes

    def _route(self, path: str) -> _Route:
        parts = [p for p in path.split("/") if p]
        if not parts:
            return _Route(discovery={"paths": ["/api", "/api/v1", "/apis", "/version"]})
        if parts[0] in ("healthz", "readyz", "livez") and len(parts) == 1:
            return _Route(text="ok")
        if parts == ["version"]:
            return _Route(discovery=_VERSION)
        if parts == ["api"]:
            return _Route(
                discovery={
                    "kind": "APIVersions",
                    "versions": ["v1"],
                    "serverAddressByClientCIDRs": [
                        {"clientCIDR": "0.0.0.0/0", "serverAddress": f"{self.host}:{self._port}"}
                    ],
                }
            )
        if parts == ["apis"]:
            return _Route(discovery=_group_list())
        if parts[0] == "apis" and len(parts) == 2:
            versions = _groups().get(parts[1])
            return _Route(discovery=_api_group(parts[1], versions) if versions else None)
        if parts[0] == "api" and len(parts) >= 2 and parts[1] == "v1":
            group, version, rest = "", "v1", parts[2:]
        elif parts[0] == "apis" and len(parts) >= 3:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            return _Route()
        served = _served(group, version)
        if served is None or (group in _KUEUE_GROUPS and self.kueue is None):
            return _Route()
        if not rest:
            return _Route(discovery=_resource_list(group, version))
        route = _Route()
        if rest[0] == "watch":
            route.watch_path = True
            rest = rest[1:]
        if len(rest) >= 3 and rest[0] == "namespaces" and rest[2] in served:
            route.namespace = rest[1]
            rest = rest[2:]
        view = served.get(rest[0]) if rest else None
        if view is None or len(rest) > 3:
            return _Route()
        if view.namespaced != (route.namespace is not None) and not (
            view.namespaced and len(rest) == 1
        ):
            return _Route()  # a namespaced type addressed without namespace (or the reverse)
        route.view = view
        route.res = EVENTS if view is EVENTS_V1 else view
        route.name = rest[1] if len(rest) >= 2 else None
        route.subresource = rest[2] if len(rest) == 3 else None
        return route

    def _present(self, obj: JSON, route: _Route) -> JSON:
        return core_event_to_v1(obj) if route.view is EVENTS_V1 else obj

    # ------------------------------------------------------------- list

    def _list(self, route: _Route, query: Any) -> JSON:
        res = route.res
        view = route.view
        assert res is not None
        assert view is not None
        label_selector = query.get("labelSelector")
        field_selector = query.get("fieldSelector")
        if view is EVENTS_V1:
            field_selector = _events_v1_field_selector(field_selector)
        rv = query.get("resourceVersion")
        match = query.get("resourceVersionMatch")
        limit = _int_param(query, "limit")
        token = query.get("continue")
        start_after: tuple[str, str] | None = None
        if match and not rv:
            raise StoreError.bad_request(
                "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless "
                "resourceVersion is provided"
            )
        if match not in (None, "", "Exact", "NotOlderThan"):
            raise StoreError.bad_request(
                f'resourceVersionMatch: Unsupported value: "{match}": supported values: '
                '"Exact", "NotOlderThan"'
            )
        if token:
            if rv:
                raise StoreError.bad_request(
                    "specifying resource version is not allowed when using continue"
                )
            token_rv, start_after = _decode_continue(token)
            if (
                int(self.store.oldest_resource_version) > token_rv
                or self.faults.take_continue_expiry()
            ):
                raise StoreError.gone(
                    "The provided continue parameter is too old to display a consistent list "
                    "result. You can start a new list without the continue parameter, or use "
                    "the continue token in this response to retrieve the remainder of the "
                    "results. Continuing with the provided token results in an inconsistent "
                    "list - objects that were created, modified, or deleted between the time "
                    "the first chunk was returned and now may show up in the list."
                )
            list_at: str | None = str(token_rv)
        elif rv and match == "Exact":
            list_at = rv
        else:
            if rv and rv != "0":
                self.store.check_not_older_than(rv)
            list_at = None
        # Only the page is copied out of the store (10,000 large objects listed 250 at a
        # time would otherwise cost every page the whole namespace).
        items, list_rv, remaining = self.store.page(
            res,
            route.namespace,
            resource_version=list_at,
            label_selector=label_selector,
            field_selector=field_selector,
            after=start_after,
            limit=limit,
        )
        meta: JSON = {"resourceVersion": list_rv}
        if remaining:
            meta["continue"] = _encode_continue(int(list_rv), _sort_key(items[-1]))
            meta["remainingItemCount"] = remaining
        if view is EVENTS_V1:
            items = [core_event_to_v1(o) for o in items]
        return {
            "kind": f"{view.kind}List",
            "apiVersion": view.api_version,
            "metadata": meta,
            "items": items,
        }

    # ------------------------------------------------------------- watch

    async def _watch(self, request: web.BaseRequest, ctx: _Ctx) -> web.StreamResponse:
        route = ctx.route
        res, view = route.res, route.view
        assert res is not None
        assert view is not None
        query = request.query
        field_selector = query.get("fieldSelector")
        if view is EVENTS_V1:
            field_selector = _events_v1_field_selector(field_selector)
        labels = LabelSelector.parse(query.get("labelSelector"))
        fields = FieldSelector.parse(field_selector, res)
        if route.name is not None:  # /watch/namespaces/ns/pods/name (deprecated form)
            fields = FieldSelector((*fields.terms, ("metadata.name", True, route.name)))
        rv = query.get("resourceVersion")
        bookmarks = _truthy(query.get("allowWatchBookmarks"))
        initial = _truthy(query.get("sendInitialEvents"))
        if initial and query.get("resourceVersionMatch") != "NotOlderThan":
            raise StoreError(
                422,
                "Invalid",
                'ListOptions.meta.k8s.io "" is invalid: sendInitialEvents: Forbidden: '
                "sendInitialEvents is forbidden for watch unless resourceVersionMatch is set "
                "to NotOlderThan",
            )
        timeout = _int_param(query, "timeoutSeconds")
        duration = float(timeout) if timeout is not None and timeout > 0 else self.watch_timeout

        response = web.StreamResponse(status=200)
        response.content_type = "application/json"
        response.headers["Cache-Control"] = "no-cache, private"
        response.headers["Audit-Id"] = str(uuid.uuid4())
        try:
            if initial:
                # sendInitialEvents: the current state as ADDED events, then a bookmark.
                if rv not in (None, "", "0"):
                    self.store.check_not_older_than(str(rv))
                replay, start_rv = self.store.replay(res, route.namespace, "0")
            else:
                replay, start_rv = self.store.replay(res, route.namespace, rv)
        except StoreError as err:
            if err.code != 410:
                raise
            # The apiserver answers an expired version inside a successful watch.
            await response.prepare(request)
            self._record(request, ctx, 200)
            line = _dumps({"type": "ERROR", "object": err.status()}) + b"\n"
            await response.write(line)
            await response.write_eof()
            return response

        watcher = _Watcher(self, res, view, route.namespace, labels, fields, start_rv, bookmarks)
        # Registering in the same loop step as the snapshot leaves no gap: later
        # changes reach the watcher through _drain_inbox, older ones are skipped.
        for event, previous in replay:
            watcher.offer(event, previous, _Encoded(event), live=False)
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
        watcher: _Watcher,
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

    # ------------------------------------------------------------- writes

    async def _body(self, request: web.BaseRequest, yaml_ok: bool = False) -> Any:
        raw = await request.read()
        if not raw:
            raise StoreError.bad_request("the body of the request was empty")
        try:
            if yaml_ok:
                return yaml.safe_load(raw)
            return json.loads(raw)
        except (ValueError, yaml.YAMLError) as exc:
            raise StoreError.bad_request(
                f"couldn't get version/kind; json parse error: {exc}"
            ) from None

    def _check_body(self, body: Any, route: _Route, *, for_create: bool) -> JSON:
        res = route.res
        assert res is not None
        if not isinstance(body, dict):
            raise StoreError.bad_request("the body of the request must be a JSON object")
        api_version, kind = body.get("apiVersion"), body.get("kind")
        if api_version not in (None, "", res.api_version):
            raise StoreError.bad_request(
                f"the API version in the data ({api_version}) does not match the expected API "
                f"version ({res.api_version})"
            )
        if kind not in (None, "", res.kind):
            raise StoreError.bad_request(
                f"the kind in the data ({kind}) does not match the expected kind ({res.kind})"
            )
        meta = body.get("metadata")
        if meta is None:
            meta = body["metadata"] = {}
        if not isinstance(meta, dict):
            raise StoreError.bad_request("metadata must be an object")
        if route.namespace is not None and meta.get("namespace") not in (None, "", route.namespace):
            raise StoreError.bad_request(
                "the namespace of the provided object does not match the namespace sent on the "
                "request"
            )
        if not for_create and meta.get("name") not in (None, "", route.name):
            raise StoreError.bad_request(
                f"the name of the object ({meta.get('name')}) does not match the name on the URL "
                f"({route.name})"
            )
        return body

    def _check_namespace(self, route: _Route) -> None:
        if (
            self.enforce_namespaces
            and route.namespace is not None
            and (not self.store.exists(NAMESPACES, None, route.namespace))
        ):
            raise StoreError.not_found(NAMESPACES, route.namespace)

    async def _run_write(self, res: Resource, fn: Callable[[], _T]) -> _T:
        # CRD validation (CEL) can take milliseconds: keep it off the event loop.
        if res in self._schemas:
            if self._executor is None:
                self._executor = concurrent.futures.ThreadPoolExecutor(
                    4, thread_name_prefix="kube-test-write"
                )
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self._executor, fn)
        return fn()

    @staticmethod
    def _validation_mode(query: Any) -> str:
        mode = query.get("fieldValidation") or "Warn"
        if mode not in ("Strict", "Warn", "Ignore"):
            raise StoreError.bad_request(
                f'fieldValidation: Unsupported value: "{mode}": supported values: "Ignore", '
                '"Warn", "Strict"'
            )
        return str(mode)

    @staticmethod
    def _dry_run(query: Any, body: Any = None) -> bool:
        values = list(query.getall("dryRun", []))
        if isinstance(body, dict) and isinstance(body.get("dryRun"), list):
            values.extend(body["dryRun"])
        for value in values:
            if value != "All":
                raise StoreError.bad_request(
                    f'dryRun: Unsupported value: "{value}": supported values: "All"'
                )
        return bool(values)

    async def _create(self, request: web.BaseRequest, ctx: _Ctx) -> web.StreamResponse:
        route = ctx.route
        res = route.res
        assert res is not None
        if route.subresource is not None:
            raise _method_not_allowed()
        body = self._check_body(await self._body(request), route, for_create=True)
        ctx.name = body["metadata"].get("name") or None
        mode = self._validation_mode(request.query)
        dry_run = self._dry_run(request.query)
        self._check_namespace(route)
        if res is PODS:
            # The pod registry's PrepareForCreate: status starts as Pending.
            body["status"] = {"phase": "Pending", "qosClass": "BestEffort"}
        elif res is NAMESPACES:
            body["status"] = {"phase": "Active"}
        elif has_status_subresource(res):
            body.pop("status", None)
        warnings_out: list[str] = []
        admit = self._admission(mode, warnings_out) if res in self._schemas else None
        created = await self._run_write(
            res,
            lambda: self.store.create(
                res, body, namespace=route.namespace, admission=admit, dry_run=dry_run
            ),
        )
        ctx.name = created["metadata"]["name"]
        return self._json(self._present(created, route), 201, warnings_out)

    async def _write(self, request: web.BaseRequest, ctx: _Ctx) -> web.StreamResponse:
        route = ctx.route
        res = route.res
        assert res is not None
        assert route.name is not None
        name = route.name
        mode = self._validation_mode(request.query)
        warnings_out: list[str] = []
        admit = self._admission(mode, warnings_out) if res in self._schemas else None
        status = 200
        if ctx.verb == "update":
            body = self._check_body(await self._body(request), route, for_create=False)
            dry_run = self._dry_run(request.query)
            body["metadata"]["name"] = name
            if route.namespace is not None:
                body["metadata"]["namespace"] = route.namespace
            result = await self._run_write(
                res,
                lambda: self.store.update(
                    res, body, subresource=route.subresource, admission=admit, dry_run=dry_run
                ),
            )
        else:
            content_type = request.headers.get("Content-Type", "").split(";")[0].strip().lower()
            patch_type = _PATCH_TYPES.get(content_type)
            if patch_type is None or (patch_type == "strategic" and res.group):
                # Custom resources have no strategic-merge schema: the apiserver says 415.
                accepted = (
                    "application/json-patch+json, application/merge-patch+json, "
                    "application/apply-patch+yaml"
                )
                if not res.group:
                    accepted += ", application/strategic-merge-patch+json"
                raise _error(
                    415,
                    "UnsupportedMediaType",
                    f"the body of the request was in an unknown format - accepted "
                    f"media types include: {accepted}",
                )
            if patch_type == "apply" and not request.query.get("fieldManager"):
                raise StoreError(
                    422,
                    "Invalid",
                    'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: '
                    "is required for apply patch",
                )
            patch = await self._body(request, yaml_ok=patch_type == "apply")
            dry_run = self._dry_run(request.query)
            existed = patch_type != "apply" or self.store.exists(res, route.namespace, name)
            if not existed:
                self._check_namespace(route)
            result = await self._run_write(
                res,
                lambda: self.store.patch(
                    res,
                    route.namespace,
                    name,
                    patch,
                    patch_type=patch_type,
                    subresource=route.subresource,
                    admission=admit,
                    dry_run=dry_run,
                ),
            )
            status = 200 if existed else 201
        return self._json(self._present(result, route), status, warnings_out)

    @staticmethod
    def _delete_options(request: web.BaseRequest, body: Any) -> tuple[str, JSON | None]:
        options = body if isinstance(body, dict) else {}
        policy = request.query.get("propagationPolicy") or options.get("propagationPolicy")
        orphan = request.query.get("orphanDependents") or options.get("orphanDependents")
        if policy is None and orphan is not None:
            policy = "Orphan" if _truthy(str(orphan)) else "Background"
        preconditions = (
            options.get("preconditions") if isinstance(options.get("preconditions"), dict) else None
        )
        return str(policy or "Background"), preconditions

    async def _delete(self, request: web.BaseRequest, ctx: _Ctx) -> web.StreamResponse:
        route = ctx.route
        res = route.res
        assert res is not None
        assert route.name is not None
        if route.subresource is not None:
            raise _method_not_allowed()
        raw = await request.read()
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            raise StoreError.bad_request("the DeleteOptions could not be decoded") from None
        policy, preconditions = self._delete_options(request, body)
        dry_run = self._dry_run(request.query, body)
        grace = _int_param(request.query, "gracePeriodSeconds")
        del grace  # deletions complete immediately: no kubelet to wait for
        deleted = self.store.delete(
            res,
            route.namespace,
            route.name,
            propagation=policy,
            preconditions=preconditions,
            dry_run=dry_run,
        )
        still_there = not dry_run and self.store.exists(res, route.namespace, route.name)
        if res in _RETURNS_DELETED_OBJECT or still_there:
            return self._json(self._present(deleted, route), 200)
        details: JSON = {"name": route.name}
        if res.group:
            details["group"] = res.group
        details["kind"] = res.plural
        details["uid"] = deleted["metadata"].get("uid")
        return self._json(
            {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Success",
                "details": details,
            }
        )

    async def _delete_collection(self, request: web.BaseRequest, ctx: _Ctx) -> web.StreamResponse:
        route = ctx.route
        res, view = route.res, route.view
        assert res is not None
        assert view is not None
        raw = await request.read()
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            raise StoreError.bad_request("the DeleteOptions could not be decoded") from None
        policy, _ = self._delete_options(request, body)
        dry_run = self._dry_run(request.query, body)
        items, _ = self.store.list(
            res,
            route.namespace,
            label_selector=request.query.get("labelSelector"),
            field_selector=request.query.get("fieldSelector"),
        )
        deleted = []
        for obj in items:
            meta = obj["metadata"]
            try:
                deleted.append(
                    self.store.delete(
                        res,
                        meta.get("namespace"),
                        meta["name"],
                        propagation=policy,
                        dry_run=dry_run,
                    )
                )
            except StoreError as err:
                if err.code != 404:
                    raise
        return self._json(
            {
                "kind": f"{view.kind}List",
                "apiVersion": view.api_version,
                "metadata": {"resourceVersion": self.store.current_resource_version},
                "items": [self._present(o, route) for o in deleted],
            }
        )

    # ------------------------------------------------------------- pod logs

    async def _pod_log(self, request: web.BaseRequest, ctx: _Ctx) -> web.StreamResponse:
        route = ctx.route
        if route.res is not PODS or route.name is None or route.namespace is None:
            raise _not_found_path()
        ns, name = route.namespace, route.name
        query = request.query
        pod = self.store.get(PODS, ns, name)
        container = self._log_container(pod, query.get("container"))
        previous = _truthy(query.get("previous"))
        follow = _truthy(query.get("follow"))
        timestamps = _truthy(query.get("timestamps"))
        tail = _int_param(query, "tailLines")
        limit = _int_param(query, "limitBytes")
        since_seconds = _int_param(query, "sinceSeconds")
        since_time = query.get("sinceTime")
        if since_seconds is not None and since_time:
            raise StoreError(
                422,
                "Invalid",
                'PodLogOptions "" is invalid: sinceSeconds: Forbidden: at most one of '
                "`sinceTime` or `sinceSeconds` may be specified",
            )
        for key, value in (
            ("tailLines", tail),
            ("limitBytes", limit),
            ("sinceSeconds", since_seconds),
        ):
            if value is not None and (value < 0 or (key != "tailLines" and value < 1)):
                raise StoreError(
                    422,
                    "Invalid",
                    f'PodLogOptions "" is invalid: {key}: Invalid value: {value}: must be '
                    "greater than 0",
                )
        since: datetime | None = None
        if since_seconds is not None:
            # The kubelet measures it with its own clock, which stamps the lines too.
            since = self.logs.now() - timedelta(seconds=since_seconds)
        elif since_time:
            since = _parse_time(since_time)
        if previous:
            if not self.logs.has_previous(ns, name, container):
                raise StoreError.bad_request(
                    f'previous terminated container "{container}" in pod "{name}" not found'
                )
            follow = False
        else:
            self._check_container_started(pod, container)

        def render(lines: list[tuple[datetime, str]]) -> bytes:
            if timestamps:
                return "".join(f"{_format_log_time(t)} {line}\n" for t, line in lines).encode()
            return "".join(f"{line}\n" for _, line in lines).encode()

        if not follow:
            lines = self.logs.lines(ns, name, container, since=since, tail=tail, previous=previous)
            data = render(lines)
            if limit is not None:
                data = data[:limit]
            return web.Response(body=data, content_type="text/plain")

        follower = _Follower(ns, name)
        loop = asyncio.get_running_loop()

        def wake() -> None:  # writer's thread
            with contextlib.suppress(RuntimeError):  # the loop already closed
                loop.call_soon_threadsafe(follower.wake.set)

        unlisten = self.logs.listen(ns, name, container, wake)
        self._followers.add(follower)
        response = web.StreamResponse(status=200)
        response.content_type = "text/plain"
        response.headers["Cache-Control"] = "no-cache, private"
        try:
            lines, closed = self.logs.read_from(ns, name, container, 0)
            index = len(lines)
            if since is not None:
                lines = [(t, line) for t, line in lines if t >= since]
            if tail is not None:
                lines = lines[-tail:] if tail > 0 else []
            await response.prepare(request)
            self._record(request, ctx, 200)
            budget = limit
            while True:
                data = render(lines)
                if budget is not None:
                    data = data[:budget]
                    budget -= len(data)
                if data:
                    await response.write(data)
                if closed or follower.closed or budget == 0:
                    break
                follower.wake.clear()
                lines, closed = self.logs.read_from(ns, name, container, index)
                index += len(lines)
                if lines or closed:
                    continue
                if not self.store.exists(PODS, ns, name):
                    break  # the pod is gone: its log stream ends
                await follower.wake.wait()
                lines, closed = self.logs.read_from(ns, name, container, index)
                index += len(lines)
            if follower.abort and request.transport is not None:
                request.transport.abort()
                return response
            await response.write_eof()
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            unlisten()
            self._followers.discard(follower)
        return response

    @staticmethod
    def _log_container(pod: JSON, requested: str | None) -> str:
        spec = pod.get("spec") or {}
        name = pod["metadata"]["name"]
        containers = [c.get("name") for c in spec.get("containers") or []]
        init = [c.get("name") for c in spec.get("initContainers") or []]
        ephemeral = [c.get("name") for c in spec.get("ephemeralContainers") or []]
        if not requested:
            if len(containers) == 1:
                return str(containers[0])
            message = (
                f"a container name must be specified for pod {name}, choose one of: "
                f"[{' '.join(containers)}]"
            )
            if init:
                message += f" or one of the init containers: [{' '.join(init)}]"
            raise StoreError.bad_request(message)
        if requested not in containers + init + ephemeral:
            raise StoreError.bad_request(f"container {requested} is not valid for pod {name}")
        return requested

    def _check_container_started(self, pod: JSON, container: str) -> None:
        status = pod.get("status") or {}
        name = pod["metadata"]["name"]
        for key in ("containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses"):
            for cs in status.get(key) or []:
                if cs.get("name") != container:
                    continue
                state = cs.get("state") or {}
                if "running" in state or "terminated" in state:
                    return
                waiting = state.get("waiting")
                if waiting is not None:
                    raise StoreError.bad_request(
                        _waiting_message(
                            container, name, waiting.get("reason") or "ContainerCreating"
                        )
                    )
                return
        if status.get("phase") in ("Running", "Succeeded", "Failed"):
            return
        ns = pod["metadata"].get("namespace", "")
        if self.logs.read_from(ns, name, container, 0)[0]:
            return  # no status yet, but the container evidently wrote logs
        raise StoreError.bad_request(_waiting_message(container, name, "ContainerCreating"))


def _waiting_message(container: str, pod: str, reason: str) -> str:
    # The kubelet's wording for the common image failures.
    if reason == "ErrImagePull":
        detail = "image can't be pulled"
    elif reason == "ImagePullBackOff":
        detail = "trying and failing to pull image"
    else:
        detail = reason
    return f'container "{container}" in pod "{pod}" is waiting to start: {detail}'


def _sort_key(obj: JSON) -> tuple[str, str]:
    meta = obj["metadata"]
    return (str(meta.get("namespace") or ""), str(meta["name"]))


def _encode_continue(rv: int, key: tuple[str, str]) -> str:
    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": list(key)}).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_continue(token: str) -> tuple[int, tuple[str, str]]:
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        data = json.loads(raw)
        ns, name = data["start"]
        return int(data["rv"]), (str(ns), str(name))
    except (ValueError, KeyError, TypeError, binascii.Error):
        raise StoreError.bad_request(
            f'continue: Invalid value: "{token}": continue key is not valid'
        ) from None


# --------------------------------------------------------------------------- discovery

_VERSION = {
    "major": "1",
    "minor": "33",
    "gitVersion": "v1.33.0+kf-test",
    "gitCommit": "kf-test",
    "gitTreeState": "clean",
    "buildDate": "2025-01-01T00:00:00Z",
    "goVersion": "go1.24.0",
    "compiler": "gc",
    "platform": "linux/amd64",
}

_SERVED: tuple[Resource, ...] = (
    *RESOURCES,
    EVENTS_V1,
    WORKLOADS,
    LOCAL_QUEUES,
    VISIBILITY_LOCAL_QUEUES,
)
#: Groups served only while the simulated Kueue is installed.
_KUEUE_GROUPS = frozenset({WORKLOADS.group, VISIBILITY_LOCAL_QUEUES.group})


def _served(group: str, version: str) -> dict[str, Resource] | None:
    found = {r.plural: r for r in _SERVED if r.group == group and r.version == version}
    return found or None


def _groups() -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {}
    for r in _SERVED:
        if r.group and r.version not in groups.setdefault(r.group, []):
            groups[r.group].append(r.version)
    return groups


def _api_group(name: str, versions: list[str]) -> JSON:
    entries = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": name,
        "versions": entries,
        "preferredVersion": entries[0],
    }


def _group_list() -> JSON:
    groups = [_api_group(n, v) for n, v in _groups().items()]
    for g in groups:
        del g["kind"], g["apiVersion"]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def _resource_list(group: str, version: str) -> JSON:
    resources: list[JSON] = []
    for r in _SERVED:
        if r.group != group or r.version != version:
            continue
        verbs = ["get", "list", "watch"] if r is EVENTS_V1 else _VERBS_ALL
        entry: JSON = {
            "name": r.plural,
            "singularName": r.kind.lower(),
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": verbs,
        }
        if r.plural in _SHORT_NAMES and not group:
            entry["shortNames"] = _SHORT_NAMES[r.plural]
        resources.append(entry)
        if has_status_subresource(r):
            resources.append(
                {
                    "name": f"{r.plural}/status",
                    "singularName": "",
                    "namespaced": r.namespaced,
                    "kind": r.kind,
                    "verbs": ["get", "patch", "update"],
                }
            )
        if r is PODS:
            resources.append(
                {
                    "name": "pods/log",
                    "singularName": "",
                    "namespaced": True,
                    "kind": "Pod",
                    "verbs": ["get"],
                }
            )
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": resources,
    }
