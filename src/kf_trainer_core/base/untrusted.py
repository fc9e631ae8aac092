"""What a job sends back, made safe to keep and to show.

A training function (or anything in its pods) controls its log lines, the progress and
metrics it reports (``##kf-trainer-progress##`` lines, or a ``trainerStatus`` it posts),
its exception text and its result. All of it is untrusted: a reader of the suite must
never raise because of it, a terminal must never receive its escape sequences, rich
must never read markup in it, and no single line may carry megabytes into an error
message. Every site that keeps or shows job data goes through this module:

* :func:`text` / :func:`line` neutralise control characters and escape sequences and
  cap the length, saying where a text was cut;
* :func:`shown_lines` / :func:`shown_line` are what a person reads of a log: the
  suite's internal marker lines hidden, every other line made safe;
* :func:`trainer_status` validates a ``trainerStatus`` (from a marker line, a status
  server or the local backend) field by field: what fails is dropped, with one warning
  per job and problem, and nothing raises;
* :func:`metric_value` gives numbers where a metric's text is a number.

Markup of rich and markdown is escaped where it is rendered (the CLI's tables and
progress bar, the artifacts' markdown), with the text already neutralised here.
"""

from __future__ import annotations

import logging
import math
import re
import threading
from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from typing import Any

__all__ = [
    "INTERNAL_MARKERS",
    "LINE_LIMIT",
    "code_span",
    "is_internal",
    "json_shape_problem",
    "line",
    "markdown",
    "metric_value",
    "shown_line",
    "shown_lines",
    "text",
    "timestamp",
    "trainer_status",
    "whole_number",
]

log = logging.getLogger(__name__)

#: Characters of one log line (or one message) kept; the rest is cut, saying so.
LINE_LIMIT = 4096
#: Characters of a metric's name and value (the TrainJob CRD's limit).
METRIC_TEXT_LIMIT = 64
#: Metrics in a ``trainerStatus`` (the TrainJob CRD's limit).
METRICS_LIMIT = 256
#: Lines that carry the suite's own data in a log: progress reports and the result.
PROGRESS_MARKER = "##kf-trainer-progress##"
RESULT_MARKER = "##kf-trainer-result##"
INTERNAL_MARKERS = (PROGRESS_MARKER, RESULT_MARKER)

# ECMA-48 escape sequences: CSI (ESC [ ... final byte), OSC, DCS, SOS, PM and APC
# strings (ended by BEL or ST, or by the end of the text), and two-character escapes.
_ESCAPES = re.compile(
    r"""
    \x1b\[[0-?]*[ -/]*[@-~]?            # CSI: colours, cursor moves, clear screen
  | \x9b[0-?]*[ -/]*[@-~]?              # the same, as a C1 control
  | (?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])  # OSC (titles, OSC-8 links), DCS, SOS, PM, APC
    [^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?
  | \x1b[ -/]*[0-~]?                    # any other escape
    """,
    re.VERBOSE,
)
# What is left after the sequences: C0 controls but tab, DEL, C1 controls, the
# bidirectional overrides that make text read differently from what it is, and lone
# surrogates (JSON's "\ud800" escapes decode to them), which no UTF-8 sink can write:
# pydantic's JSON, a task log's file or an artifact's request would raise on them.
_CONTROLS = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_REPLACEMENT = "\ufffd"
#: Room for the cut marker (``… [kf-trainer: cut at K of N characters]``).
_CUT_RESERVE = 64


def text(value: object, limit: int = LINE_LIMIT, *, newlines: bool = False) -> str:
    """``value`` as text that is safe to keep and to print: escape sequences removed,
    other control characters (and, unless ``newlines``, line breaks) shown as U+FFFD,
    and at most ``limit`` characters, ending with ``… [kf-trainer: cut at K of N
    characters]`` when there were more. Never raises."""
    try:
        raw = value if isinstance(value, str) else str(value)
    except Exception:
        return _REPLACEMENT
    # Look at a bounded prefix only: a 20 MB line costs its cut, not a scan of it all.
    extra = max(0, len(raw) - limit)
    head = raw[: limit + 256] if extra else raw
    clean = "\n".join(_one(part) for part in head.split("\n")) if newlines else _one(head)
    if len(clean) > limit or extra:
        # The whole, marker included, fits the limit: cutting again changes nothing.
        if limit < 4 * _CUT_RESERVE:
            return clean[: max(0, limit - 1)] + "…"
        kept = limit - _CUT_RESERVE
        return f"{clean[:kept]}… [kf-trainer: cut at {kept:,} of {len(raw):,} characters]"
    return clean


def _one(raw: str) -> str:
    if raw.isprintable():
        return raw  # the common case: nothing to do
    return _CONTROLS.sub(_REPLACEMENT, _ESCAPES.sub("", raw))


def line(value: object, limit: int = LINE_LIMIT) -> str:
    """One line of job text: :func:`text` with line breaks neutralised too."""
    return text(value, limit)


