"""One API call made through a client's own connection (retries, renewal and request
hook included), for tests that set up or inspect what the suite does not make itself."""

from __future__ import annotations

from typing import Any

from kf_trainer_core.client import AsyncTrainerClient, TrainerClient


async def araw(client: AsyncTrainerClient, call: Any) -> Any:
    """``call``'s answer, through the async client's connection."""
    return await (await client._api())(call)


def raw(client: TrainerClient, call: Any) -> Any:
    """``call``'s answer, through the sync client's connection (on its portal)."""
    return client._call(araw(client._async, call))


def raw_aside(client: TrainerClient, call: Any) -> Any:
    """``call``'s answer through a connection of its own, on a loop of its own: for
    request hooks, which run on the client's loop and so cannot wait on it."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    async def once() -> Any:
        async with AsyncTrainerClient(client.config, namespace=client.namespace) as aside:
            return await araw(aside, call)

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, once()).result()
