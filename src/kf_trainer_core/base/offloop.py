"""Keeping an event loop free: what the async side of the suite does before it may run
on a loop shared with others (an Airflow triggerer, a Prefect worker's async tasks).

The rule the async code keeps: no callback on the loop runs for more than a few tens
of milliseconds. Imports of the Kubernetes client (seconds on a cold, busy machine),
reading and parsing kubeconfig files and similar synchronous work run in a worker
thread instead. A worker thread only frees the loop while it lets go of the GIL, which
pure-Python work does every few milliseconds (``sys.getswitchinterval()``): work that
holds the GIL for long in C is split up or done once per process instead.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib
import sys
import threading
from types import ModuleType

__all__ = ["imported"]


# Imports started by :func:`imported`, whichever loop or thread asked first.
_IMPORTS: dict[str, concurrent.futures.Future[ModuleType]] = {}
_IMPORTS_LOCK = threading.Lock()


async def imported(name: str) -> ModuleType:
    """Module ``name``, imported in a worker thread the first time (an import made on
    the loop stops every other task of it until it ends). Concurrent callers share the
    one import, and none gets the module before it is fully initialised."""
    with _IMPORTS_LOCK:
        started = _IMPORTS.get(name)
        if started is None:
            module = sys.modules.get(name)
            spec = getattr(module, "__spec__", None)
            if module is not None and not getattr(spec, "_initializing", False):
                return module
            started = _IMPORTS[name] = concurrent.futures.Future()
            threading.Thread(
                target=_import_into, args=(name, started), name=f"import-{name}", daemon=True
            ).start()
    return await asyncio.wrap_future(started)


def _import_into(name: str, future: concurrent.futures.Future[ModuleType]) -> None:
    try:
        future.set_result(importlib.import_module(name))
    except BaseException as exc:
        with _IMPORTS_LOCK:
            _IMPORTS.pop(name, None)  # a later call tries again
        future.set_exception(exc)
