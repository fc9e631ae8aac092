"""Kubernetes timestamps (RFC 3339) to and from datetimes, durations for people, and the
one rule of a duration argument (seconds) that every adapter checks its own by."""

from __future__ import annotations

import itertools
import math
from datetime import datetime, timedelta, timezone
from typing import Any, Literal

from kf_trainer_core.base.errors import FieldProblem, SpecError
from kf_trainer_core.base.quoting import shown

#: What a duration of 0 means (:func:`duration_problem`).
Zero = Literal["refused", "allowed", "no limit"]

#: Renew credentials this long before they expire.
EXPIRY_SKEW = timedelta(seconds=60)


def parse_time(text: str) -> datetime:
    """Parse ``2026-11-22T04:00:00Z`` or ``...T04:00:00.123456789Z`` (log timestamps
    carry nanoseconds, which datetime cannot hold: they are cut to microseconds)."""
    text = text.strip()
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    head, dot, rest = text.partition(".")
    if dot:
        digits = "".join(itertools.takewhile(str.isdigit, rest))
        text = f"{head}.{digits[:6].ljust(6, '0')}{rest[len(digits) :]}"
    value = datetime.fromisoformat(text)
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


def now() -> datetime:
    return datetime.now(timezone.utc)


def expired(expiry: datetime | str) -> bool:
    """Whether a credential's expiry is past (or within the renewal skew)."""
    when = parse_time(expiry) if isinstance(expiry, str) else expiry
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return when - EXPIRY_SKEW <= now()


def duration_text(seconds: float | None) -> str:
    """``3725`` → ``1h 02m 05s``; ``None`` → ``unknown``."""
    if seconds is None:
        return "unknown"
    total = round(seconds)
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h {minutes:02d}m {secs:02d}s"
    if minutes:
        return f"{minutes}m {secs:02d}s"
    return f"{secs}s"


def duration_problem(value: Any, field: str, *, zero: Zero = "refused") -> FieldProblem | None:
    """Why ``value`` is no duration for ``field`` (``None`` when it is one). A duration is
    a finite number of seconds greater than 0; ``None`` is no limit. ``zero`` says what
    0 is: ``"refused"``, ``"allowed"`` (a grace of none), or ``"no limit"`` (where
    ``None`` cannot be given, as in a KFP input; infinity is no limit there too)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        example = value.strip() if isinstance(value, str) else "600"
        return FieldProblem(
            field,
            f"a {type(value).__name__} is not a number of seconds (got {shown(value)}).",
            f"give a number, e.g. {field}={example if _is_number(example) else 600}.",
        )
    fix = {
        "refused": f"give a number greater than 0, or {field}=None for no limit.",
        "allowed": "give 0 or more seconds.",
        "no limit": "give a number greater than 0, or 0 for no limit.",
    }[zero]
    number = as_float(value)
    if math.isinf(number) and number > 0:
        if zero == "no limit":
            return None
        return FieldProblem(field, f"{shown(value)} seconds is not finite.", fix)
    if number > 0 or (number == 0 and zero != "refused"):
        return None
    return FieldProblem(field, f"{shown(value)} seconds is not a duration.", fix)


def seconds(
    value: Any, field: str, *, zero: Zero = "refused", title: str = "Invalid arguments"
) -> float | None:
    """``value`` (a number or a ``timedelta``) as seconds, ``None`` for no limit (see
    :func:`duration_problem`); else a :class:`SpecError` naming ``field`` and the fix."""
    if isinstance(value, timedelta):
        value = value.total_seconds()
    problem = duration_problem(value, field, zero=zero)
    if problem is not None:
        raise SpecError(problem, title=title)
    if value is None:
        return None
    number = as_float(value)
    if zero == "no limit" and (number == 0 or math.isinf(number)):
        return None
    return number


def as_float(value: float) -> float:
    """``value`` as a float; an int too large for one is an infinity of its sign (a
    user's ``10**400`` must get the field's error, not ``OverflowError``)."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
