"""Perform :mod:`calls <kf_trainer_core.k8s.calls>` with the real client libraries.

Both transports call the typed API methods (``CustomObjectsApi``, ``CoreV1Api``) with
``_preload_content=False`` and parse the JSON themselves: that surface is the same in
``kubernetes`` 30 through 37 and in ``kubernetes_asyncio``, skips the libraries' slow
model deserialisation, and lets watches and log follows be read line by line. Which
method serves which call is decided once, in :func:`plan`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import socket
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kf_trainer_core.base.quoting import shown
from kf_trainer_core.config import KubernetesConfig, loading_errors
from kf_trainer_core.k8s.calls import (
    Call,
    Create,
    Delete,
    Get,
    GetPath,
    ListObjects,
    OpenLogStream,
    OpenWatch,
    Patch,
    ReadLog,
)
from kf_trainer_core.k8s.errors import ApiError
from kf_trainer_core.k8s.resources import Resource

USER_AGENT = "kf-trainer-suite"
MERGE_PATCH = "application/merge-patch+json"
# Core resources: the CoreV1Api method stem for each plural.
_CORE = {"pods": "pod", "events": "event", "secrets": "secret", "namespaces": "namespace"}


@dataclass(frozen=True)
class Plan:
    """Which API object and method serve a call, with what arguments."""

    api: str  # "custom" | "core"
    method: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    text: bool = False  # the answer is text (logs), not JSON
    #: Forced Content-Type (patches are merge patches; some clients default to JSON
    #: Patch for a dict body).
    content_type: str | None = None


def _opt(**kw: Any) -> dict[str, Any]:
    return {k: v for k, v in kw.items() if v is not None}


def plan(call: Call, request_timeout: float) -> Plan:
    """Map a call onto the client libraries' typed methods (same names in both)."""
    timeout: dict[str, Any] = {"_preload_content": False, "_request_timeout": request_timeout}
    if isinstance(call, (OpenWatch, OpenLogStream)):
        # Streams: the server ends a watch after timeout_seconds; the client allows a
        # little more before it calls the connection dead.
        read = (call.timeout_seconds + 30) if isinstance(call, OpenWatch) else None
        timeout = {"_preload_content": False, "_request_timeout": read}
    if isinstance(call, (ReadLog, OpenLogStream)):
        return _log_plan(call, timeout)
    if isinstance(call, GetPath):
        # A path no typed method serves (an aggregated API's view): the ApiClient's
        # generic request, as for logs, with the same authentication.
        return Plan(
            "client",
            "GET",
            (call.path,),
            {
                "path_params": {},
                "query_params": list(call.query),
                "header_params": {"Accept": "application/json"},
                **timeout,
            },
        )
    res: Resource = call.resource
    ns = call.namespace
    if isinstance(call, (OpenWatch, ListObjects)):
        # A watch is a list with watch=true: the same method, the same selectors.
        extra = (
            {
                "resource_version": call.resource_version,
                "timeout_seconds": call.timeout_seconds,
                "allow_watch_bookmarks": call.bookmarks or None,
                "watch": True,
            }
            if isinstance(call, OpenWatch)
            else {
                "limit": call.limit,
                "_continue": call.continue_token,
                "resource_version": None if call.continue_token else call.resource_version,
            }
        )
        selectors = _opt(label_selector=call.label_selector, field_selector=call.field_selector)
        return _list_plan(res, ns, {**selectors, **_opt(**extra), **timeout})
    # The same four verbs on both APIs; they differ in method names, in where the
    # scope goes (custom: group, version, [namespace,] plural before the name; core:
    # the namespace after it) and in a few extras.
    head: tuple[Any, ...]
    create_extra: dict[str, Any] = {}
    if res.is_custom:
        api, name_first = "custom", False
        head = (
            (res.group, res.version, ns, res.plural) if ns else (res.group, res.version, res.plural)
        )
        scope = "namespaced" if ns else "cluster"
        methods = {
            verb: f"{verb}_{scope}_custom_object" for verb in ("get", "create", "patch", "delete")
        }
        if isinstance(call, Patch) and call.subresource == "status":
            methods["patch"] += "_status"
        if isinstance(call, Create):
            create_extra = {"field_validation": call.field_validation}
    else:
        api, name_first = "core", True
        where = ("namespaced_" if res.namespaced else "") + _CORE[res.plural]
        head = (ns,) if res.namespaced else ()
        methods = {verb: f"{verb}_{where}" for verb in ("create", "patch", "delete")}
        methods["get"] = f"read_{where}"

    def at(name: str, *rest: Any) -> tuple[Any, ...]:
        return (name, *head, *rest) if name_first else (*head, name, *rest)

    if isinstance(call, Get):
        return Plan(api, methods["get"], at(call.name), timeout)
    if isinstance(call, Create):
        return Plan(api, methods["create"], (*head, call.body), {**create_extra, **timeout})
    if isinstance(call, Patch):
        body = at(call.name, call.body)
        return Plan(api, methods["patch"], body, timeout, content_type=MERGE_PATCH)
    if isinstance(call, Delete):
        kwargs = {"propagation_policy": call.propagation, **timeout}
        if call.preconditions():
            # DeleteOptions in the body: the only place preconditions go.
            kwargs["body"] = {
                "apiVersion": "v1",
                "kind": "DeleteOptions",
                "propagationPolicy": call.propagation,
                "preconditions": call.preconditions(),
            }
        return Plan(api, methods["delete"], at(call.name), kwargs)
    raise TypeError(f"no plan for {shown(call)}")


