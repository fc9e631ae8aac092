"""The async client's Kubernetes API client (and its TLS context: the system CA bundle,
tens of milliseconds of one C call) is made in a worker thread, never on the event
loop, and still works on that loop (asyncio's debug mode refuses anything scheduled on
the loop from another thread)."""

from __future__ import annotations

import asyncio
import ssl
import threading
from pathlib import Path
from typing import Any

import pytest

from kf_trainer_core.client import AsyncTrainerClient
from kf_trainer_core.config import KubernetesConfig


def test_tls_context_is_built_off_the_loop(
    kubeconfig_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import kubernetes_asyncio.client  # noqa: F401  (imported before the spy goes in)

    made_in: list[threading.Thread] = []
    create = ssl.create_default_context

    def spy(*args: Any, **kwargs: Any) -> ssl.SSLContext:
        made_in.append(threading.current_thread())
        return create(*args, **kwargs)

    # Only watched: the library builds its context through this function at call time.
    monkeypatch.setattr(ssl, "create_default_context", spy)

    async def main() -> tuple[threading.Thread, int]:
        config = KubernetesConfig(kubeconfig=str(kubeconfig_path))
        async with AsyncTrainerClient(config) as client:
            jobs = await client.list_jobs()
            jobs_again = await client.list_jobs()  # the same session, reused
        assert len(jobs) == len(jobs_again)
        return threading.current_thread(), len(jobs)

    loop_thread, _ = asyncio.run(main(), debug=True)
    assert made_in, "no TLS context was made"
    assert loop_thread not in made_in, "the TLS context was made on the event loop's thread"
