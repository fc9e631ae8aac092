"""Why a job that has not finished is not simply running, told once for every surface.

A TrainJob has no condition for "a step failed and the Job controller is running it
again" or "the scheduler finds no node": its own state flips between Running and
Created as pods fail and come back. :class:`Waiting` is the explanation a person should
read instead (built from the pods by :mod:`kf_trainer_core.cluster.stuck`):

* ``Restarting`` — a step's pods failed and its Job retries them: which attempt this
  is of how many (the Job's ``backoffLimit`` + 1) and what the last one ended with;
* ``Pending`` — a step cannot start: the scheduler's reason (said once), a container
  that cannot be created, or pods the API server refuses to create.

Each carries its failure class (:mod:`kf_trainer_core.cluster.failures`) and one fix per
class (:func:`fix_for`); a wait that runs out of time adds what it leaves behind
(:func:`left_behind`). The CLI (``jobs get``, timeouts), the client's
:class:`~kf_trainer_core.errors.TrainJobTimeoutError`, the Airflow log, the Prefect
artifact and KFP's output all print these same words.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, field_validator

from kf_trainer_core.base import untrusted
from kf_trainer_core.base.errors import FailureClass

__all__ = ["Hint", "Waiting", "fix_for", "left_behind", "plain_hint", "timeout_lines"]

#: Makes the command line a person runs for ``kf-trainer ARGS`` (with the flags that
#: reach the job): ``hint(["jobs", "logs", "x"])``.
Hint = Callable[[Sequence[str]], str]


def plain_hint(namespace: str) -> Hint:
    """A :data:`Hint` that knows only the namespace: ``kf-trainer -n NS ARGS``."""
    import shlex

    def hint(args: Sequence[str]) -> str:
        return " ".join(["kf-trainer", "-n", shlex.quote(namespace), *map(shlex.quote, args)])

    return hint


# One fix per failure class, for a job that is still there (restarting or pending).
# {logs}, {wait} and {events} are the kf-trainer commands that show or follow the job.
_FIXES: dict[FailureClass, str] = {
    FailureClass.USER_CODE: (
        "read the step's log ({logs}), fix the training code and submit the job again: "
        "the Job controller's retries run the same code"
    ),
    FailureClass.CAPACITY: (
        "make the job fit: ask for no more than a node offers (resources_per_node, "
        "num_nodes) and for enough memory, or free that capacity; until then it waits"
    ),
    FailureClass.CONFIGURATION: (
        "fix the job's configuration (image, runtime, service account, secrets, quota) "
        "and submit it again: waiting will not change it"
    ),
    FailureClass.INFRASTRUCTURE: "wait longer ({wait}): the platform's trouble may pass",
    FailureClass.UNKNOWN: "wait longer ({wait}), or read its events ({events})",
}


# One fix per failure class, for a job that has failed: nothing waits any more, so the
# fix is what to change before submitting again.
_FIXES_FAILED: dict[FailureClass, str] = {
    **_FIXES,
    FailureClass.CAPACITY: (
        "make the job fit: ask for no more than a node offers (resources_per_node, "
        "num_nodes) and for enough memory, or free that capacity, then submit it again"
    ),
    FailureClass.INFRASTRUCTURE: (
        "submit it again: the platform's trouble may have passed (its events: {events})"
    ),
    FailureClass.UNKNOWN: "read the step's log ({logs}) and the job's events ({events})",
}


def fix_for(
    failure_class: FailureClass | None,
    name: str,
    hint: Hint,
    step: str | None = None,
    *,
    failed: bool = False,
) -> str:
    """The fix for a job ``name`` held up by a failure of ``failure_class`` (``None``:
    nothing holds it up, it is only slow), its commands made by ``hint``; ``failed``:
    the job has failed, and the fix says what to change before submitting it again."""
    text = (_FIXES_FAILED if failed else _FIXES)[failure_class or FailureClass.UNKNOWN]
    return text.format(
        logs=hint(["jobs", "logs", name, "--step", step or "node-0"]),
        wait=hint(["jobs", "wait", name]),
        events=hint(["jobs", "events", name]),
    )


def left_behind(namespace: str, name: str, state: str, hint: Hint) -> str:
    """What a wait that gave up leaves behind, and how to remove it."""
    return (
        f"left behind: TrainJob {namespace}/{name} still exists ({state}); delete it with: "
        f"{hint(['jobs', 'delete', name])} (Python: client.delete_job({name!r}))"
    )


class Waiting(BaseModel):
    """Why an unfinished job is restarting or cannot start (see the module)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    #: The state a person should read instead of the TrainJob's Created/Running.
    state: Literal["Restarting", "Pending"]
    #: One line: ``step node-0 is failing and being retried (attempt 2 of 7, exit
    #: code 3)``, ``step node-0 cannot be scheduled: 0/4 nodes can give it 16
    #: nvidia.com/gpu (each has fewer in all or fewer unused)``.
    reason: str
    step: str | None = None
    pod: str | None = None
    #: Restarting: the attempt under way or due (failed pods + 1) and how many the Job
    #: allows (``backoffLimit`` + 1; ``None`` when its limit could not be read).
    attempt: int | None = None
    attempts: int | None = None
    exit_code: int | None = None
    failure_class: FailureClass = FailureClass.UNKNOWN
    #: The class's evidence when it adds to ``reason`` (else empty).
    classified_by: str = ""

    # Built from what pods, schedulers and the job's containers say: one safe line each.
    _lines = field_validator("reason", "classified_by", mode="before")(
        lambda v: untrusted.line(v) if isinstance(v, str) else v
    )

    def line(self) -> str:
        """``Restarting: step node-0 is failing and being retried (attempt 2 of 7, exit
        code 3)``."""
        return f"{self.state}: {self.reason}"

    def class_text(self) -> str:
        """``user-code — the training program exited with code 3``."""
        why = f" — {self.classified_by}" if self.classified_by else ""
        return f"{self.failure_class.value}{why}"

    def class_line(self) -> str:
        """``failure class: user-code — the training program exited with code 3``."""
        return f"failure class: {self.class_text()}"

    def fix(self, name: str, hint: Hint) -> str:
        """The fix of its class (:func:`fix_for`)."""
        return fix_for(self.failure_class, name, hint, self.step)


def timeout_lines(
    head: str,
    waiting: Waiting | None,
    *,
    namespace: str,
    name: str,
    state: str | None,
    hint: Hint,
) -> tuple[list[str], str]:
    """The lines of a wait that ran out of time — ``head`` (which says the job's state
    when nothing holds it up), what holds it up, the fix and what is left behind — and
    the fix alone. ``state``: the job's state as a person reads it (``None``: the job
    is gone, nothing is left behind)."""
    lines = [f"{head}; it is {waiting.line()}" if waiting is not None else head]
    if waiting is not None and waiting.failure_class is not FailureClass.UNKNOWN:
        lines.append(waiting.class_line())
    fix = waiting.fix(name, hint) if waiting is not None else fix_for(None, name, hint)
    lines.append(f"fix: {fix}")
    if state is not None:
        lines.append(left_behind(namespace, name, state, hint))
    return lines, fix