def _list_plan(res: Resource, ns: str | None, kwargs: dict[str, Any]) -> Plan:
    if res.is_custom:
        if ns:
            return Plan(
                "custom",
                "list_namespaced_custom_object",
                (res.group, res.version, ns, res.plural),
                kwargs,
            )
        return Plan(
            "custom", "list_cluster_custom_object", (res.group, res.version, res.plural), kwargs
        )
    stem = _CORE[res.plural]
    if ns and res.namespaced:
        return Plan("core", f"list_namespaced_{stem}", (ns,), kwargs)
    return Plan(
        "core", f"list_{stem}_for_all_namespaces" if res.namespaced else f"list_{stem}", (), kwargs
    )


def _log_plan(call: ReadLog | OpenLogStream, timeout: dict[str, Any]) -> Plan:
    """A pod log read, through the client library's own ``ApiClient``.

    The typed ``read_namespaced_pod_log`` offers ``sinceSeconds`` but not the API's
    ``sinceTime``, and a resume point expressed in seconds before *now* is measured by
    the kubelet against its own clock: with the node's clock ahead of ours, a resume
    asked for from our clock starts after lines we never received (a 120 s skew lost
    half of a log). ``sinceTime`` carries the last line's own timestamp (the node's
    clock wrote it), so no clock is compared. The request is the same one the typed
    method makes (path, Accept, BearerToken auth), with the query built here, sent by
    :func:`_raw_get` (both generations of the sync library) or :func:`_araw_get`."""
    follow = isinstance(call, OpenLogStream)
    query: list[tuple[str, Any]] = [("container", call.container)]
    if follow:
        query.append(("follow", "true"))
    if call.since_time is not None:
        query.append(("sinceTime", call.since_time))
    if call.tail_lines is not None:
        query.append(("tailLines", call.tail_lines))
    if call.timestamps:
        query.append(("timestamps", "true"))
    limit = getattr(call, "limit_bytes", None)
    if limit is not None:
        query.append(("limitBytes", limit))
    return Plan(
        "client",
        "GET",
        ("/api/v1/namespaces/{namespace}/pods/{name}/log",),
        {
            "path_params": {"namespace": call.namespace, "name": call.pod},
            "query_params": query,
            "header_params": {"Accept": "text/plain, application/json"},
            **timeout,
        },
        True,
    )


