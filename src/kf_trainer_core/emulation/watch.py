"""What a watch stream says, as the apiserver says it: one ``{"type", "object"}`` JSON
line per change, BOOKMARKs carrying the version the stream has reached, an ERROR line
with a ``410 Expired`` Status when it was asked to start from a version no longer kept,
and an object entering or leaving a label or field selector seen as ADDED or DELETED."""

from __future__ import annotations

import json
from collections.abc import Callable

from kf_trainer_core.emulation.registry import JSON, StoreError
from kf_trainer_core.k8s.resources import Resource


def dumps(obj: object) -> bytes:
    """Compact JSON, as the apiserver writes it."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def event_line(event_type: str, encoded: bytes) -> bytes:
    """The line of one event whose object is already ``encoded`` (shared by watchers)."""
    return b'{"type":"' + event_type.encode() + b'","object":' + encoded + b"}\n"


def bookmark_line(view: Resource, rv: int, *, initial_end: bool = False) -> bytes:
    """A BOOKMARK at ``rv`` (``initial_end``: the one that ends ``sendInitialEvents``)."""
    meta: JSON = {"resourceVersion": str(rv)}
    if initial_end:
        meta["annotations"] = {"k8s.io/initial-events-end": "true"}
    body = {"kind": view.kind, "apiVersion": view.api_version, "metadata": meta}
    return event_line("BOOKMARK", dumps(body))


def too_old(rv: int, horizon: int) -> StoreError:
    """The 410 of a watch or list from a version older than the store keeps."""
    return StoreError.gone(f"too old resource version: {rv} ({horizon})")


def error_line(err: StoreError) -> bytes:
    """The ERROR event a watch ends with (the apiserver answers an expired version
    inside a successful watch)."""
    return event_line("ERROR", dumps(err.status()))


def selected_type(
    event_type: str, obj: JSON, previous: JSON | None, match: Callable[[JSON], bool]
) -> str | None:
    """How a watch with a selector (``match``) reports a change, as the apiserver's
    watch cache does: an object that starts matching is ADDED, one that stops is
    DELETED, one that matched before and after is MODIFIED; ``None``: not reported."""
    if event_type == "DELETED":
        return event_type if match(previous if previous is not None else obj) else None
    now = match(obj)
    before = previous is not None and event_type != "ADDED" and match(previous)
    if now and before:
        return "MODIFIED"
    if now:
        return "ADDED"
    if before:
        return "DELETED"
    return None
