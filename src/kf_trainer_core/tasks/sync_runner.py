"""A synchronous face for a coroutine that stays interruptible: how an orchestrator's
synchronous task runs the same coroutine as its async twin.

Why not one long blocking wait (``asyncio.run`` or an orchestrator's own helper):
orchestrators deliver a synchronous task's timeout as an exception raised in the task's
thread at its next Python instruction (Ctrl-C and SIGTERM land in the main thread the
same way). So the coroutine runs on the process's portal (the one bridge, see
:mod:`kf_trainer_core.base.portal`) while the task's thread waits in short slices; when
an interruption lands in the task's thread, the coroutine is *cancelled* — exactly what
cancels the async twin — and the coroutine's clean-up, written once for both faces,
learns the real reason from :func:`interruption_cause`. The task's thread waits for that
clean-up before it re-raises.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from typing_extensions import ParamSpec

from kf_trainer_core.base.portal import cancelled_by, interruption_cause, portal

__all__ = ["cancelled_by", "interruption_cause", "sync_face"]

P = ParamSpec("P")
T = TypeVar("T")


def sync_face(fn: Callable[P, Coroutine[Any, Any, T]], name: str) -> Callable[P, T]:
    """A synchronous function named ``name`` that runs ``fn``'s coroutine on the portal,
    its caller interruptible (its signature and docstring are ``fn``'s)."""

    @functools.wraps(fn)
    def face(*args: P.args, **kwargs: P.kwargs) -> T:
        return portal().call(fn(*args, **kwargs))

    # Orchestrators tell tasks apart by qualified name: faces must not share one.
    face.__name__ = face.__qualname__ = name
    return face