def _raw_get(client: Any, http_method: str, path: str, **kw: Any) -> Any:
    """Send a request the typed methods cannot express with the sync ``ApiClient``;
    the unread response comes back, as typed methods return it without preloading.

    ``kubernetes`` 35+ (openapi-generator 7) splits the work into ``param_serialize``
    and ``call_api(method, url, ...)``; older releases have one ``call_api(path,
    method, path_params=..., ...)``. Both apply the configured BearerToken auth."""
    if hasattr(client, "param_serialize"):
        request = client.param_serialize(
            method=http_method,
            resource_path=path,
            path_params=kw["path_params"],
            query_params=kw["query_params"],
            header_params=kw["header_params"],
            auth_settings=["BearerToken"],
        )
        return client.call_api(*request, _request_timeout=kw.get("_request_timeout")).response
    return client.call_api(
        path, http_method, **_one_call(kw), _request_timeout=kw.get("_request_timeout")
    )


def _one_call(kw: dict[str, Any]) -> dict[str, Any]:
    """The keywords of the one-call ``call_api(path, method, ...)`` of ``kubernetes``
    before 35 and of ``kubernetes_asyncio``: the unread response, BearerToken auth."""
    return {
        "path_params": kw["path_params"],
        "query_params": kw["query_params"],
        "header_params": kw["header_params"],
        "auth_settings": ["BearerToken"],
        "_return_http_data_only": True,
        "_preload_content": False,
    }


async def _araw_get(client: Any, http_method: str, path: str, **kw: Any) -> Any:
    """:func:`_raw_get` for ``kubernetes_asyncio`` (one ``call_api`` in 30 to 36)."""
    timeout = kw.get("_request_timeout")
    return await client.call_api(
        path, http_method, **_one_call(kw), **({"_request_timeout": timeout} if timeout else {})
    )


def _decode(body: bytes, text: bool) -> Any:
    if text:
        return body.decode("utf-8", errors="replace")
    return json.loads(body) if body else {}


def _bind(apis: dict[str, Any], p: Plan, raw: Callable[..., Any]) -> Callable[..., Any]:
    """The method that serves ``p``: a typed API method, or ``raw`` (a generic request
    through the ApiClient) for paths no typed method serves."""
    if p.api == "client":
        return functools.partial(raw, apis["client"], p.method)
    method: Callable[..., Any] = getattr(apis[p.api], p.method)
    return method


def _from_exception(exc: Any) -> ApiError:
    """The ApiError for a client library's ``ApiException`` (both libraries' shape)."""
    return ApiError.from_response(exc.status or 0, exc.body, exc.headers, exc.reason or "")


def _unreachable(exc: BaseException) -> ApiError:
    """A connection that failed below HTTP: status 0, retryable."""
    return ApiError(0, type(exc).__name__, str(exc))


def _status_error(response: Any, body: Any) -> ApiError:
    return ApiError.from_response(response.status, body, response.headers, response.reason or "")


def _explicit(cfg: KubernetesConfig, target: Any, key: str) -> None:
    """Host, token and CA of an explicit configuration; ``key``: where the library
    looks the token up (the prefix included, as its kubeconfig loader stores it)."""
    target.host = cfg.host
    if cfg.token is not None:
        target.api_key = {key: f"Bearer {cfg.token.get_secret_value()}"}
    target.verify_ssl = cfg.verify_ssl
    target.ssl_ca_cert = _ca_file(cfg)


# --------------------------------------------------------------------------- sync


class _SyncLines:
    """Lines of a streamed urllib3 response."""

    def __init__(self, response: Any) -> None:
        self.response = response
        self._chunks = response.stream(64 * 1024, decode_content=False)
        self._buffer = b""

    def readline(self) -> bytes | None:
        while b"\n" not in self._buffer:
            try:
                chunk = next(self._chunks)
            except StopIteration:
                rest, self._buffer = self._buffer, b""
                return rest or None
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def close(self) -> None:
        try:
            self.response.close()
            self.response.release_conn()
        except Exception:  # the connection may already be gone: nothing to release
            pass

    def abort(self) -> None:
        """Break the stream from another thread without waiting for it: shutting the
        socket down makes a blocked read return at once (``close`` would wait for it)."""
        conn = getattr(self.response, "connection", None) or getattr(
            self.response, "_connection", None
        )
        sock = getattr(conn, "sock", None)
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


