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
