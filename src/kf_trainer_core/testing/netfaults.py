"""A TCP proxy on loopback that breaks the network between a client and an API server
the way real networks break, below HTTP and TLS.

:mod:`.faults` makes the test server misbehave; this sits in front of *any* server (the
test bed over HTTP, the real kube-apiserver over HTTPS: TLS passes through untouched, the
server's certificate still names ``127.0.0.1``) and breaks the connections themselves:

* :meth:`FaultProxy.blackhole` — every connection goes silent: sockets stay open, no byte
  passes either way, new connections are accepted and hear nothing. A connection caught
  in the hole stays silent for good, as when a NAT or load balancer lost its state: only
  a client that notices the silence recovers. :meth:`FaultProxy.heal` lets new
  connections through again.
* :meth:`FaultProxy.drip` — the server's bytes trickle through a few at a time.
* :meth:`FaultProxy.reset` — every open connection is reset (RST), as by a restarting
  load balancer.
* :meth:`FaultProxy.unauthorized` — the next connections are answered
  ``401 Unauthorized`` (plain-HTTP servers only: a TLS stream cannot be answered for).

    with FaultProxy(("127.0.0.1", server_port)) as proxy:
        proxied_kubeconfig(kubeconfig, tmp_path / "proxied", proxy)
        ...
        proxy.blackhole()
        ...
        proxy.heal()

The proxy runs an event loop in a thread of its own; every method may be called from any
thread. :meth:`FaultProxy.dead_reused` tells whether a client sent requests down a
connection that died in a hole after the network came back.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from kf_trainer_core.k8s.errors import status_body

__all__ = ["Connection", "FaultProxy", "proxied_kubeconfig"]

_CHUNK = 64 * 1024
#: The most bytes a TLS alert record takes (close_notify: 24 to 31 bytes); any request
#: is longer.
_TLS_ALERT_MAX = 64


@dataclass
class Connection:
    """One client connection through the proxy, as the proxy saw it."""

    number: int
    opened: float  # time.monotonic()
    #: Caught in a black-hole: nothing passes any more, whatever happens next.
    dead: bool = False
    #: Bytes the client sent on it after the network was healed while it was dead.
    sent_after_heal: int = 0
    #: Answered ``401 Unauthorized`` (see :meth:`FaultProxy.unauthorized`).
    refused: bool = False
    closed: bool = False
    writers: list[asyncio.StreamWriter] = field(default_factory=list, repr=False)


class FaultProxy:
    """A loopback TCP proxy to ``upstream`` (``(host, port)``) with network faults."""

    def __init__(self, upstream: tuple[str, int], host: str = "127.0.0.1") -> None:
        self.upstream = upstream
        self.host = host
        self.port = 0
        self.connections: list[Connection] = []
        #: When the last :meth:`heal` happened (``time.monotonic()``), if any.
        self.healed_at: float | None = None
        self._lock = threading.Lock()
        self._hole = False
        self._drip: tuple[int, float] | None = None
        self._unauthorized = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> FaultProxy:
        """Listen on a free port of ``host``; return self."""
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            loop = self._loop = asyncio.new_event_loop()
            try:
                self._server = loop.run_until_complete(
                    asyncio.start_server(self._accept, self.host, 0)
                )
                self.port = self._server.sockets[0].getsockname()[1]
            except BaseException as exc:  # reported to start()'s caller
                failure.append(exc)
                ready.set()
                return
            ready.set()
            try:
                loop.run_forever()
            finally:
                loop.close()

        self._thread = threading.Thread(target=run, name="kf-fault-proxy", daemon=True)
        self._thread.start()
        ready.wait(10)
        if failure:
            raise failure[0]
        return self

    def stop(self) -> None:
        """Close every connection and stop listening."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None or not loop.is_running():
            return
        asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            _close(conn, abort=True)
        # The connections' pumps end with their sockets: let them (a cancelled handler
        # of asyncio's server logs an error).
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        if others:
            await asyncio.wait(others, timeout=2)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)

    @property
    def address(self) -> str:
        """``host:port`` of the proxy."""
        return f"{self.host}:{self.port}"

    # --------------------------------------------------------------------- faults
    def blackhole(self) -> None:
        """From now on, nothing passes: every open connection goes silent for good and
        new ones are accepted but hear nothing (until :meth:`heal`)."""
        with self._lock:
            self._hole = True
            for conn in self.connections:
                if not conn.closed:
                    conn.dead = True

    def heal(self) -> None:
        """Let new connections through again (and stop a drip). The connections caught
        in the hole stay silent: the client has to notice and open new ones."""
        with self._lock:
            self._hole = False
            self._drip = None
            self.healed_at = time.monotonic()

    def drip(self, chunk: int = 64, interval: float = 0.02) -> None:
        """Pass the server's bytes ``chunk`` at a time, one chunk per ``interval``
        seconds (until :meth:`heal`)."""
        with self._lock:
            self._drip = (max(1, chunk), max(0.0, interval))

    def reset(self) -> int:
        """Reset (RST) every open connection now; return how many."""
        return self._close_open(abort=True)

    def unauthorized(self, count: int = 1) -> None:
        """Answer the next ``count`` connections ``401 Unauthorized`` (as a Kubernetes
        ``Status``) and close them; the open ones are closed now, so that the client's
        next requests come on new connections. Only for plain-HTTP servers."""
        with self._lock:
            self._unauthorized = count
        self._close_open(abort=False)

    # ------------------------------------------------------------------ observing
    def dead_reused(self) -> int:
        """How many connections that died in a hole were sent a request after the heal
        (a client that kept using a connection it could not know was dead). A client
        closing a TLS connection sends a last alert record (a few dozen bytes): only
        more than that counts."""
        with self._lock:
            return sum(1 for c in self.connections if c.dead and c.sent_after_heal > _TLS_ALERT_MAX)

    def open_connections(self) -> int:
        with self._lock:
            return sum(1 for c in self.connections if not c.closed)

    # ------------------------------------------------------------------ internals
    def _close_open(self, *, abort: bool) -> int:
        """Close every open connection (``abort``: reset it) on the proxy's loop; how many."""
        if self._loop is None or not self._loop.is_running():
            raise RuntimeError("the proxy is not running: call start() first")

        async def close_open() -> int:
            live = [c for c in self.connections if not c.closed]
            for conn in live:
                _close(conn, abort=abort)
            return len(live)

        return asyncio.run_coroutine_threadsafe(close_open(), self._loop).result(10)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with self._lock:
            conn = Connection(len(self.connections), time.monotonic(), dead=self._hole)
            conn.writers.append(writer)
            self.connections.append(conn)
            refuse = conn.refused = not conn.dead and self._unauthorized > 0
            if refuse:
                self._unauthorized -= 1
        try:
            if conn.dead:
                await self._pump(conn, reader, None, upstream=True)
                return
            if refuse:
                await _answer_401(reader, writer)
                return
            try:
                up_reader, up_writer = await asyncio.open_connection(*self.upstream)
            except OSError:
                return  # the server is down: the client sees its connection closed
            conn.writers.append(up_writer)
            await asyncio.gather(
                self._pump(conn, reader, up_writer, upstream=True),
                self._pump(conn, up_reader, writer, upstream=False),
            )
        finally:
            _close(conn, abort=False)

    async def _pump(
        self,
        conn: Connection,
        source: asyncio.StreamReader,
        target: asyncio.StreamWriter | None,
        *,
        upstream: bool,
    ) -> None:
        """Copy ``source`` to ``target`` while the connection lives; once it is dead,
        read and drop (a dead connection neither answers nor closes)."""
        while True:
            try:
                data = await source.read(_CHUNK)
            except (ConnectionError, OSError):
                data = b""
            if not data:
                if conn.dead and not upstream:
                    return  # the server hung up on a dead connection: the client never hears
                if target is not None and not conn.dead:
                    with contextlib.suppress(Exception):
                        target.write_eof()
                if upstream:
                    _close(conn, abort=False)
                return
            with self._lock:
                dead, drip, healed = conn.dead, self._drip, self.healed_at
                if dead and upstream and healed is not None and not self._hole:
                    conn.sent_after_heal += len(data)
            if dead or target is None:
                continue
            try:
                if drip is not None and not upstream:
                    size, interval = drip
                    for i in range(0, len(data), size):
                        target.write(data[i : i + size])
                        await target.drain()
                        await asyncio.sleep(interval)
                else:
                    target.write(data)
                    await target.drain()
            except (ConnectionError, OSError):
                _close(conn, abort=False)
                return