def is_internal(raw: str) -> bool:
    """Whether a log line is one of the suite's own (a progress report or the result),
    which the suite reads and a person should not."""
    return PROGRESS_MARKER in raw or RESULT_MARKER in raw


def line_field(value: Any) -> Any:
    """A model's ``mode="before"`` validator for a string field read from the cluster:
    :func:`line` of a string, anything else as given (for the model to judge)."""
    return line(value) if isinstance(value, str) else value


def text_field(value: Any) -> Any:
    """As :func:`line_field`, keeping line breaks (:func:`text` with ``newlines``)."""
    return text(value, newlines=True) if isinstance(value, str) else value


def shown_line(raw: str, limit: int = LINE_LIMIT) -> str | None:
    """What a person reads of one log line: ``None`` for an internal marker line, else
    the line made safe (:func:`line`)."""
    if is_internal(raw):
        return None
    return line(raw.rstrip("\r\n"), limit)


def shown_lines(lines: Iterable[str], limit: int = LINE_LIMIT) -> list[str]:
    """:func:`shown_line` of each line, internal ones left out."""
    return [shown for raw in lines if (shown := shown_line(raw, limit)) is not None]


# Inside a line, these are what markdown and HTML read: emphasis, code, links and images
# (``[``, ``]``; ``!`` and ``(`` mean nothing without them), tags, entities, tables.
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]<>|~&])")


def markdown(value: object, limit: int = LINE_LIMIT) -> str:
    """One line of job text for use inside a markdown line (artifacts, summaries):
    :func:`line`, then every character markdown or HTML reads there escaped, so it shows
    as written (no link, image, emphasis or tag comes from a job)."""
    return _MARKDOWN_SPECIAL.sub(r"\\\1", line(value, limit))


def code_span(value: object, limit: int = LINE_LIMIT, *, table: bool = False) -> str:
    """Job text as markdown inline code: one line (a blank line would end the span and
    let the rest be read as markdown), made safe, in a fence longer than any run of
    backticks it holds; in a ``table`` cell, ``|`` escaped so it never splits the cell."""
    text = line(" ".join(str(value).splitlines()), limit)
    if table:
        text = text.replace("|", "\\|")
    fence = "`"
    while fence in text:
        fence += "`"
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


# ---------------------------------------------------------------------- trainerStatus

_warned: set[tuple[str, str]] = set()
_warned_lock = threading.Lock()
_WARNED_LIMIT = 4096


def warn_once(subject: str, problem: str) -> None:
    """Log ``problem`` about ``subject`` (a job) once per process: a job whose reports
    are malformed says so once, not at every read of its status."""
    key = (subject, problem)
    with _warned_lock:
        if key in _warned:
            return
        if len(_warned) >= _WARNED_LIMIT:
            _warned.clear()
        _warned.add(key)
    log.warning("%s: %s", subject, problem)


#: How deeply a value a job returns may nest (a readable result is far shallower;
#: pydantic refuses to serialise past a few hundred levels, other serialisers earlier).
RESULT_DEPTH_LIMIT = 32
#: How many characters of JSON a value a job returns may take (a result over the
#: termination message's 4 KiB travels in a log line; this is what a reader keeps).
RESULT_SIZE_LIMIT = 1_000_000


