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
    asyncio.events._set_running_loop(loop)
    try:
        return k8s.client.ApiClient(configuration)
    finally:
        asyncio.events._set_running_loop(None)
