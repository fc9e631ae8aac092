"""The transport of the local backend: the same surface as
:mod:`kf_trainer_core.backends.kubernetes.transport` (``perform``, ``open_stream``,
``read_line``, ``connect``, ``close``, see :class:`~kf_trainer_core.k8s.api.TransportProtocol`),
so every operation of the client — submit with adoption, informer waits, log follows,
failure explanations — runs unchanged on this machine. :class:`LocalTransport` does the
work (a state directory); :class:`AsyncLocalTransport` hands it to worker threads.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kf_trainer_core.backends.local.api import POLL_SECONDS, LocalApi
from kf_trainer_core.backends.local.logs import PENDING
from kf_trainer_core.backends.local.store import StatusError
from kf_trainer_core.k8s.calls import Call, OpenLogStream, OpenWatch
from kf_trainer_core.k8s.errors import ApiError

if TYPE_CHECKING:
    from kf_trainer_core.config import LocalConfig


def container_settings(config: LocalConfig) -> dict[str, Any] | None:
    """What the container backend's jobs need of a ``ContainerConfig`` (``None`` for
    a plain ``LocalConfig``: the pods are processes)."""
    if getattr(config, "backend", "local") != "container":
        return None
    keep = (
        "engine",
        "host",
        "image",
        "initializer_image",
        "pull_policy",
        "auto_remove",
        "mounts",
        "env",
        "apply_resource_limits",
    )
    data = config.model_dump(mode="json")
    return {key: data[key] for key in keep}


def _api_error(exc: Exception) -> ApiError:
    if isinstance(exc, StatusError):
        body = exc.status()
        return ApiError(exc.code, exc.reason, exc.message, status=body)
    # The database stayed locked past the busy timeout: transient, like a 503.
    return ApiError(503, "ServiceUnavailable", f"local state store busy: {exc}")


def _answer(method: Callable[..., Any], *args: Any) -> Any:
    """``method(*args)``, its failures as the API errors a server would answer with."""
    try:
        return method(*args)
    except (StatusError, sqlite3.OperationalError) as exc:
        raise _api_error(exc) from None


class LocalTransport:
    """Performs calls against a local state directory (see :mod:`kf_trainer_core.backends.local`).
    Thread-safe: an orchestrator's log-follow thread may share it."""

    def __init__(self, config: LocalConfig) -> None:
        self.config = config
        self._lock = threading.Lock()
        self._api: LocalApi | None = None
        self.connect()

    @property
    def api(self) -> LocalApi:
        assert self._api is not None
        return self._api

    def connect(self) -> None:
        """(Re)open the state directory."""
        with self._lock:
            old = self._api
            self._api = LocalApi(
                self.config.state_path(),
                python=self.config.python,
                use_venv=self.config.use_venv,
                on_missing_resources=self.config.on_missing_resources,
                container=container_settings(self.config),
            )
        if old is not None:
            old.close()

    def perform(self, call: Call) -> Any:
        return _answer(self.api.perform, call)

    def open_stream(self, call: OpenWatch | OpenLogStream) -> Any:
        return _answer(self.api.open_stream, call)

    def read_line(self, stream: Any) -> bytes | None:
        """The next line, waiting for it (``None``: the stream ended)."""
        while True:
            item = _answer(stream.poll)  # the next line, None at the end, or PENDING
            if item is not PENDING:
                return item  # type: ignore[no-any-return]
            wake = getattr(stream, "wake", None)
            if wake is None:
                time.sleep(POLL_SECONDS)
            else:
                wake.wait(POLL_SECONDS)
                wake.clear()

    def close(self) -> None:
        if self._api is not None:
            self._api.close()


class AsyncLocalTransport:
    """The same for event loops: requests run in a worker thread (a delete waits for
    processes to stop), streams are polled from the loop between short sleeps."""

    def __init__(self, config: LocalConfig) -> None:
        self.config = config
        self._sync = LocalTransport(config)

    async def connect(self) -> None:
        await asyncio.to_thread(self._sync.connect)

    async def perform(self, call: Call) -> Any:
        return await asyncio.to_thread(self._sync.perform, call)

    async def open_stream(self, call: OpenWatch | OpenLogStream) -> Any:
        return await asyncio.to_thread(self._sync.open_stream, call)

    async def read_line(self, stream: Any) -> bytes | None:
        while True:
            item = _answer(stream.poll)
            if item is not PENDING:
                return item  # type: ignore[no-any-return]
            wake = getattr(stream, "wake", None)
            for _ in range(5):  # the interval, cut short when a reader waits for us
                await asyncio.sleep(POLL_SECONDS / 5)
                if wake is not None and wake.is_set():
                    wake.clear()
                    break

    async def close(self) -> None:
        self._sync.close()
