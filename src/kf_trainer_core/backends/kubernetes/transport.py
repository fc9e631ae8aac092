"""Perform :mod:`calls <kf_trainer_core.k8s.calls>` with ``kubernetes_asyncio``.

The transport calls the typed API methods (``CustomObjectsApi``, ``CoreV1Api``) with
``_preload_content=False`` and parses the JSON itself: that surface is the same in every
``kubernetes_asyncio`` from 30 to 36, skips the library's slow model deserialisation, and
lets watches and log follows be read line by line. Which method serves which call, and
how long it may take, is decided once, in
:func:`~kf_trainer_core.backends.kubernetes.plan.plan` (pure: the call in, the method and
its arguments out); connections get TCP keepalive
(:mod:`~kf_trainer_core.backends.kubernetes.sockets`). The sync client reaches the same
transport through the portal (:mod:`kf_trainer_core.base.portal`).
"""

from __future__ import annotations

import asyncio
import functools
import json
import time
import weakref
from collections.abc import Callable
from typing import Any

from kf_trainer_core.backends.kubernetes.plan import Plan, plan
from kf_trainer_core.backends.kubernetes.sockets import keep_alive
from kf_trainer_core.base import portal
from kf_trainer_core.config import KubernetesConfig, loading_errors
from kf_trainer_core.k8s.calls import Call, OpenLogStream, OpenWatch
from kf_trainer_core.k8s.errors import ApiError

USER_AGENT = "kf-trainer-suite"


async def _araw_get(client: Any, http_method: str, path: str, **kw: Any) -> Any:
    """A GET of a path no typed method serves: ``kubernetes_asyncio``'s one-call
    ``call_api(path, method, ...)`` (30 to 36), the unread response, BearerToken auth."""
    return await client.call_api(
        path,
        http_method,
        path_params=kw["path_params"],
        query_params=kw["query_params"],
        header_params=kw["header_params"],
        auth_settings=["BearerToken"],
        _return_http_data_only=True,
        _preload_content=False,
        _request_timeout=kw["_request_timeout"],
    )


def _bind(apis: dict[str, Any], p: Plan) -> Callable[..., Any]:
    """The method that serves ``p``: a typed API method, or :func:`_araw_get` (a generic
    request through the ApiClient) for paths no typed method serves."""
    if p.api == "client":
        return functools.partial(_araw_get, apis["client"], p.method)
    method: Callable[..., Any] = getattr(apis[p.api], p.method)
    return method


def _unreachable(exc: BaseException) -> ApiError:
    """A connection that failed below HTTP: status 0, retryable; a wrapper's ``reason``
    is what is named."""
    cause = getattr(exc, "reason", None)
    if isinstance(cause, BaseException):
        exc = cause
    text = str(exc)
    if not text and isinstance(exc, (TimeoutError, asyncio.TimeoutError)):
        # A bare timeout says nothing: which limit ran out is what the user can change.
        text = "timed out (no answer within the configuration's request_timeout or watch_timeout)"
    return ApiError(0, type(exc).__name__, text)


def _explicit(cfg: KubernetesConfig, target: Any) -> None:
    """Host, token and CA of an explicit configuration (the token under the key the
    library looks it up by, as its kubeconfig loader stores it)."""
    target.host = cfg.host
    if cfg.token is not None:
        target.api_key = {"BearerToken": f"Bearer {cfg.token.get_secret_value()}"}
    target.verify_ssl = cfg.verify_ssl
    target.ssl_ca_cert = _ca_file(cfg)


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

        def forget(task: asyncio.Task[_Connection] = task, key: str = key) -> None:
            if opening.get(key) is task:
                del opening[key]

        def opened(done: asyncio.Task[_Connection]) -> None:
            if done.cancelled() or done.exception() is not None:
                forget()  # the next caller tries again
            else:
                done.result().on_closed = forget  # closed: the next transport opens anew

        task.add_done_callback(opened)
    # Shielded: a caller cancelled while the connection opens must not cancel it for
    # the others.
    conn = await asyncio.shield(task)
    conn.refs += 1
    return conn


async def close_connections() -> None:
    """Close every connection of the running loop (a stopping portal's last act: a
    client its user never closed keeps its connection until then)."""
    opening = _CONNECTIONS.pop(asyncio.get_running_loop(), {})
    for task in list(opening.values()):
        conn = _result(task)
        if conn is not None:
            await conn.client.close()


portal.on_stop(close_connections)


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
        """(Re)load credentials (again after a 401: an exec plugin then runs anew instead
        of replaying an expired token). The library's import
        and the kubeconfig's reading and parsing happen in a worker thread, off the
        event loop; the API client is this loop's shared one (a reconnection, after
        refused credentials, replaces it for every transport that shares it)."""
        old = self._conn
        self._conn = await _shared_connection(self.config, old)
        self._apis = self._conn.apis
        if old is not None:
            await old.release()

    async def perform(self, call: Call) -> Any:
        """The request: its JSON (or text) answer, or for a watch or a followed log the
        open stream. One function from the call to the library's request, so that a
        traceback at the wire shows the operation that asked a frame or two above."""
        import aiohttp
        import kubernetes_asyncio as k8s

        p = plan(call, self.config.request_timeout, self.config.watch_timeout)
        method = _bind(self._apis, p)
        kwargs = dict(p.kwargs)
        # A ClientTimeout: the one form every release (30 to 36) hands to aiohttp as it
        # is (30 and 31 take a tuple for a total).
        t = p.timeouts
        kwargs["_request_timeout"] = aiohttp.ClientTimeout(
            total=t.total, sock_connect=t.connect, sock_read=t.read
        )
        if p.content_type:
            kwargs["_content_type"] = p.content_type
        try:
            response = await method(*p.args, **kwargs)
        except k8s.client.exceptions.ApiException as exc:
            status, reason = exc.status or 0, exc.reason or ""
            raise ApiError.from_response(status, exc.body, exc.headers, reason) from None
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            raise _unreachable(exc) from None
        keep_alive(response)
        if not 200 <= response.status <= 299:
            try:
                body = await response.read()
            finally:
                response.release()
            reason = response.reason or ""
            raise ApiError.from_response(response.status, body, response.headers, reason)
        if isinstance(call, (OpenWatch, OpenLogStream)):
            return _AsyncLines(response)
        try:
            body = await response.read()
            if p.text:
                return body.decode("utf-8", errors="replace")
            return json.loads(body) if body else {}
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            raise _unreachable(exc) from None  # the body stopped coming
        finally:
            response.release()

    async def open_stream(self, call: OpenWatch | OpenLogStream) -> _AsyncLines:
        lines: _AsyncLines = await self.perform(call)
        return lines

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
    # Checking the files, reading and parsing them: synchronous work, done in a worker
    # thread; only the loader's own (asynchronous) step runs on the loop.
    loader = await asyncio.to_thread(_async_loader, cfg, target)
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
            _explicit(cfg, target)
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
