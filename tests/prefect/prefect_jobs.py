"""Training functions for the local-backend tests (defined in a file, so that their
source can be shipped)."""

from __future__ import annotations


def add(a: int = 1, b: int = 2) -> dict[str, int]:
    """Returns what it was given, summed."""
    return {"sum": a + b}


def sleepy(seconds: float = 120.0) -> str:
    """Sleeps (a job that outlives its task's timeout)."""
    import time

    time.sleep(seconds)
    return "woke"


def broken(message: str = "bad data") -> None:
    """Fails the way training code does: with an exception and a traceback."""
    print("loading data")
    raise RuntimeError(message)


def dated() -> dict[str, object]:
    """Returns something JSON cannot carry (a date): the task must fail, not pass None."""
    import datetime

    return {"trained_on": datetime.date(2024, 1, 1)}
