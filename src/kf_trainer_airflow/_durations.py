"""Durations given to the operator, sensor and trigger, checked. The standard library
only: the trigger's module imports it on the triggerer's event loop."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from kf_trainer_core.tasks import shown

__all__ = ["seconds"]


def seconds(value: Any, field: str, *, zero: bool = False) -> float | None:
    """``value`` (a number of seconds or a ``timedelta``) as seconds; ``None`` stays
    ``None``. Anything else — ``"1h"``, ``True``, a negative number — fails naming
    ``field`` and the fix."""
    if value is None:
        return None
    if isinstance(value, timedelta):
        number = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        number = float(value)
    else:
        raise ValueError(
            f"{field}={shown(value)} is not a duration. Fix: give seconds as a number or a "
            f"timedelta, e.g. {field}=3600 or {field}=timedelta(hours=1)."
        )
    if number != number or number in (float("inf"), float("-inf")):  # NaN, infinities
        raise ValueError(f"{field}={shown(value)}. Fix: give a finite number of seconds.")
    if number < 0 or (number == 0 and not zero):
        least = "0 or more" if zero else "a positive number of"
        raise ValueError(f"{field}={shown(value)}. Fix: give {least} seconds, or a timedelta.")
    return number
