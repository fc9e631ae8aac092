"""Connections that die: TCP keepalive on every socket of both transports, and the
record of paths found dead (a read or a connect that timed out)."""

from __future__ import annotations

import contextlib
import socket
import time
from typing import Any

#: TCP keepalive on every connection of both transports: a connection whose peer is
#: gone (a node that crashed, a path that went down) is found dead by the kernel after
#: about a minute without traffic (idle 30 s, then 3 probes 10 s apart) instead of on
#: its next use. A path that stays up but carries nothing (a middlebox that lost the
#: connection's state answers no data yet may answer probes) is caught by the streams'
#: idle timeouts (:class:`~kf_trainer_core.backends.kubernetes.plan.Timeouts`).
KEEPALIVE_IDLE = 30
KEEPALIVE_INTERVAL = 10
KEEPALIVE_PROBES = 3


def keepalive_options() -> list[tuple[int, int, int]]:
    """The socket options that turn TCP keepalive on, as this platform names them."""
    options = [(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)]
    idle = getattr(socket, "TCP_KEEPIDLE", None) or getattr(socket, "TCP_KEEPALIVE", None)
    for option, value in (
        (idle, KEEPALIVE_IDLE),
        (getattr(socket, "TCP_KEEPINTVL", None), KEEPALIVE_INTERVAL),
        (getattr(socket, "TCP_KEEPCNT", None), KEEPALIVE_PROBES),
    ):
        if option is not None:
            options.append((socket.IPPROTO_TCP, option, value))
    return options


#: When a connection to each cluster last timed out (``time.monotonic()``), by the
#: configuration's cache key. A silence long enough to time out says the path may have
#: died under every connection opened before it: a sync transport drops its pooled ones
#: before its next request (see ``SyncTransport._drop_suspects``) rather than sending it
#: down a dead one and waiting out ``request_timeout``. (aiohttp closes a connection
#: idle for 15 s by itself, before any stream's idle timeout can fire.)
_TIMED_OUT: dict[str, float] = {}


def note_timeout(cluster: str) -> None:
    """A connection to ``cluster`` (a configuration's cache key) timed out now."""
    _TIMED_OUT[cluster] = time.monotonic()


def last_timeout(cluster: str) -> float | None:
    """When a connection to ``cluster`` last timed out (``time.monotonic()``), if ever."""
    return _TIMED_OUT.get(cluster)


def keepalive_pools(client: Any) -> None:
    """Every connection the client's urllib3 ``PoolManager`` opens gets TCP keepalive:
    pools take their connections' socket options from the manager's
    ``connection_pool_kw`` (urllib3's documented way; ``kubernetes`` offers no setting
    for it before 35). urllib3's own default (``TCP_NODELAY``) is kept."""
    from urllib3.connection import HTTPConnection

    pools = client.rest_client.pool_manager
    pools.connection_pool_kw["socket_options"] = [
        *HTTPConnection.default_socket_options,
        *keepalive_options(),
    ]


def keep_alive(response: Any) -> None:
    """TCP keepalive on the connection under an aiohttp response. aiohttp's client
    leaves it off and ``kubernetes_asyncio`` makes its connector itself (no socket
    factory to hand it): the socket is reached through the response's public
    ``connection.transport``, and set once (a pooled connection already has it)."""
    transport = getattr(getattr(response, "connection", None), "transport", None)
    sock = transport.get_extra_info("socket") if transport is not None else None
    if sock is None:
        return
    with contextlib.suppress(OSError):
        if not sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE):
            for level, option, value in keepalive_options():
                sock.setsockopt(level, option, value)