def _close(conn: Connection, *, abort: bool) -> None:
    """Close both sides of ``conn`` (``abort``: with a reset)."""
    conn.closed = True
    for writer in conn.writers:
        with contextlib.suppress(Exception):
            if abort:
                sock = writer.get_extra_info("socket")
                if sock is not None:
                    # Linger 0: close() sends RST instead of FIN.
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                writer.transport.abort()
            else:
                writer.close()


async def _answer_401(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Read one request's head and answer it as the API server answers bad credentials."""
    with contextlib.suppress(Exception):
        await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    body = json.dumps(status_body(401, "Unauthorized", "Unauthorized")).encode()
    head = (
        "HTTP/1.1 401 Unauthorized\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode()
    with contextlib.suppress(Exception):
        writer.write(head + body)
        await writer.drain()


def proxied_kubeconfig(source: Path, target: Path, proxy: FaultProxy) -> Path:
    """Write a copy of the kubeconfig ``source`` whose clusters are reached through
    ``proxy`` (same scheme, same credentials and CA; the proxy's port)."""
    import yaml

    config: dict[str, Any] = yaml.safe_load(source.read_text())
    for entry in config.get("clusters") or []:
        cluster = entry.get("cluster") or {}
        url = urlsplit(str(cluster.get("server", "")))
        cluster["server"] = urlunsplit(url._replace(netloc=proxy.address))
    target.write_text(yaml.safe_dump(config))
    target.chmod(0o600)
    return target