class SyncTransport:
    """Calls over the ``kubernetes`` package."""

    def __init__(self, config: KubernetesConfig) -> None:
        self.config = config
        self._lock = threading.Lock()
        self._client: Any = None
        self._apis: dict[str, Any] = {}
        self._errors: tuple[type[BaseException], ...] = ()
        self._content_type_kwarg: bool | None = None
        self.connect()

    def connect(self) -> None:
        """(Re)load credentials and build the API objects. Called again on a 401: an
        exec plugin then runs anew instead of replaying an expired token."""
        import kubernetes
        import urllib3

        cfg = kubernetes.client.Configuration()
        _load_sync(self.config, cfg)
        client = kubernetes.client.ApiClient(cfg)
        client.user_agent = USER_AGENT
        with self._lock:
            old, self._client = self._client, client
            self._apis = {
                "custom": kubernetes.client.CustomObjectsApi(client),
                "core": kubernetes.client.CoreV1Api(client),
                "client": client,
            }
            self._errors = (kubernetes.client.exceptions.ApiException,)
            self._conn_errors = (urllib3.exceptions.HTTPError, OSError)
        if old is not None:
            old.close()

    def _invoke(self, p: Plan) -> Any:
        method = _bind(self._apis, p, _raw_get)
        kwargs = dict(p.kwargs)
        if p.content_type and self._content_type_kwarg is not False:
            kwargs["_content_type"] = p.content_type
        try:
            try:
                response = method(*p.args, **kwargs)
            except TypeError:
                # kubernetes < 31 has no `_content_type` (and sends merge patches anyway).
                if "_content_type" not in kwargs:
                    raise
                self._content_type_kwarg = False
                del kwargs["_content_type"]
                response = method(*p.args, **kwargs)
        except self._errors as exc:
            raise _from_exception(exc) from None
        except self._conn_errors as exc:
            raise _unreachable(exc) from None
        # Unloaded responses are not status-checked by every client version (37 and
        # kubernetes_asyncio return 4xx/5xx as they are): check here, the same for all.
        if not 200 <= response.status <= 299:
            try:
                body = response.data
            finally:
                response.release_conn()
            raise _status_error(response, body)
        return response

    def perform(self, call: Call) -> Any:
        """Perform one call; JSON answers come back as dicts, logs as text."""
        p = plan(call, self.config.request_timeout)
        response = self._invoke(p)
        try:
            return _decode(response.data, p.text)
        finally:
            response.release_conn()

    def open_stream(self, call: OpenWatch | OpenLogStream) -> _SyncLines:
        return _SyncLines(self._invoke(plan(call, self.config.request_timeout)))

    def read_line(self, stream: _SyncLines) -> bytes | None:
        try:
            return stream.readline()
        except self._conn_errors as exc:
            raise _unreachable(exc) from None

    def close(self) -> None:
        if self._client is not None:
            self._client.close()


def _load_sync(cfg: KubernetesConfig, target: Any) -> None:
    cfg.check_usable()
    with loading_errors(cfg):
        _load_sync_unchecked(cfg, target)


def _load_sync_unchecked(cfg: KubernetesConfig, target: Any) -> None:
    import kubernetes

    mode = cfg.mode()
    if mode == "explicit":
        # The key that every client version (30 to 37) looks up.
        _explicit(cfg, target, "authorization")
    elif mode == "in-cluster":
        kubernetes.config.load_incluster_config(client_configuration=target)
    elif (document := cfg.kubeconfig_dict()) is not None:  # inline, or several merged
        kubernetes.config.load_kube_config_from_dict(
            document, context=cfg.context, client_configuration=target
        )
    else:
        kubernetes.config.load_kube_config(
            config_file=cfg.kubeconfig, context=cfg.context, client_configuration=target
        )


def _ca_file(cfg: KubernetesConfig) -> str | None:
    if cfg.ca_cert:
        return cfg.ca_cert
    if cfg.ca_cert_data is not None:
        import tempfile

        handle = tempfile.NamedTemporaryFile("w", suffix=".crt", delete=False)  # noqa: SIM115
        with handle:
            handle.write(cfg.ca_cert_data.get_secret_value())
        return handle.name
    return None


# -------------------------------------------------------------------------- async


