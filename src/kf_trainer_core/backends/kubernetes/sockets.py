"""Connections that die: TCP keepalive on every socket of the transport."""

from __future__ import annotations

import contextlib
import socket
from typing import Any

#: TCP keepalive on every connection of the transport: a connection whose peer is
#: gone (a node that crashed, a path that went down) is found dead by the kernel after
#: about a minute without traffic (idle 30 s, then 3 probes 10 s apart) instead of on
#: its next use. A path that stays up but carries nothing (a middlebox that lost the
#: connection's state answers no data yet may answer probes) is caught by the streams'
#: idle timeouts (:class:`~kf_trainer_core.backends.kubernetes.plan.Timeouts`).
KEEPALIVE_IDLE = 30
KEEPALIVE_INTERVAL = 10
KEEPALIVE_PROBES = 3


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
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            # The timings, as this platform names them (the idle time: TCP_KEEPALIVE on macOS).
            idle = getattr(socket, "TCP_KEEPIDLE", None) or getattr(socket, "TCP_KEEPALIVE", None)
            for option, value in (
                (idle, KEEPALIVE_IDLE),
                (getattr(socket, "TCP_KEEPINTVL", None), KEEPALIVE_INTERVAL),
                (getattr(socket, "TCP_KEEPCNT", None), KEEPALIVE_PROBES),
            ):
                if option is not None:
                    sock.setsockopt(socket.IPPROTO_TCP, option, value)
