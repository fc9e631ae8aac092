"""What a watch stream says, as the apiserver says it: one ``{"type", "object"}`` JSON
line per change, BOOKMARKs carrying the version the stream has reached, an ERROR line
with a ``410 Expired`` Status when it was asked to start from a version no longer kept.
Which changes a watch reports, and as what (an object entering or leaving its selector
is ADDED or DELETED), is :meth:`.selection.Selector.reported`."""

from __future__ import annotations

import json

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