class _AsyncLines:
    def __init__(self, response: Any) -> None:
        self.response = response

    async def readline(self) -> bytes | None:
        line: bytes = await self.response.content.readline()
        if not line:
            return None
        return line.rstrip(b"\n")

    def close(self) -> None:
        self.response.release()
        self.response.close()


class _Connection:
    """One ``kubernetes_asyncio`` API client (its connection pool, TLS context and
    credentials), shared by every transport of one event loop for one configuration:
    making one costs tens of milliseconds of CPU (the TLS context, built in a worker
    thread), so a loop running hundreds of waits makes it once, not once per wait."""

    def __init__(self, client: Any, apis: dict[str, Any], loader: Any) -> None:
        self.client = client
        self.apis = apis
        self.loader = loader
        self.refs = 0
        self.last_refresh = 0.0
        self.on_closed: Callable[[], None] = lambda: None

    async def refresh(self, configuration: Any) -> None:
        """The Configuration's hook: renew an exec-plugin token when it is due."""
        from kf_trainer_core.base.timeutil import expired

        expiry = getattr(self.loader, "exec_plugin_expiry", None)
        stale = (
            expired(expiry) if expiry is not None else time.monotonic() - self.last_refresh > 300
        )
        if stale:
            if hasattr(self.loader, "exec_plugin_expiry"):
                del self.loader.exec_plugin_expiry
            await self.loader.load_and_set(configuration)
            self.last_refresh = time.monotonic()

    async def release(self) -> None:
        self.refs -= 1
        if self.refs <= 0:
            self.on_closed()  # the next transport opens a new one
            await self.client.close()


# The connections of each event loop, by configuration (its cache key); each is the
# task that opens it, awaited by every transport that asks meanwhile.
_CONNECTIONS: weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop, dict[str, asyncio.Task[_Connection]]
] = weakref.WeakKeyDictionary()


async def _open_connection(config: KubernetesConfig) -> _Connection:
    from kf_trainer_core.base.offloop import imported
    from kf_trainer_core.k8s.api_client import new_api_client

    k8s = await imported("kubernetes_asyncio")
    cfg = k8s.client.Configuration()
    loader = await _load_async(config, cfg)
    # Its TLS context (the system CA bundle, tens of ms) is built in a worker thread.
    client = await new_api_client(k8s, cfg)
    client.user_agent = USER_AGENT
    apis = {
        "custom": k8s.client.CustomObjectsApi(client),
        "core": k8s.client.CoreV1Api(client),
        "client": client,
    }
    conn = _Connection(client, apis, loader)
    if loader is not None and "exec" in (getattr(loader, "_user", None) or {}):
        # kubernetes_asyncio loads an exec-plugin token once and never looks at its
        # expiry again; the Configuration's documented hook renews it when due.
        cfg.refresh_api_key_hook = conn.refresh
    return conn


async def _shared_connection(config: KubernetesConfig, stale: _Connection | None) -> _Connection:
    """This loop's connection for ``config`` (opened once, whoever asks first); a new
    one when ``stale`` is the current one (its credentials were refused)."""
    loop = asyncio.get_running_loop()
    opening = _CONNECTIONS.setdefault(loop, {})
    key = config.cache_key()
    task = opening.get(key)
    current = _result(task)
    if (
        task is None
        or (task.done() and current is None)
        or (stale is not None and current is stale)
    ):
        task = opening[key] = loop.create_task(_open_connection(config), name=f"kf-connect-{key}")

        def forget(done: asyncio.Task[_Connection], key: str = key) -> None:
            if (done.cancelled() or done.exception() is not None) and opening.get(key) is done:
                del opening[key]

        task.add_done_callback(forget)

        def closed(task: asyncio.Task[_Connection] = task, key: str = key) -> None:
            if opening.get(key) is task:
                del opening[key]

        task.add_done_callback(
            lambda done: (
                setattr(done.result(), "on_closed", closed)
                if not done.cancelled() and done.exception() is None
                else None
            )
        )
    # Shielded: a caller cancelled while the connection opens must not cancel it for
    # the others.
    conn = await asyncio.shield(task)
    conn.refs += 1
    return conn


def _result(task: asyncio.Task[_Connection] | None) -> _Connection | None:
    if task is None or not task.done() or task.cancelled() or task.exception() is not None:
        return None
    return task.result()


