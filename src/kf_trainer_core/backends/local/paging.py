"""``limit``/``continue`` for the local backend's lists, as the API server answers them.

The local store keeps no history, so a later page is read from the current state (an
apiserver reads it at the first page's version); objects are ordered by name and a
page resumes after the last name it returned, so nothing is repeated, and what was
deleted meanwhile is simply absent. Tokens never expire here.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from kf_trainer_core.backends.local.store import bad_request

JSON = dict[str, Any]


def _name(obj: JSON) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def paginate(
    items: list[JSON], meta: JSON, limit: int | None, token: str | None
) -> tuple[list[JSON], JSON]:
    """One page of ``items`` (any order) and its list metadata."""
    meta = dict(meta)
    if token:
        try:
            raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
            after = str(json.loads(raw)["start"])
        except (ValueError, KeyError, TypeError, binascii.Error):
            message = f'continue: Invalid value: "{token}": continue key is not valid'
            raise bad_request(message) from None
        items = [o for o in items if _name(o) > after]
    if not limit or limit <= 0:
        return items, meta
    items = sorted(items, key=_name)
    if len(items) > limit:
        meta["remainingItemCount"] = len(items) - limit
        items = items[:limit]
        text = json.dumps({"rv": meta.get("resourceVersion"), "start": _name(items[-1])})
        meta["continue"] = base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")
    return items, meta
