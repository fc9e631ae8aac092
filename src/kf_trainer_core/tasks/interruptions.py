"""What an interrupted task means for the TrainJob it waited on, for any orchestrator.

An adapter catches the interruption (a timeout, a cancellation, a signal, an error)
and says what its orchestrator knows about it; this module decides the job's fate
(:func:`disposition`), which job to act on (:func:`pick`), and logs and words the
outcome (:func:`concluded`); :class:`~kf_trainer_core.tasks.lifecycle.TaskJob`
applies the action with the task's client.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from kf_trainer_core.base.errors import SpecError
from kf_trainer_core.base.quoting import shown

__all__ = [
    "CANCEL_ACTIONS",
    "CancelAction",
    "Identity",
    "Interruption",
    "Logger",
    "check_action",
    "concluded",
    "describe",
    "disposition",
    "past",
    "pick",
]

CancelAction = Literal["delete", "suspend", "keep"]
Identity = str | Sequence[str | int | None]


class Logger(Protocol):
    """Where a task's lines go: a ``logging`` logger or adapter, or an orchestrator's
    own (Airflow's task logger)."""

    def info(self, msg: str, /, *args: Any) -> Any: ...
    def warning(self, msg: str, /, *args: Any) -> Any: ...
    def error(self, msg: str, /, *args: Any) -> Any: ...


#: What a task may do to its job when it gives up on it: delete it, suspend it (kept,
#: without pods), or leave it running.
CANCEL_ACTIONS = ("delete", "suspend", "keep")


def check_action(action: str, field: str = "on_cancel") -> CancelAction:
    """Validate an ``on_cancel`` / ``action`` argument (``field``: its name where it was
    given: Airflow's ``on_kill_action``, a KFP input), before anything is submitted."""
    if action not in CANCEL_ACTIONS:
        raise SpecError.single(
            field,
            f"{shown(action)} is not an action.",
            "use 'delete' (remove the job), 'suspend' (keep it, stopped and resumable) or "
            "'keep' (leave it running).",
            title="Invalid arguments",
        )
    return action  # type: ignore[return-value]


def describe(exc: BaseException) -> str:
    """The exception in a few words: its type and first line (or signal number)."""
    signum = getattr(exc, "signal", None)
    text = str(exc).splitlines()[0] if str(exc) else ""
    if not text and isinstance(signum, int):
        text = f"signal {signum}"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def past(action: str) -> str:
    """``delete`` → ``Deleted``, ``suspend`` → ``Suspended``."""
    return {"delete": "Deleted", "suspend": "Suspended"}.get(action, action)


def disposition(
    exc: BaseException, *, final_attempt: bool, signalled: bool, cancelling: Callable[[], bool]
) -> str:
    """What an interruption means for the job the task was waiting on.

    * ``"cancel"``: the task gives up on the job: its timeout, a cancellation, Ctrl-C,
      a job that can never start (or that Kueue can never admit), or an error on the
      task's last attempt;
    * ``"keep"``: someone comes back for it (a crash: re-running reattaches; an error
      that will be retried: the retry reattaches), or it has ended.

    ``signalled``: ``exc`` is a termination signal (or a runner's shutdown), which both
    a cancellation and an eviction send: only ``cancelling()`` tells them apart.
    """
    from kf_trainer_core.errors import (
        TrainJobCreationFailedError,
        TrainJobDeletedError,
        TrainJobFailedError,
        TrainJobNotAdmissibleError,
    )

    if isinstance(exc, (TrainJobCreationFailedError, TrainJobNotAdmissibleError)):
        return "cancel"  # it would stay pending (or queued) forever
    if isinstance(exc, (TrainJobFailedError, TrainJobDeletedError)):
        return "keep"
    if signalled:
        return "cancel" if cancelling() else "keep"
    if isinstance(exc, (TimeoutError, asyncio.CancelledError, KeyboardInterrupt)):
        return "cancel"
    if isinstance(exc, Exception):
        return "cancel" if final_attempt else "keep"
    return "keep"


@dataclass
class Interruption:
    """What was decided about a job when its task was interrupted."""

    verdict: str
    acted: list[str]
    note: str | None


def _note(action: CancelAction, verdict: str, exc: BaseException, acted: list[str]) -> str | None:
    if verdict != "cancel":
        if not isinstance(exc, Exception):
            return f"The task stopped ({describe(exc)}); the job keeps running for a re-run."
        return None
    if acted:
        return f"The task stopped ({describe(exc)}); the job was {past(action).lower()}."
    if action == "keep":
        return f"The task stopped ({describe(exc)}); the job was left running (on_cancel='keep')."
    return None


def pick(
    verdict: str, name: str | None, identity: Identity | None, action: CancelAction
) -> dict[str, Any] | None:
    """The client's ``stop_unfinished`` arguments that pick the task's job, when the
    verdict is to act on it: by name, or by identity when the task was interrupted
    before it learnt the name."""
    if verdict != "cancel" or action == "keep":
        return None
    if name is not None:
        return {"name": name, "action": action}
    if identity is not None:
        return {"identity": identity, "action": action}
    return None


def concluded(
    exc: BaseException,
    logger: Logger,
    verdict: str,
    action: CancelAction,
    name: str | None,
    acted: list[str],
    rerun: str = "re-running the task",
) -> Interruption:
    """Log what the interruption did to the job, and say it for the summary (``rerun``:
    what, in the orchestrator's words, comes back for a job left running)."""
    why = describe(exc)
    if verdict == "cancel":
        if action == "keep" and name:
            logger.warning("Leaving TrainJob %s running (on_cancel='keep'): %s", name, why)
        for target in acted:
            logger.warning("%s TrainJob %s: %s", past(action), target, why)
    elif name is not None and not isinstance(exc, Exception):
        logger.warning("TrainJob %s keeps running (%s); %s reattaches to it.", name, why, rerun)
    return Interruption(verdict, acted, _note(action, verdict, exc, acted))
