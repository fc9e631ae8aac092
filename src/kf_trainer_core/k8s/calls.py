"""What the suite asks of the API, as data: each call below names one request (read
an object, list a collection, create, patch, delete, read or follow a log, watch).
:class:`~kf_trainer_core.k8s.api.Api` performs them against a transport, which plans the
HTTP request and reads its answer; a test's request hook sees them as they go.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from kf_trainer_core.base.quoting import shown
from kf_trainer_core.k8s.resources import Resource


def _require(value: object, what: str, call: str) -> None:
    """The guard every call naming one object passes through: a missing name must never
    become a request to the collection (``DELETE …/trainjobs/`` deletes them all, a GET
    lists them). Programs check names with a friendlier message first; this is the
    floor under all of them, for both transports and the local backend."""
    if not isinstance(value, str) or not value or "/" in value or value in (".", ".."):
        raise ValueError(
            f"{call}: {what} {shown(value)} names no single object (an empty or partial name would "
            "address the whole collection). Fix: pass the object's name."
        )


def _require_namespace(namespace: object, call: str) -> None:
    """``None`` means cluster-scoped (or every namespace, for a list); an empty string
    would silently mean the same — widening a list or a selection to every namespace."""
    if namespace is not None and (not isinstance(namespace, str) or not namespace.strip()):
        raise ValueError(
            f"{call}: namespace {shown(namespace)} is empty (it would address every namespace). "
            "Fix: pass the namespace, e.g. 'default'."
        )


class _Addressed:
    """Every call that addresses objects checks, when it is made, its namespace and
    (``_names``: the field naming one object) its name — see :func:`_require`."""

    _names: ClassVar[str | None] = None

    def __post_init__(self) -> None:
        call = type(self).__name__
        if self._names is not None:
            _require(getattr(self, self._names), self._names, call)
        _require_namespace(getattr(self, "namespace"), call)  # noqa: B009 (set by subclasses)


@dataclass(frozen=True)
class _OneObject(_Addressed):
    """A call on one object of a resource type."""

    _names = "name"

    resource: Resource
    namespace: str | None
    name: str


@dataclass(frozen=True)
class Get(_OneObject):
    """Read one object. Result: the object (a dict)."""


@dataclass(frozen=True)
class GetPath:
    """Read an API path that is no object of a resource type — an aggregated API's
    view such as Kueue's ``.../localqueues/<q>/pendingworkloads``. Result: the JSON."""

    path: str
    query: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class ListObjects(_Addressed):
    """List objects. Result: the list object (``items``, ``metadata.resourceVersion``)."""

    resource: Resource
    namespace: str | None
    label_selector: str | None = None
    field_selector: str | None = None
    limit: int | None = None
    continue_token: str | None = None
    #: ``"0"``: any version the API server has in its watch cache, answered at once (a
    #: list without one waits for the cache to catch up with etcd: up to ~100 ms on a
    #: server taking writes). Not sent with a continue token.
    resource_version: str | None = None


@dataclass(frozen=True)
class Create(_Addressed):
    """Create an object, unknown fields rejected (``fieldValidation=Strict``)."""

    resource: Resource
    namespace: str | None
    body: dict[str, Any] = field(hash=False)
    field_validation: str = "Strict"


@dataclass(frozen=True)
class Patch(_OneObject):
    """Merge-patch an object (or its ``status`` subresource)."""

    body: dict[str, Any] = field(hash=False)
    subresource: str | None = None


@dataclass(frozen=True)
class Delete(_OneObject):
    """Delete an object. Result: the API's answer (object or Status).

    ``uid`` / ``resource_version`` are preconditions: the server deletes only the
    object that still has them, else answers 409 Conflict (a delete removes only the
    object it checked). ``dry_run`` asks the server to decide without deleting
    (``dryRun: [All]``): authorisation, admission and preconditions are all checked,
    so a 403 comes before anything was changed."""

    propagation: str = "Foreground"
    uid: str | None = None
    resource_version: str | None = None
    dry_run: bool = False

    def preconditions(self) -> dict[str, str]:
        """The DeleteOptions ``preconditions`` (empty when there are none)."""
        found = {"uid": self.uid, "resourceVersion": self.resource_version}
        return {k: v for k, v in found.items() if v}

    def options(self) -> dict[str, Any]:
        """The whole request as a ``DeleteOptions`` body. The API server reads a
        delete's options from its body when it has one and ignores its query then
        (``?dryRun=All`` beside a body deletes for real), so everything goes here."""
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "propagationPolicy": self.propagation,
        }
        if self.preconditions():
            body["preconditions"] = self.preconditions()
        if self.dry_run:
            body["dryRun"] = ["All"]
        return body


@dataclass(frozen=True)
class _ContainerLog(_Addressed):
    """A call on one container's log: where it starts (the last ``tail_lines``, or
    from ``since_time``) and whether each line carries its timestamp."""

    _names = "pod"

    namespace: str
    pod: str
    container: str
    tail_lines: int | None = None
    since_time: str | None = None
    timestamps: bool = False
    #: At most this many tries (``None``: the Api's retry policy). A read of a
    #: finished pod's log tries little: a node that refuses now (gone, or serving no
    #: logs) will not answer after the policy's seconds of back-off either.
    attempts: int | None = None


@dataclass(frozen=True)
class ReadLog(_ContainerLog):
    """Read a container's log. Result: the text."""

    limit_bytes: int | None = None


def watch_period(idle_timeout: float) -> int:
    """The ``timeoutSeconds`` a watch asks of the server when a silence of
    ``idle_timeout`` seconds is taken for a dead connection: three quarters of it (at
    least 1 s). The server ends the stream then (kube-apiserver 1.36 sends a bookmark
    a second or two before), so a live watch is never silent that long. Bookmarks alone
    do not ensure it: kube-apiserver sends them about once a minute, none until its
    watch cache has seen a change of the resource (the first minute of a fresh server),
    and none at all on a watch it serves without that cache (events, by default)."""
    return max(1, int(idle_timeout * 3 / 4))


@dataclass(frozen=True)
class OpenWatch(_Addressed):
    """Open a watch stream (:meth:`Api.stream <kf_trainer_core.k8s.api.Api.stream>`)."""

    resource: Resource
    namespace: str | None
    resource_version: str | None
    label_selector: str | None = None
    field_selector: str | None = None
    timeout_seconds: int = 300
    bookmarks: bool = True


@dataclass(frozen=True)
class OpenLogStream(_ContainerLog):
    """Open a following log stream (:meth:`Api.stream <kf_trainer_core.k8s.api.Api.stream>`):
    its lines carry their timestamps, where a stream that drops resumes."""

    timestamps: bool = True


Call = Get | GetPath | ListObjects | Create | Patch | Delete | ReadLog | OpenWatch | OpenLogStream
