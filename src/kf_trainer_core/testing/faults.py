"""Fault injection for the Kubernetes-API test server (``server.faults``).

Each fault models something a real apiserver or the network in front of it does, so
clients can be tested against it: watch streams that end early or break, compacted
resourceVersions (410), throttling and outages (429/500/503 with ``Retry-After``),
slow responses, RBAC denials (403) and restarts. Faults are configured from the test's
thread and consulted on the server's event loop, so every method is thread-safe.
"""

from __future__ import annotations

import math
import random
import threading
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol

from kf_trainer_core.testing.store import PodLogs, Store, StoreError

__all__ = ["VERBS", "FaultInjector", "ForbidRule", "resource_matches", "status_for_code"]

#: The verbs a request can have (RBAC's names).
VERBS = frozenset(
    {"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}
)

_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


class _Server(Protocol):
    """What the injector needs from the server (kept abstract to avoid an import cycle)."""

    store: Store
    logs: PodLogs

    def restart(self, downtime: float = 0.0, *, abort: bool = False) -> None: ...

    def drop_watches(self, *, abort: bool = False) -> int: ...

    def drop_log_streams(self, *, abort: bool = False) -> int: ...


def status_for_code(
    code: int, retry_after: float | None = None, message: str | None = None
) -> StoreError:
    """The error the apiserver sends for an overload/outage ``code`` (429, 500, 503, ...),
    worded as the apiserver words it. ``retry_after`` becomes a ``Retry-After`` header in
    whole seconds, rounded up (HTTP allows no fractions and urllib3 rejects them); 0 is
    allowed, for tests that want clients to retry at once."""
    reason = _REASONS.get(code, "InternalError" if code >= 500 else "BadRequest")
    seconds = None if retry_after is None else max(0, math.ceil(retry_after))
    details: dict[str, Any] | None = None
    if code == 429:
        text = message or "Too many requests, please try again later."
        # The apiserver repeats the delay in details (omitted when zero, as omitempty does).
        details = {"retryAfterSeconds": seconds} if seconds else {}
    elif code == 500:
        cause = message or "injected fault"
        text = f"Internal error occurred: {cause}"
        details = {"causes": [{"message": cause}]}
    elif code == 503:
        text = message or "the server is currently unable to handle the request"
        if seconds:
            details = {"retryAfterSeconds": seconds}
    else:
        text = message or reason
    return StoreError(code, reason, text, details, retry_after=seconds)


def _matches(want: str | None, have: str) -> bool:
    return want is None or want == "*" or want == have


def resource_matches(want: str | None, resource: str, subresource: str | None) -> bool:
    """Whether a request for ``resource`` (and ``subresource``) is one ``want`` names:
    ``pods`` names pods and its subresources, ``pods/log`` only the subresource, ``*``
    or None everything."""
    if want is None or want == "*":
        return True
    if "/" in want:
        return want == f"{resource}/{subresource or ''}"
    return want == resource


@dataclass
class _Failure:
    remaining: int
    code: int
    retry_after: float | None
    verb: str | None
    resource: str | None
    message: str | None


@dataclass(frozen=True)
class _Latency:
    seconds: float
    verb: str | None
    resource: str | None


@dataclass(frozen=True)
class ForbidRule:
    """An RBAC-style denial: ``verb`` on ``resource`` (``plural`` or ``plural/sub``,
    ``*`` for any) in ``namespace`` (None: every namespace and the cluster scope)."""

    verb: str
    resource: str
    namespace: str | None = None

    def matches(
        self, verb: str, resource: str, subresource: str | None, namespace: str | None
    ) -> bool:
        """Whether a request is denied by this rule."""
        return (
            _matches(self.verb, verb)
            and resource_matches(self.resource, resource, subresource)
            and (self.namespace is None or self.namespace == namespace)
        )


class FaultInjector:
    """The faults of one server; ``clear()`` removes them all."""

    def __init__(self, server: _Server | None = None, *, seed: int | None = None) -> None:
        self._server = server
        self._lock = threading.Lock()
        self._failures: list[_Failure] = []
        self._latencies: list[_Latency] = []
        self._forbidden: list[ForbidRule] = []
        self._drop_after: int | None = None
        self._drop_probability = 0.0
        self._expire_continue = 0  # continue tokens still to expire; -1: all
        self._random = random.Random(seed)

    # ------------------------------------------------------------- watch faults

    def drop_watches(self, *, abort: bool = False) -> int:
        """End every open watch stream now (cleanly; ``abort=True`` resets the TCP
        connection instead). Returns how many were dropped."""
        return self._require_server().drop_watches(abort=abort)

    def drop_watches_after(self, n_events: int | None) -> None:
        """From now on every watch stream (open or new) ends after delivering
        ``n_events`` events (bookmarks not counted); ``None`` turns it off."""
        with self._lock:
            self._drop_after = n_events

    def drop_watch_probability(self, p: float, *, seed: int | None = None) -> None:
        """Each event is, with probability ``p``, not delivered and its stream ended
        (a connection breaking mid-stream). ``seed`` makes it repeatable."""
        if not 0.0 <= p <= 1.0:
            raise ValueError("p must be between 0 and 1")
        with self._lock:
            self._drop_probability = p
            if seed is not None:
                self._random.seed(seed)

    def drop_log_streams(self, *, abort: bool = False) -> int:
        """End every open log follow stream now (``abort=True`` resets the connection),
        as a kubelet restart or a proxy timeout does. Returns how many were dropped."""
        return self._require_server().drop_log_streams(abort=abort)

    def skew_node_clock(self, seconds: float) -> None:
        """Run the nodes' clock ``seconds`` ahead of this machine's (negative: behind):
        log lines are stamped with it and ``sinceSeconds`` is measured against it, as
        a kubelet on a node with a drifting clock does. ``clear()`` sets it back."""
        self._require_server().logs.skew = timedelta(seconds=seconds)

    def expire_resource_versions(self) -> None:
        """Compact the store: watches and lists from any older resourceVersion get 410."""
        self._require_server().store.compact()

    def expire_continue_tokens(self, n: int | None = 1) -> None:
        """The next ``n`` list requests that present a continue token get 410 Gone
        ("The provided continue parameter is too old..."), as when etcd compacted past
        the list's version between two pages (``None``: every one, until cleared)."""
        with self._lock:
            self._expire_continue = -1 if n is None else n

    def take_continue_expiry(self) -> bool:
        """Whether this continue token is to be answered as expired (consumes one)."""
        if not self._expire_continue:
            return False
        with self._lock:
            if self._expire_continue == 0:
                return False
            if self._expire_continue > 0:
                self._expire_continue -= 1
            return True

    # ------------------------------------------------------------- request faults

    def fail_next(
        self,
        n: int = 1,
        code: int = 429,
        retry_after: float | None = 1,
        verb: str | None = None,
        resource: str | None = None,
        *,
        message: str | None = None,
    ) -> None:
        """Fail the next ``n`` requests matching ``verb``/``resource`` (None: any) with
        ``code`` and a ``Retry-After`` header (None: no header)."""
        if verb is not None and verb != "*" and verb not in VERBS:
            raise ValueError(f"unknown verb {verb!r}")
        with self._lock:
            self._failures.append(_Failure(n, code, retry_after, verb, resource, message))

    def latency(self, seconds: float, verb: str | None = None, resource: str | None = None) -> None:
        """Delay every matching request by ``seconds`` (added up when several match)."""
        with self._lock:
            self._latencies.append(_Latency(seconds, verb, resource))

    def forbid(self, verb: str, resource: str, namespace: str | None = None) -> None:
        """Deny ``verb`` on ``resource`` (403 Forbidden, the apiserver's RBAC message)."""
        if verb != "*" and verb not in VERBS:
            raise ValueError(f"unknown verb {verb!r}")
        with self._lock:
            self._forbidden.append(ForbidRule(verb, resource, namespace))

    def allow(self, verb: str | None = None, resource: str | None = None) -> None:
        """Remove denials for ``verb``/``resource`` (None: all)."""
        with self._lock:
            self._forbidden = [
                r
                for r in self._forbidden
                if not (_matches(verb, r.verb) and _matches(resource, r.resource))
            ]

    def restart(self, downtime: float = 0.0, *, abort: bool = False) -> None:
        """Restart the server (same port and data, open connections dropped; ``abort``:
        reset instead of ending streams cleanly)."""
        self._require_server().restart(downtime, abort=abort)

    def clear(self) -> None:
        """Remove every fault."""
        with self._lock:
            self._failures.clear()
            self._latencies.clear()
            self._forbidden.clear()
            self._drop_after = None
            self._drop_probability = 0.0
            self._expire_continue = 0
        if self._server is not None:
            self._server.logs.skew = timedelta(0)

    # ------------------------------------------------------------- server side

    def take_failure(self, verb: str, resource: str, subresource: str | None) -> StoreError | None:
        """The injected error for this request, if one is due (consumes it)."""
        if not self._failures:  # fast path without the lock: lists are replaced, not shared
            return None
        with self._lock:
            for f in self._failures:
                if _matches(f.verb, verb) and resource_matches(f.resource, resource, subresource):
                    f.remaining -= 1
                    if f.remaining <= 0:
                        self._failures.remove(f)
                    return status_for_code(f.code, f.retry_after, f.message)
        return None

    def delay_for(self, verb: str, resource: str, subresource: str | None) -> float:
        """Seconds to delay this request."""
        if not self._latencies:
            return 0.0
        with self._lock:
            return sum(
                lat.seconds
                for lat in self._latencies
                if _matches(lat.verb, verb)
                and resource_matches(lat.resource, resource, subresource)
            )

    def forbidden(
        self, verb: str, resource: str, subresource: str | None, namespace: str | None
    ) -> bool:
        """Whether a denial rule matches this request."""
        if not self._forbidden:
            return False
        with self._lock:
            return any(r.matches(verb, resource, subresource, namespace) for r in self._forbidden)

    @property
    def drop_after(self) -> int | None:
        """Events after which each watch stream ends (None: never)."""
        return self._drop_after

    def drop_event(self) -> bool:
        """Roll the dice for one event under :meth:`drop_watch_probability`."""
        if self._drop_probability <= 0.0:
            return False
        with self._lock:
            return self._random.random() < self._drop_probability

    def _require_server(self) -> _Server:
        if self._server is None:
            raise RuntimeError("this FaultInjector is not attached to a server")
        return self._server
