"""An :class:`~kf_trainer_core.k8s.api.Api` for tests of the operations' logic without a
server: each call is answered by a function of the test, and every call and pause the
operation asks for is recorded (pauses are not slept)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from kf_trainer_core.k8s.api import Api


@dataclass(frozen=True)
class Sleep:
    """A pause the operation asked of its Api (recorded, not slept)."""

    seconds: float


class ScriptedApi(Api):
    """An Api that answers each call with ``answer(call)`` (an exception it returns is
    raised) and records the calls and the pauses, without sleeping."""

    def __init__(self, answer: Callable[[Any], Any]) -> None:
        super().__init__(transport=None)  # type: ignore[arg-type]
        self.answer = answer
        self.calls: list[Any] = []

    async def __call__(self, call: Any) -> Any:
        self.calls.append(call)
        out = self.answer(call)
        if isinstance(out, BaseException):
            raise out
        return out

    async def sleep(self, seconds: float) -> None:
        self.calls.append(Sleep(seconds))
        self.answer(Sleep(seconds))


def play(
    operation: Callable[[Api], Coroutine[Any, Any, Any]], answer: Callable[[Any], Any]
) -> tuple[Any, list[Any]]:
    """Run ``operation`` against scripted answers; its result and the calls it made."""
    api = ScriptedApi(answer)
    return asyncio.run(operation(api)), api.calls
