"""Make a ``kubernetes_asyncio`` API client without stopping the event loop.

``kubernetes_asyncio.client.ApiClient(configuration)`` builds its TLS context in its
constructor (``ssl.create_default_context`` in ``RESTClientObject``): with no CA in the
configuration (a kubeconfig that trusts the system store, an ``http://`` server, or
``insecure-skip-tls-verify``) that loads and parses the whole system CA bundle, 40-90 ms
of one C call on two busy cores, too long for a loop shared with other waits. Versions
30 to 36 of the library offer no configuration field for a ready-made ``SSLContext``
(the constructor reads only ``ssl_ca_cert``, ``cert_file``, ``key_file``,
``verify_ssl``, ``disable_strict_ssl_verification`` and ``tls_server_name`` and hands the
context straight to ``aiohttp.TCPConnector``), so the whole client, unchanged, is made in
a worker thread instead. OpenSSL's certificate loading runs with the GIL released
(measured: another thread of the process kept running every few milliseconds while
contexts were built), so the loop really is free meanwhile.

aiohttp binds the client's session and connector to the loop that
``asyncio.get_running_loop()`` names when they are made, and none runs in a worker
thread: for the constructor only, the worker names the caller's loop as its running loop
(``asyncio.events._set_running_loop``, the hook event-loop implementations use). The
constructors only store the loop (and make one already-resolved future); they schedule
nothing on it, so nothing crosses threads. asyncio's debug mode, which refuses callbacks
scheduled from a foreign thread, checks that in the tests.

The library's HTTP session reads the environment on every request (aiohttp's
``trust_env=True``): the proxy variables and ``~/.netrc``, each through a worker thread
— two hand-offs to the loop's default executor per request, for which concurrent
requests queue — and a ``.netrc`` entry for the API server's host broke every request
that carries a bearer token (aiohttp refuses an ``Authorization`` header next to
credentials of its own). The client
is given a session that reads nothing per request, over the same connector and TLS
context: the environment's proxy for the API server (``HTTPS_PROXY``, ``HTTP_PROXY``,
``NO_PROXY``, as aiohttp read them) is resolved once, when the client is made, unless the
kubeconfig names one (``proxy-url``); ``.netrc`` is not read, as kubectl does not.
"""

from __future__ import annotations

import asyncio
import asyncio.events
from types import ModuleType
from typing import Any

__all__ = ["new_api_client"]


async def new_api_client(k8s: ModuleType, configuration: Any) -> Any:
    """``k8s.client.ApiClient(configuration)`` (``k8s``: the imported
    ``kubernetes_asyncio``), made in a worker thread and bound to the running loop."""
    loop = asyncio.get_running_loop()
    return await asyncio.to_thread(_make, k8s, configuration, loop)


def _make(k8s: ModuleType, configuration: Any, loop: asyncio.AbstractEventLoop) -> Any:
    if asyncio.events._get_running_loop() is not None:  # pragma: no cover - a loop's own thread
        raise RuntimeError("the API client must be made in a worker thread")
    proxy_authorization = None if configuration.proxy else _environment_proxy(configuration)
    asyncio.events._set_running_loop(loop)
    try:
        client = k8s.client.ApiClient(configuration)
        _session_without_environment(client.rest_client, proxy_authorization)
        return client
    finally:
        asyncio.events._set_running_loop(None)


def _environment_proxy(configuration: Any) -> str | None:
    """Set the proxy the environment names for the API server, found as aiohttp found
    it on each request (``NO_PROXY``, then the scheme's variable). The proxy's
    credentials go where aiohttp put them: on the tunnel's ``CONNECT`` for an
    ``https`` server; for a plain ``http`` one, on each request (returned, for the
    session's headers) — never inside a tunnel, where the API server would read them."""
    from aiohttp.helpers import get_env_proxy_for_url
    from yarl import URL

    server = URL(configuration.host)
    try:
        proxy, auth = get_env_proxy_for_url(server)
    except LookupError:  # none applies
        return None
    configuration.proxy = str(proxy)
    if auth is None:
        return None
    if server.scheme == "https":
        configuration.proxy_headers = {"Proxy-Authorization": auth.encode()}
        return None
    return str(auth.encode())


#: The library's read buffer: a watch event carries a whole object, up to etcd's
#: 1.5 MiB request limit.
_READ_BUFSIZE = 2**21


def _session_without_environment(rest: Any, proxy_authorization: str | None) -> None:
    """Give ``rest`` (the library's ``RESTClientObject``) a session over the same
    connector that reads no environment per request (see the module)."""
    import aiohttp

    session = getattr(rest, "pool_manager", None)
    if not isinstance(session, aiohttp.ClientSession) or session.connector is None:
        return  # a library version shaped otherwise: keep its session as it is
    connector = session.connector
    session.detach()  # the connector passes to the new session, unclosed
    headers = {"Proxy-Authorization": proxy_authorization} if proxy_authorization else None
    rest.pool_manager = aiohttp.ClientSession(
        connector=connector, headers=headers, trust_env=False, read_bufsize=_READ_BUFSIZE
    )
