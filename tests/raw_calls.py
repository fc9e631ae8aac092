"""One API call made through a client's own connection (retries, renewal and request
hook included), for tests that set up or inspect what the suite does not make itself."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from kf_trainer_core.client import AsyncTrainerClient, TrainerClient

T = TypeVar("T")


async def araw(client: AsyncTrainerClient, call: Any) -> Any:
    """``call``'s answer, through the async client's connection."""
    return await (await client._api())(call)


def raw(client: TrainerClient, call: Any) -> Any:
    """``call``'s answer, through the sync client's connection (on its portal)."""
    return client._call(araw(client._async, call))


def aside(client: TrainerClient, work: Callable[[AsyncTrainerClient], Awaitable[T]]) -> T:
    """``work`` done with an async client of the same configuration on a loop of its
    own, in a thread: for request hooks, which run on the client's loop and so cannot
    wait on a call of a client that shares it (a rerun played in the middle of a prune)."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    async def once() -> T:
        async with AsyncTrainerClient(client.config, namespace=client.namespace) as other:
            return await work(other)

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, once()).result()


def raw_aside(client: TrainerClient, call: Any) -> Any:
    """``call``'s answer through a connection of its own (see :func:`aside`)."""
    return aside(client, lambda other: araw(other, call))
