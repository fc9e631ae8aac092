"""How the apiserver answers a list: which version it reads (``resourceVersion`` and
``resourceVersionMatch``, with their 400s, the 504 of a version from the future), and
``limit``/``continue``: objects in (namespace, name) order, a page resumes after the key
of the last object of the one before, and the token carries the list's resourceVersion
(on the test bed a later page is read at it; a token older than the store's history
answers 410; the local backend, without history, reads a later page now)."""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass

from kf_trainer_core.emulation.registry import JSON, Key, StoreError, parse_rv, sort_key


@dataclass(frozen=True)
class ListRequest:
    """Which state a list reads, from its query."""

    #: The version to read at (``resourceVersionMatch=Exact``, or a continue token's);
    #: ``None``: the current state.
    at: int | None = None
    #: The key a continued list resumes after.
    after: Key | None = None
    #: ``resourceVersionMatch=NotOlderThan`` (also implied by a version other than
    #: ``"0"`` without a match): the state read must be at least this new.
    not_older_than: int | None = None


def list_request(resource_version: str | None, match: str | None, token: str | None) -> ListRequest:
    """What a list's ``resourceVersion``, ``resourceVersionMatch`` and ``continue`` ask
    for; 400 in the apiserver's words for a combination it refuses."""
    if match and not resource_version:
        raise StoreError.bad_request(
            "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless "
            "resourceVersion is provided"
        )
    if match not in (None, "", "Exact", "NotOlderThan"):
        raise StoreError.bad_request(
            f'resourceVersionMatch: Unsupported value: "{match}": supported values: '
            '"Exact", "NotOlderThan"'
        )
    if token:
        if resource_version:
            raise StoreError.bad_request(
                "specifying resource version is not allowed when using continue"
            )
        at, after = decode_continue(token)
        return ListRequest(at=at, after=after)
    if resource_version and match == "Exact":
        return ListRequest(at=parse_rv(resource_version))
    if resource_version and resource_version != "0":
        return ListRequest(not_older_than=parse_rv(resource_version))
    return ListRequest()


def continue_expired() -> StoreError:
    """The 410 of a continue token whose version the store no longer keeps."""
    return StoreError.gone(
        "The provided continue parameter is too old to display a consistent list "
        "result. You can start a new list without the continue parameter, or use "
        "the continue token in this response to retrieve the remainder of the "
        "results. Continuing with the provided token results in an inconsistent "
        "list - objects that were created, modified, or deleted between the time "
        "the first chunk was returned and now may show up in the list."
    )


def too_large(target: int, current: int) -> StoreError:
    """The 504 of a list asked for a version the store has not reached (the apiserver
    answers it after waiting a while for the version to come)."""
    return StoreError(
        504,
        "Timeout",
        f"Too large resource version: {target}, current: {current}",
        {
            "causes": [
                {"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}
            ],
            "retryAfterSeconds": 1,
        },
        retry_after=1,
    )


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
