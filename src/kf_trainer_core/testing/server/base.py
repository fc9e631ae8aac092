"""The state every part of the test server shares, and how an answer is written
(JSON bodies, Status errors, the request log)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import math
import threading
import time
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from aiohttp import web

from kf_trainer_core.emulation.watch import dumps
from kf_trainer_core.k8s.rbac import Rule, allows
from kf_trainer_core.testing import crd
from kf_trainer_core.testing.faults import FaultInjector
from kf_trainer_core.testing.server.accounting import RequestLog, RequestRecord
from kf_trainer_core.testing.server.routing import EVENTS_V1, Ctx, Route, core_event_to_v1
from kf_trainer_core.testing.store import PodLogs, Resource, Store, StoreError, WatchEvent

JSON = dict[str, Any]
_T = TypeVar("_T")


@dataclass(frozen=True)
class Binding:
    """A user of the test server and the RBAC rules bound to it
    (:meth:`KubeTestServer.bind`)."""

    user: str
    namespace: str
    rules: tuple[Rule, ...]
    cluster_rules: tuple[Rule, ...] = ()

    def allows(self, group: str, resource: str, verb: str, namespace: str | None) -> bool:
        """Whether RBAC lets the user ``verb`` ``resource`` (``plural[/sub]``) of API
        ``group`` in ``namespace`` (``None``: cluster-scoped)."""
        if allows(self.cluster_rules, group, resource, verb):
            return True
        return namespace == self.namespace and allows(self.rules, group, resource, verb)


class Stream:
    """One open streaming response (a watch or a log follow), ended from the loop."""

    def __init__(self) -> None:
        self.wake = asyncio.Event()
        self.closed = False
        self.abort = False

    def close(self, *, abort: bool = False) -> None:
        """End the stream without writing what is still buffered (``abort``: reset
        its connection instead of ending it cleanly)."""
        self.closed = True
        self.abort = self.abort or abort
        self.wake.set()


class Follower(Stream):
    """One open ``follow=true`` log stream (the log streams start it, the watch fan-out
    wakes it when its pod is deleted)."""

    def __init__(self, namespace: str, pod: str) -> None:
        super().__init__()
        self.pod = (namespace, pod)


class ServerBase:
    """What the handlers, the watch fan-out and the log streams of
    :class:`~kf_trainer_core.testing.server.KubeTestServer` share (set up by its
    constructor)."""

    host: str
    _port: int
    store: Store
    logs: PodLogs
    faults: FaultInjector
    requests: RequestLog
    bookmark_interval: float
    watch_timeout: float
    watch_buffer_limit: int
    user: str
    enforce_namespaces: bool
    kueue: Any
    upstream: Path | None
    bytes_sent: int
    _token_check: Callable[[str], bool] | None
    bindings: dict[str, Binding]
    _loop: asyncio.AbstractEventLoop | None
    _executor: concurrent.futures.ThreadPoolExecutor | None
    _schemas: dict[Resource, crd.CRDSchema]
    #: Which CRD schemas writes are checked against: "upstream" (the CRD files: CEL
    #: rules, enums, defaults), "builtin" (derived from the kubeflow-trainer-api
    #: models: fields and types) or "none" (docs/testing.md).
    fidelity: str
    _followers: set[Follower]
    _fanned_rv: int
    _inbox: list[tuple[WatchEvent, JSON | None]]
    _inbox_lock: threading.Lock
    _inbox_scheduled: bool
    _commit_hooks: list[Callable[[WatchEvent], None]]

    def _call(self, coro: Coroutine[Any, Any, _T]) -> _T:
        """Run ``coro`` on the server's loop and wait for it (from another thread)."""
        if self._loop is None:
            raise RuntimeError("the server is not running")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(30)

    def _on_loop(self, fn: Callable[[], _T]) -> _T | None:
        """Run ``fn`` on the server's loop (directly when not running)."""
        if self._loop is None:
            return fn()

        async def wrapper() -> _T:
            return fn()

        return self._call(wrapper())

    def _record(self, request: web.BaseRequest, ctx: Ctx, status: int) -> None:
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
                dry_run=ctx.dry_run,
            )
        )

    def _error_response(self, err: StoreError) -> web.Response:
        response = web.Response(
            status=err.code, body=dumps(err.status()), content_type="application/json"
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
        body = (json.dumps(obj, indent=2).encode() + b"\n") if pretty else dumps(obj)
        response = web.Response(status=status, body=body, content_type="application/json")
        response.headers["Audit-Id"] = str(uuid.uuid4())
        for text in warnings_list or ():
            escaped = text.replace("\\", "\\\\").replace('"', '\\"')
            response.headers.add("Warning", f'299 - "{escaped}"')
        return response

    @staticmethod
    def _present(obj: JSON, route: Route) -> JSON:
        return core_event_to_v1(obj) if route.view is EVENTS_V1 else obj