class AsyncTransport:
    """Calls over ``kubernetes_asyncio``. Build with :meth:`create` (loading a
    kubeconfig is a coroutine there). The transports of one event loop share one API
    client per configuration."""

    def __init__(self, config: KubernetesConfig) -> None:
        self.config = config
        self._conn: _Connection | None = None
        self._apis: dict[str, Any] = {}

    @classmethod
    async def create(cls, config: KubernetesConfig) -> AsyncTransport:
        transport = cls(config)
        await transport.connect()
        return transport

    async def connect(self) -> None:
        """(Re)load credentials; see :meth:`SyncTransport.connect`. The library's import
        and the kubeconfig's reading and parsing happen in a worker thread, off the
        event loop; the API client is this loop's shared one (a reconnection, after
        refused credentials, replaces it for every transport that shares it)."""
        old = self._conn
        self._conn = await _shared_connection(self.config, old)
        self._apis = self._conn.apis
        if old is not None:
            await old.release()

    async def _invoke(self, p: Plan) -> Any:
        import aiohttp
        import kubernetes_asyncio as k8s

        method = _bind(self._apis, p, _araw_get)
        kwargs = dict(p.kwargs)
        if kwargs.get("_request_timeout") is None:
            kwargs.pop("_request_timeout", None)
        if p.content_type:
            kwargs["_content_type"] = p.content_type
        try:
            response = await method(*p.args, **kwargs)
        except k8s.client.exceptions.ApiException as exc:
            raise _from_exception(exc) from None
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            raise _unreachable(exc) from None
        if not 200 <= response.status <= 299:
            try:
                body = await response.read()
            finally:
                response.release()
            raise _status_error(response, body)
        return response

    async def perform(self, call: Call) -> Any:
        p = plan(call, self.config.request_timeout)
        response = await self._invoke(p)
        try:
            return _decode(await response.read(), p.text)
        finally:
            response.release()

    async def open_stream(self, call: OpenWatch | OpenLogStream) -> _AsyncLines:
        return _AsyncLines(await self._invoke(plan(call, self.config.request_timeout)))

    async def read_line(self, stream: _AsyncLines) -> bytes | None:
        import aiohttp

        try:
            return await stream.readline()
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            raise _unreachable(exc) from None

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.release()


async def _load_async(cfg: KubernetesConfig, target: Any) -> Any:
    from kf_trainer_core.base.offloop import off_loop

    # Checking the files, reading and parsing them: synchronous work, done in a worker
    # thread; only the loader's own (asynchronous) step runs on the loop.
    loader = await off_loop(lambda: _async_loader(cfg, target))
    if loader is not None:
        with loading_errors(cfg):
            await loader.load_and_set(target)
    return loader


def _async_loader(cfg: KubernetesConfig, target: Any) -> Any:
    """What ``kubernetes_asyncio.config.load_kube_config`` (or ``..._from_dict``) does
    before its first await: the loader of the kubeconfig, made from the parsed files
    (``None`` when the configuration was set without a kubeconfig)."""
    cfg.check_usable()
    with loading_errors(cfg):
        import kubernetes_asyncio as k8s
        from kubernetes_asyncio.config.kube_config import (
            KUBE_CONFIG_DEFAULT_LOCATION,
            KubeConfigLoader,
            KubeConfigMerger,
        )

        mode = cfg.mode()
        if mode == "explicit":
            _explicit(cfg, target, "BearerToken")
            return None
        if mode == "in-cluster":
            k8s.config.load_incluster_config(client_configuration=target)  # type: ignore[no-untyped-call]
            return None
        document = cfg.kubeconfig_dict()  # inline, or several files merged
        if document is not None:
            return KubeConfigLoader(
                config_dict=document, config_base_path=None, active_context=cfg.context
            )
        # One file: merged by the library, which resolves relative paths from it.
        merger = KubeConfigMerger(cfg.kubeconfig or KUBE_CONFIG_DEFAULT_LOCATION)
        return KubeConfigLoader(
            config_dict=merger.config,
            config_base_path=None,
            active_context=cfg.context,
            config_persister=merger.save_changes,
        )