def json_shape_problem(
    value: Any, max_depth: int = RESULT_DEPTH_LIMIT, max_chars: int = RESULT_SIZE_LIMIT
) -> str | None:
    """Why a JSON value a job sent back cannot be carried further as it is: nested deeper
    than ``max_depth`` levels, or larger than ``max_chars`` characters of JSON (counted
    roughly, never past the limit); ``None`` when it can. Walks without recursion, so
    that no depth makes it raise."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    size = 0
    while stack:
        item, depth = stack.pop()
        if depth > max_depth:
            return f"it is nested more than {max_depth} levels deep"
        if isinstance(item, Mapping):
            size += 2
            for key, inner in item.items():
                size += len(str(key)) + 4
                stack.append((inner, depth + 1))
        elif isinstance(item, (list, tuple)):
            size += 2 + len(item)
            stack.extend((inner, depth + 1) for inner in item)
        elif isinstance(item, str):
            size += len(item) + 2
        else:
            size += 24  # a number, a bool, null
        if size > max_chars:
            return f"it takes more than {max_chars:,} characters of JSON"
    return None


#: A whole number as cluster data may write it: ASCII digits only.
_ASCII_WHOLE = re.compile(r"-?[0-9]{1,18}")


def whole_number(
    value: object,
    low: int = 0,
    high: int = 2**63 - 1,
    *,
    subject: str = "",
    what: str = "",
) -> int | None:
    """A whole number read from cluster data (an annotation, a label, a status field):
    an ``int`` (not a bool) or a text of ASCII digits (a minus sign first allowed),
    spaces around allowed, within
    ``[low, high]``; anything else counts as absent (``None``), never an error.

    Never call ``int()`` on such text: it reads other scripts' digits (Arabic-Indic
    ones, mathematical bold ones) as numbers and raises on digits it cannot use (a
    superscript two passes ``str.isdigit``).
    Given ``subject`` and ``what``, a value that is there but unusable is warned about
    once (:func:`warn_once`)."""
    number: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and _ASCII_WHOLE.fullmatch(value.strip(" ")):
        number = int(value.strip(" "))
    if number is not None and low <= number <= high:
        return number
    if value is not None and subject and what:
        warn_once(
            subject,
            f"{what} {line(repr(value), 80)} is not a whole number from {low} "
            f"to {high}; it is ignored",
        )
    return None


#: Characters of a timestamp read (RFC 3339 with nanoseconds and an offset takes 35).
_TIMESTAMP_LIMIT = 64


def timestamp(value: object) -> datetime | None:
    """A moment read from cluster data (a ``creationTimestamp``, a container's
    ``startedAt``, a condition's ``lastTransitionTime``): RFC 3339 text as
    :func:`~kf_trainer_core.base.timeutil.parse_time` reads it, or a ``datetime``; one
    without a zone is taken as UTC, so that every moment compares with every other.
    Anything else (malformed text, a number, a list) counts as absent (``None``),
    never an error.

    Never hand such text to pydantic's ``datetime``: it refuses what it cannot read
    (the reader raises) and keeps a moment without a zone naive, which then cannot be
    compared with, or subtracted from, the aware ones beside it."""
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, str) and len(value) <= _TIMESTAMP_LIMIT:
        from kf_trainer_core.base.timeutil import parse_time

        try:
            moment = parse_time(value)
        except (ValueError, OverflowError):
            return None
    else:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=timezone.utc)


def _whole(value: Any, low: int, high: int) -> int | None:
    """An integer in ``[low, high]``; a float with no fraction counts (JSON has one
    number type), a bool or a string does not."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and low <= value <= high:
        return value
    return None


def _metric_text(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return None
    shown = line(value, METRIC_TEXT_LIMIT * 4)
    if not shown or len(shown) > METRIC_TEXT_LIMIT:
        return None
    return shown


def _time_text(value: Any) -> str | None:
    return value if isinstance(value, str) and timestamp(value) is not None else None


def trainer_status(raw: Any, subject: str = "a TrainJob") -> dict[str, Any] | None:
    """A ``trainerStatus`` with only the fields that are valid: ``progressPercentage``
    (0-100), ``estimatedRemainingSeconds`` (>= 0), ``lastUpdatedTime`` (RFC 3339) and
    ``metrics`` (up to 256 ``{"name", "value"}`` of 1-64 printable characters; a number
    as value is taken as its text). What is not valid is dropped and named in one
    warning about ``subject``; ``None`` when nothing is left. Never raises."""
    try:
        return _trainer_status(raw, subject)
    except Exception as exc:  # a reader never raises because of a job's output
        warn_once(subject, f"ignored its progress report ({type(exc).__name__})")
        return None


def _trainer_status(raw: Any, subject: str) -> dict[str, Any] | None:
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        warn_once(subject, "ignored a progress report that is not an object")
        return None
    out: dict[str, Any] = {}
    dropped: list[str] = []
    checks = {
        "progressPercentage": lambda v: _whole(v, 0, 100),
        "estimatedRemainingSeconds": lambda v: _whole(v, 0, 2**31 - 1),
        "lastUpdatedTime": _time_text,
    }
    for key, check in checks.items():
        if key in raw and raw[key] is not None:
            value = check(raw[key])
            if value is None:
                dropped.append(key)
            else:
                out[key] = value
    metrics = raw.get("metrics")
    if metrics is not None:
        kept: dict[str, str] = {}
        bad = 0
        for item in metrics if isinstance(metrics, list) else [metrics]:
            name = value = None
            if isinstance(item, Mapping):
                name, value = _metric_text(item.get("name")), _metric_text(item.get("value"))
            if name is None or value is None or (name not in kept and len(kept) >= METRICS_LIMIT):
                bad += 1
                continue
            kept[name] = value
        if bad:
            dropped.append(f"{bad} of metrics")
        if kept:
            out["metrics"] = [{"name": k, "value": v} for k, v in kept.items()]
    if dropped:
        warn_once(
            subject,
            "ignored malformed fields of its progress report: " + ", ".join(dropped),
        )
    return out or None


def metric_value(value: str) -> int | float | str:
    """A metric as a number where its text is a finite number (``"0.25"`` → 0.25,
    ``"10"`` → 10), else the text itself."""
    candidate = value.strip()
    if not candidate or len(candidate) > METRIC_TEXT_LIMIT:
        return value
    try:
        if re.fullmatch(r"[+-]?\d+", candidate):
            return int(candidate)
        number = float(candidate)
    except ValueError:
        return value
    return number if math.isfinite(number) else value
