"""How long finished TrainJobs stay: the :class:`Retention` setting a job or a backend
carries, stamped on the TrainJob as annotations, and read back by ``prune``.

Kubeflow Trainer keeps every finished TrainJob (no TTL in v2.3). The suite already keeps
what users need after a job ends (the result, metrics, cost and log tail in the
orchestrator), so a job can ask to be removed once finished: ``Retention(
after_finished_seconds=86400)`` or ``Retention(keep_last=3)`` (the newest three attempts
of its identity). Nothing here deletes anything: the settings are annotations, and any
later ``prune`` (``kf-trainer jobs prune``, ``client.prune_jobs()``, a scheduled DAG,
flow or pipeline) honours them. See ``docs/retention.md``.

Light on purpose (pydantic and the standard library): the backend configuration
imports it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, Literal, TypedDict

from pydantic import Field, model_validator

from kf_trainer_core.base.errors import SpecError
from kf_trainer_core.base.quoting import shown
from kf_trainer_core.base.timeutil import as_float
from kf_trainer_core.base.untrusted import whole_number
from kf_trainer_core.fields._model import SpecModel, fix

#: Seconds after the job finished (its ``Complete``/``Failed`` condition's
#: ``lastTransitionTime``) after which ``prune`` may delete it.
AFTER_FINISHED_ANNOTATION = "kf-trainer-suite/retention-after-finished-seconds"
#: How many of the newest attempts of the job's identity ``prune`` keeps.
KEEP_LAST_ANNOTATION = "kf-trainer-suite/retention-keep-last"
ANNOTATIONS = (AFTER_FINISHED_ANNOTATION, KEEP_LAST_ANNOTATION)

#: Ten years: beyond that a number is a mistake (milliseconds, a timestamp), not a wish.
_MAX_SECONDS = 10 * 365 * 86400
_MAX_KEEP = 10_000


class Retention(SpecModel):
    """How long the TrainJob stays once it has finished (a spec option, or a backend's
    default for every job it submits).

    ``after_finished_seconds``: ``prune`` may delete the job this long after it finished.
    ``keep_last``: ``prune`` may delete it once ``keep_last`` newer attempts of its
    identity exist. Either or both; a job is due when one of them says so. Deleting is
    always ``prune``'s act — nothing is removed when the job finishes by itself.
    """

    type: Literal["Retention"] = "Retention"
    after_finished_seconds: int | None = Field(default=None, ge=0, le=_MAX_SECONDS)
    keep_last: int | None = Field(default=None, ge=1, le=_MAX_KEEP)

    @model_validator(mode="after")
    def _something(self) -> Retention:
        if self.after_finished_seconds is None and self.keep_last is None:
            raise ValueError(
                fix(
                    "Retention sets neither after_finished_seconds nor keep_last.",
                    "give one, e.g. Retention(after_finished_seconds=86400) or "
                    "Retention(keep_last=3).",
                )
            )
        return self

    def annotations(self) -> dict[str, str]:
        """The annotations that carry this setting on a TrainJob."""
        out = {}
        if self.after_finished_seconds is not None:
            out[AFTER_FINISHED_ANNOTATION] = str(self.after_finished_seconds)
        if self.keep_last is not None:
            out[KEEP_LAST_ANNOTATION] = str(self.keep_last)
        return out


def stamped(
    annotations: Mapping[str, Any] | None, subject: str = ""
) -> tuple[int | None, int | None]:
    """``(after_finished_seconds, keep_last)`` read back from a TrainJob's annotations.

    What a cluster holds is untrusted (anyone may edit an annotation): a value that is
    not a whole number in ASCII digits and in range counts as absent — it never makes a
    job due, nor fails a prune of the namespace — with one warning naming ``subject``
    (the job)."""
    found = annotations or {}
    return (
        whole_number(
            found.get(AFTER_FINISHED_ANNOTATION),
            0,
            _MAX_SECONDS,
            subject=subject,
            what=AFTER_FINISHED_ANNOTATION,
        ),
        whole_number(
            found.get(KEEP_LAST_ANNOTATION),
            1,
            _MAX_KEEP,
            subject=subject,
            what=KEEP_LAST_ANNOTATION,
        ),
    )


_AGE = re.compile(r"\A\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*\Z", re.ASCII)
_UNIT = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_age(text: str | float | int, what: str = "older_than") -> float:
    """Seconds from an age such as ``7d``, ``12h``, ``30m``, ``90s`` or a number of
    seconds; a clear error otherwise."""
    if isinstance(text, bool):
        raise ValueError(f"{what}={shown(text)} is no age. Fix: write e.g. '7d', '12h' or 3600.")
    if isinstance(text, (int, float)):
        seconds = as_float(text)  # 10**400 is out of range, not an OverflowError
    else:
        match = _AGE.match(str(text))
        if match is None:
            raise ValueError(
                f"{what}={shown(text)} is no age. Fix: write a number with s, m, h, d or w, "
                "e.g. '7d', '12h', '30m' (a bare number is seconds)."
            )
        seconds = float(match.group(1)) * _UNIT[match.group(2)]
    if not 0 <= seconds <= _MAX_SECONDS:
        raise ValueError(
            f"{what}={shown(text)} is out of range. Fix: use 0 to 10 years, e.g. '7d'."
        )
    return seconds


class PruneOptions(TypedDict, total=False):
    """The options of a prune, as every caller takes them by name: ``prune_jobs`` of both
    clients, the Airflow operator, the Prefect task, the KFP prune component and
    ``kf-trainer jobs prune``. One left out takes its default (in brackets);
    ``docs/retention.md`` tells the rules.

    ``older_than``: only jobs that finished longer ago (``"7d"``, ``"12h"``, seconds)
    [none]. ``keep_last``: keep the newest N attempts of each identity [none].
    ``statuses``: which finished states, ``Complete`` and/or ``Failed`` [both].
    ``label_selector``: only jobs matching it [all]. ``identity_prefix``: only jobs whose
    identity starts with it [all]. ``include_foreign``: also jobs this suite did not
    create [False]. ``honour_retention``: also jobs whose own :class:`Retention` says
    they are due [True]. ``limit``: delete at most this many a run [no cap].
    ``dry_run``: report the plan, delete nothing [False].
    """

    older_than: str | float | None
    keep_last: int | None
    statuses: str | Iterable[str]
    label_selector: str | None
    identity_prefix: str | None
    include_foreign: bool
    honour_retention: bool
    limit: int | None
    dry_run: bool


#: The names of :class:`PruneOptions`, in their documented order.
PRUNE_OPTIONS: tuple[str, ...] = tuple(PruneOptions.__annotations__)


#: What a task does with its job once the job has ended and the task has stored the
#: job's outputs in its orchestrator: keep it (prune decides later), delete it only when
#: it succeeded (a failed job stays for inspection), or delete it either way. The same
#: words as the Airflow operator's ``on_finish_action``.
FINISH_ACTIONS = ("keep", "delete-succeeded", "delete")


def check_finish_action(value: Any, field: str = "on_finish") -> str:
    """``value`` if it is one of :data:`FINISH_ACTIONS`; else a
    :class:`~kf_trainer_core.errors.SpecError` (a ``ValueError``) naming ``field`` and
    the choices (raised before anything is submitted)."""
    if value not in FINISH_ACTIONS:
        raise SpecError.single(
            field,
            f"{shown(value)} is not an action.",
            f"use one of {', '.join(repr(a) for a in FINISH_ACTIONS)} ('keep' leaves the job "
            "to prune; 'delete-succeeded' keeps failed jobs).",
            title="Invalid arguments",
        )
    return str(value)


def finish_deletes(action: str, status: str, *, succeeded: bool) -> bool:
    """Whether a task that ended with its job in ``status`` deletes it per ``action``.

    Only a finished job (``Complete`` or ``Failed``) is ever deleted: a task that stops
    waiting early (a timeout, a step reached) leaves the job to ``on_cancel``.
    ``succeeded`` is the task's verdict: a job that completed but whose result could not
    be read is not a success (a retry reads it again), so it is kept unless ``action`` is
    ``delete``.
    """
    if status not in ("Complete", "Failed") or action == "keep":
        return False
    return action == "delete" or (action == "delete-succeeded" and succeeded)
