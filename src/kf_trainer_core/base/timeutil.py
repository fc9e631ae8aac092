"""Kubernetes timestamps (RFC 3339) to and from datetimes, and durations for people."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

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
        digits = ""
        for i, ch in enumerate(rest):
            if not ch.isdigit():
                tail = rest[i:]
                break
            digits += ch
        else:
            tail = ""
        text = f"{head}.{digits[:6].ljust(6, '0')}{tail}"
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
