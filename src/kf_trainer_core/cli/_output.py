"""How ``kf-trainer`` prints: ``-o table`` (rich tables on a terminal, plain aligned
columns otherwise, so that ``grep``/``awk`` and logs read them), ``-o json`` and
``-o yaml`` (the data, stable keys, for scripts)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timezone
from typing import Any, TypeVar

import click
import yaml

from kf_trainer_core.base import untrusted
from kf_trainer_core.base.timeutil import duration_text

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")

FORMATS = ("table", "json", "yaml")


def output_option(func: F) -> F:
    """``-o/--output table|json|yaml``."""
    return click.option(
        "-o",
        "--output",
        type=click.Choice(FORMATS),
        default="table",
        show_default=True,
        help="Output format.",
    )(func)


def is_terminal() -> bool:
    return sys.stdout.isatty()


def console() -> Any:
    """A rich console on stdout (colours and boxes only on a terminal)."""
    from rich.console import Console

    return Console(highlight=False, soft_wrap=True)


def dump(data: Any, fmt: str) -> None:
    """Print ``data`` as JSON or YAML."""
    if fmt == "json":
        click.echo(json.dumps(data, indent=2, sort_keys=False, default=str))
    else:
        click.echo(yaml.safe_dump(data, sort_keys=False, default_flow_style=False).rstrip())


def _model_json(item: Any) -> Any:
    return item.model_dump(mode="json")


def show_list(
    items: Sequence[T],
    output: str,
    headers: Sequence[str],
    row: Callable[[T], Sequence[str]],
    *,
    data: Callable[[T], Any] = _model_json,
    empty: str | None = None,
) -> None:
    """Print a list command's ``items``: their ``data`` as JSON/YAML, or a table of
    their ``row``; ``empty``, when given, goes to stderr instead of an empty table."""
    if output != "table":
        dump([data(item) for item in items], output)
        return
    if not items and empty is not None:
        click.echo(empty, err=True)
        return
    table(headers, [row(item) for item in items])


def key_values(pairs: Iterable[tuple[str, Any]]) -> None:
    """Print ``key: value`` lines with the values aligned (``None`` shows as ``-``)."""
    pairs = list(pairs)
    width = max(len(key) for key, _ in pairs)
    for key, value in pairs:
        shown = "-" if value is None else untrusted.line(value)
        click.echo(f"{key + ':':<{width + 1}} {shown}")


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], title: str | None = None) -> None:
    """A table: rich on a terminal, plain columns (two spaces apart) otherwise. Cells
    often hold what a job wrote: they are shown as text (control characters
    neutralised, never read as rich markup)."""
    rows = [[untrusted.line(cell) for cell in row] for row in rows]
    if is_terminal():
        from rich.table import Table
        from rich.text import Text

        t = Table(title=title, box=None, header_style="bold", pad_edge=False)
        for header in headers:
            t.add_column(header, overflow="fold")
        for row in rows:
            t.add_row(*(Text(cell) for cell in row))
        console().print(t)
        return
    if title:
        click.echo(title)
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=False)]
    for row in (headers, *rows):
        click.echo("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)).rstrip())


def age(when: datetime | None, now: datetime | None = None) -> str:
    """``3m 20s``-style time since ``when`` ("-" if unknown)."""
    if when is None:
        return "-"
    now = now or datetime.now(timezone.utc)
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    # Compact ("3m20s"): one word per cell, so that plain columns split on spaces.
    return duration_text(max(0.0, (now - when).total_seconds())).replace(" ", "")


def duration(start: datetime | None, end: datetime | None) -> str:
    """How long a job ran (until now when it has not ended)."""
    return age(start, end)  # age's ``now`` is ``end``, or now when it is None


def device_text(device: str | None, count: str | int | None, gpus: Sequence[str] = ()) -> str:
    """``gpu x4``, ``cpu`` when the count is not known, ``-`` when neither is; with the
    GPUs a local node was given, ``gpu x2 [GPUs 0,1]``."""
    known = None if count in (None, "", "Unknown") else count
    if not device or device == "Unknown":
        text = "-" if known is None else f"x{known}"
    else:
        text = device if known is None else f"{device} x{known}"
    return f"{text} [GPUs {','.join(gpus)}]" if gpus else text
