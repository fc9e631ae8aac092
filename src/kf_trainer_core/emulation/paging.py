"""``limit``/``continue`` as the apiserver answers a list: objects in (namespace, name)
order, a page resumes after the key of the last object of the one before, and the token
carries the list's resourceVersion (on the test bed a later page is read at it; a
token older than the store's history answers 410)."""

from __future__ import annotations

import base64
import binascii
import json

from kf_trainer_core.emulation.registry import JSON, Key, StoreError, sort_key


def encode_continue(rv: int, key: Key) -> str:
    """The continue token of a list at ``rv`` that stopped after object ``key``."""
    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": list(key)}).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_continue(token: str) -> tuple[int, Key]:
    """``(rv, key)`` of a continue token; 400 when it is not one."""
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        data = json.loads(raw)
        ns, name = data["start"]
        return int(data["rv"]), (str(ns), str(name))
    except (ValueError, KeyError, TypeError, binascii.Error):
        raise StoreError.bad_request(
            f'continue: Invalid value: "{token}": continue key is not valid'
        ) from None


def page(items: list[JSON], after: Key | None, limit: int | None) -> tuple[list[JSON], int]:
    """The page of ``items`` (sorted by :func:`sort_key`) after ``after``, at most
    ``limit`` long, and how many remain after it."""
    if after is not None:
        items = [o for o in items if sort_key(o) > after]
    if limit is not None and limit > 0 and len(items) > limit:
        return items[:limit], len(items) - limit
    return items, 0


def list_meta(rv: int, items: list[JSON], remaining: int) -> JSON:
    """A list's metadata: its version and, when objects remain, the token of the next
    page and how many there are."""
    meta: JSON = {"resourceVersion": str(rv)}
    if remaining:
        meta["continue"] = encode_continue(rv, sort_key(items[-1]))
        meta["remainingItemCount"] = remaining
    return meta
