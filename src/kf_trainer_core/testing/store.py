"""In-process object store behind the Kubernetes-API test server.

The store plays the part of etcd plus the generic apiserver registry: one global,
monotonically increasing ``resourceVersion``, optimistic concurrency, the ``status``
subresource split, ``metadata.generation``, owner-reference cascades, finalizers and a
bounded event history that watches replay from (and that :meth:`Store.compact` forgets,
so older versions answer ``410 Gone``). It has no HTTP in it: the simulated Trainer
controller uses it directly and :mod:`kf_trainer_core.testing.server` serves it.

The contract is documented in ``docs/dev/testing-store-api.md``.
"""

from __future__ import annotations

import builtins
import logging
import random
import re
import threading
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, NamedTuple

# The server speaks about the same resources as the client: one definition for both.
from kf_trainer_core.k8s.errors import status_body
from kf_trainer_core.k8s.resources import (
    CLUSTER_TRAINING_RUNTIMES,
    CONFIGMAPS,
    EVENTS,
    JOBSETS,
    NAMESPACES,
    PODS,
    SECRETS,
    SERVICEACCOUNTS,
    TRAINING_RUNTIMES,
    TRAINJOBS,
    Resource,
)
from kf_trainer_core.kueue import WORKLOADS

__all__ = [
    "CLUSTER_TRAINING_RUNTIMES",
    "CONFIGMAPS",
    "EVENTS",
    "JOBSETS",
    "NAMESPACES",
    "PODS",
    "RESOURCES",
    "SECRETS",
    "SERVICEACCOUNTS",
    "TRAINING_RUNTIMES",
    "TRAINJOBS",
    "FieldSelector",
    "LabelSelector",
    "PodLogs",
    "Resource",
    "Store",
    "StoreError",
    "WatchEvent",
    "apply_json_patch",
    "apply_merge_patch",
    "apply_strategic_merge_patch",
    "format_timestamp",
    "has_status_subresource",
    "json_copy",
    "resource_for",
]

_log = logging.getLogger(__name__)

JSON = dict[str, Any]


#: Every resource type the test server serves.
RESOURCES: tuple[Resource, ...] = (
    TRAINJOBS,
    TRAINING_RUNTIMES,
    CLUSTER_TRAINING_RUNTIMES,
    JOBSETS,
    PODS,
    EVENTS,
    SECRETS,
    CONFIGMAPS,
    NAMESPACES,
    SERVICEACCOUNTS,
)
_BY_PATH: dict[tuple[str, str, str], Resource] = {
    (r.group, r.version, r.plural): r for r in RESOURCES
}

# Types whose CRD / registry enables the status subresource (the runtimes' CRDs do not).
_STATUS_SUBRESOURCE = frozenset({TRAINJOBS, JOBSETS, PODS, NAMESPACES, WORKLOADS})
# Types without a desired state: the apiserver keeps no metadata.generation for them.
_NO_GENERATION = frozenset({EVENTS, SECRETS, CONFIGMAPS, SERVICEACCOUNTS, NAMESPACES})


def resource_for(group: str, version: str, plural: str) -> Resource | None:
    """The known :class:`Resource` served at ``group/version/plural``, or None."""
    return _BY_PATH.get((group, version, plural))


def has_status_subresource(res: Resource) -> bool:
    """Whether writes to the main resource ignore ``status`` (status subresource enabled)."""
    return res in _STATUS_SUBRESOURCE


class WatchEvent(NamedTuple):
    """One change: ``type`` is ADDED, MODIFIED, DELETED or BOOKMARK."""

    type: str
    resource: Resource
    object: dict[str, Any]


class StoreError(Exception):
    """A failure that the API answers with a metav1.Status (code, reason, message)."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        details: dict[str, Any] | None = None,
        *,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details
        #: Seconds for a ``Retry-After`` response header (429/503/504), if any.
        self.retry_after = retry_after

    def status(self) -> dict[str, Any]:
        """The ``metav1.Status`` body, shaped as the apiserver sends it."""
        return status_body(self.code, self.reason, self.message, self.details)

    def __repr__(self) -> str:
        return f"StoreError({self.code}, {self.reason!r}, {self.message!r})"

    # Constructors for the errors the registry raises, with the apiserver's wording.
    @classmethod
    def not_found(cls, res: Resource, name: str) -> StoreError:
        """``404 NotFound``: ``trainjobs.trainer.kubeflow.org "x" not found``."""
        return cls(404, "NotFound", f'{res.qualified} "{name}" not found', _details(res, name))

    @classmethod
    def already_exists(cls, res: Resource, name: str) -> StoreError:
        """``409 AlreadyExists``."""
        return cls(
            409, "AlreadyExists", f'{res.qualified} "{name}" already exists', _details(res, name)
        )

    @classmethod
    def conflict(cls, res: Resource, name: str, why: str) -> StoreError:
        """``409 Conflict`` (stale resourceVersion, failed precondition)."""
        return cls(
            409,
            "Conflict",
            f'Operation cannot be fulfilled on {res.qualified} "{name}": {why}',
            _details(res, name),
        )

    @classmethod
    def bad_request(cls, message: str) -> StoreError:
        """``400 BadRequest`` (no details, as the apiserver sends it)."""
        return cls(400, "BadRequest", message)

    @classmethod
    def gone(cls, message: str) -> StoreError:
        """``410 Expired`` (what the apiserver calls a compacted resourceVersion)."""
        return cls(410, "Expired", message)

    @classmethod
    def invalid(cls, res: Resource, name: str, causes: list[tuple[str, str, str]]) -> StoreError:
        """``422 Invalid``; ``causes`` are ``(field, reason, message)``, message without field."""
        text = "; ".join(f"{f}: {m}" for f, _, m in causes)
        if len(causes) > 1:
            text = "[" + ", ".join(f"{f}: {m}" for f, _, m in causes) + "]"
        return cls(
            422,
            "Invalid",
            f'{res.kind}{"." + res.group if res.group else ""} "{name}" is invalid: {text}',
            {
                "name": name,
                **({"group": res.group} if res.group else {}),
                "kind": res.kind,
                "causes": [{"reason": r, "message": m, "field": f} for f, r, m in causes],
            },
        )


def _go_json_type(value: Any) -> str:
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "bool"
    return "number" if isinstance(value, (int, float)) else "null"


def _details(res: Resource, name: str) -> JSON:
    # NotFound / AlreadyExists / Conflict name the *resource* (plural) in details.kind.
    d: JSON = {"name": name}
    if res.group:
        d["group"] = res.group
    d["kind"] = res.plural
    return d


# --------------------------------------------------------------------------- helpers


def json_copy(value: Any) -> Any:
    """Deep copy of JSON-shaped data (dicts, lists, scalars); several times faster than
    :func:`copy.deepcopy`, which matters because every read hands out a copy."""
    if isinstance(value, dict):
        return {k: json_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [json_copy(v) for v in value]
    return value


def _copy_obj(obj: JSON) -> JSON:
    copied: JSON = json_copy(obj)
    return copied


def format_timestamp(when: datetime | None = None) -> str:
    """RFC 3339 UTC with seconds precision, as ``metav1.Time`` serialises."""
    when = when or datetime.now(timezone.utc)
    return when.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


_DNS1123_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)
_GENERATE_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # the apiserver's alphabet (no vowels)


def _meta(obj: JSON) -> JSON:
    m = obj.get("metadata")
    if not isinstance(m, dict):
        m = {}
        obj["metadata"] = m
    return m


def _sort_key(obj: JSON) -> tuple[str, str]:
    meta = obj["metadata"]
    return (str(meta.get("namespace") or ""), str(meta["name"]))


def _parse_rv(rv: str) -> int:
    try:
        value = int(rv)
        if value < 0:
            raise ValueError(rv)
        return value
    except (TypeError, ValueError):
        raise StoreError.bad_request(
            f'resourceVersion: Invalid value: "{rv}": must be a non-negative integer'
        ) from None


# --------------------------------------------------------------------------- selectors

_LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
_SET_TERM = re.compile(r"^(\S+)\s+(in|notin)\s*\((.*)\)$")


@dataclass(frozen=True)
class _Requirement:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!"
    values: frozenset[str] = frozenset()

    def matches(self, labels: dict[str, str]) -> bool:
        present = self.key in labels
        if self.op == "exists":
            return present
        if self.op == "!":
            return not present
        value = labels.get(self.key)
        if self.op == "=":
            return present and value in self.values
        if self.op == "in":
            return present and value in self.values
        # "!=" and "notin" match objects without the label, as Kubernetes does.
        return not present or value not in self.values


def _split_terms(text: str) -> Iterator[str]:
    # Commas separate requirements except inside the parentheses of in/notin sets.
    depth, start = 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            yield text[start:i].strip()
            start = i + 1
    yield text[start:].strip()


@dataclass(frozen=True)
class LabelSelector:
    """A parsed label selector (``a=b,c!=d,e in (f,g),h notin (i),j,!k``)."""

    requirements: tuple[_Requirement, ...] = ()

    @classmethod
    def parse(cls, text: str | None) -> LabelSelector:
        """Parse; :class:`StoreError` 400 on bad syntax, as the apiserver answers."""
        if not text or not text.strip():
            return cls()
        reqs: list[_Requirement] = []
        for term in _split_terms(text):
            reqs.append(cls._parse_term(term, text))
        return cls(tuple(reqs))

    @staticmethod
    def _parse_term(term: str, whole: str) -> _Requirement:
        def bad(why: str) -> StoreError:
            return StoreError.bad_request(f"unable to parse requirement: {why}")

        if not term:
            raise bad(f"found '', expected: identifier in {whole!r}")
        key: str
        op: str
        values: list[str]
        if term.startswith("!"):
            key, op, values = term[1:].strip(), "!", []
        elif m := _SET_TERM.match(term):
            key, op = m.group(1), m.group(2)
            values = [v.strip() for v in m.group(3).split(",")]
        elif "!=" in term:
            key, _, v = term.partition("!=")
            op, values = "!=", [v.strip()]
        elif "==" in term:
            key, _, v = term.partition("==")
            op, values = "=", [v.strip()]
        elif "=" in term:
            key, _, v = term.partition("=")
            op, values = "=", [v.strip()]
        else:
            key, op, values = term, "exists", []
        key = key.strip()
        if not _LABEL_KEY.match(key) or len(key.rpartition("/")[2]) > 63:
            raise bad(
                f'key: Invalid value: "{key}": name part must consist of alphanumeric '
                "characters, '-', '_' or '.', and must start and end with an "
                "alphanumeric character"
            )
        for v in values:
            if not _LABEL_VALUE.match(v) or len(v) > 63:
                raise bad(
                    f'values[0][{key}]: Invalid value: "{v}": a valid label must be an '
                    "empty string or consist of alphanumeric characters, '-', '_' or "
                    "'.', and must start and end with an alphanumeric character"
                )
        return _Requirement(key, op, frozenset(values))

    def matches(self, labels: dict[str, str] | None) -> bool:
        """Whether an object with these labels is selected."""
        labels = labels or {}
        return all(r.matches(labels) for r in self.requirements)

    @property
    def empty(self) -> bool:
        """True when it selects everything."""
        return not self.requirements


def _get_path(obj: JSON, path: str) -> str:
    cur: Any = obj
    for part in path.split("."):
        if not isinstance(cur, dict):
            return ""
        cur = cur.get(part)
    if cur is None:
        return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return str(cur)


# Field selectors each registry supports beyond metadata.name / metadata.namespace.
_FIELDS: dict[Resource, frozenset[str]] = {
    PODS: frozenset(
        {
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        }
    ),
    EVENTS: frozenset(
        {
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        }
    ),
    SECRETS: frozenset({"type"}),
    NAMESPACES: frozenset({"status.phase"}),
}


@dataclass(frozen=True)
class FieldSelector:
    """A parsed field selector (``metadata.name=x,status.phase!=Running``)."""

    terms: tuple[tuple[str, bool, str], ...] = ()  # (field, equal?, value)

    @classmethod
    def parse(cls, text: str | None, res: Resource) -> FieldSelector:
        """Parse against the fields ``res`` supports; 400 for unknown fields."""
        if not text or not text.strip():
            return cls()
        terms: list[tuple[str, bool, str]] = []
        allowed = _FIELDS.get(res, frozenset())
        for term in _split_terms(text):
            if "!=" in term:
                f, _, v = term.partition("!=")
                eq = False
            elif "==" in term:
                f, _, v = term.partition("==")
                eq = True
            elif "=" in term:
                f, _, v = term.partition("=")
                eq = True
            else:
                raise StoreError.bad_request(
                    f"invalid selector: '{text}'; can't understand '{term}'"
                )
            f = f.strip()
            if f not in ("metadata.name", "metadata.namespace") and f not in allowed:
                if res.group:  # custom resources: the apiextensions wording
                    raise StoreError.bad_request(
                        f'"{f}" is not a known field selector: only "metadata.name", '
                        '"metadata.namespace"'
                    )
                raise StoreError.bad_request(f"field label not supported: {f}")
            terms.append((f, eq, v.strip()))
        return cls(tuple(terms))

    def matches(self, obj: JSON) -> bool:
        """Whether ``obj`` is selected."""
        return all((_get_path(obj, f) == v) == eq for f, eq, v in self.terms)

    @property
    def empty(self) -> bool:
        """True when it selects everything."""
        return not self.terms


# --------------------------------------------------------------------------- patches


def apply_merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch; returns a new value (inputs untouched)."""
    if not isinstance(patch, dict):
        return json_copy(patch)
    result: JSON = json_copy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = apply_merge_patch(result.get(key), value)
    return result


def apply_strategic_merge_patch(target: Any, patch: Any) -> Any:
    """A strategic merge patch, reduced to what the test server needs: a merge patch in
    which lists of objects that all carry ``name`` (containers, env, volumes, ports) merge
    by name, ``$patch: delete|replace`` directives are honoured and ``$setElementOrder``
    / ``$retainKeys`` hints (sent by kubectl) are dropped."""
    if not isinstance(patch, dict):
        return json_copy(patch)
    if patch.get("$patch") == "replace":
        return {k: json_copy(v) for k, v in patch.items() if k != "$patch"}
    if patch.get("$patch") == "delete":
        return None
    result: JSON = json_copy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$setElementOrder/") or key in ("$retainKeys", "$patch"):
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, list) and _merge_by_name(result.get(key), value):
            result[key] = _merge_named_lists(result.get(key) or [], value)
        elif isinstance(value, dict):
            merged = apply_strategic_merge_patch(result.get(key), value)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
        else:
            result[key] = json_copy(value)
    return result


def _merge_by_name(current: Any, patch: list[Any]) -> bool:
    items = list(patch) + (current if isinstance(current, list) else [])
    return bool(items) and all(isinstance(i, dict) and "name" in i for i in items)


def _merge_named_lists(current: list[JSON], patch: list[JSON]) -> list[JSON]:
    out = [json_copy(i) for i in current]
    index = {i["name"]: n for n, i in enumerate(out)}
    deleted: set[str] = set()
    for item in patch:
        name = item["name"]
        if item.get("$patch") == "delete":
            deleted.add(name)
        elif name in index:
            out[index[name]] = apply_strategic_merge_patch(out[index[name]], item)
        else:
            index[name] = len(out)
            out.append(apply_strategic_merge_patch({}, item))
    return [i for i in out if i["name"] not in deleted]


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise ValueError(f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _resolve(doc: Any, parts: list[str]) -> tuple[Any, str]:
    cur = doc
    for p in parts[:-1]:
        if isinstance(cur, dict):
            if p not in cur:
                raise ValueError(f"path component {p!r} not found")
            cur = cur[p]
        elif isinstance(cur, list):
            cur = cur[_index(cur, p, allow_end=False)]
        else:
            raise ValueError(f"cannot traverse into {p!r}")
    return cur, parts[-1]


def _index(lst: list[Any], token: str, *, allow_end: bool) -> int:
    if token == "-" and allow_end:
        return len(lst)
    if not token.isdigit():
        raise ValueError(f"invalid array index {token!r}")
    i = int(token)
    if i > len(lst) or (i == len(lst) and not allow_end):
        raise ValueError(f"array index {i} out of bounds")
    return i


def _json_get(doc: Any, path: str) -> Any:
    cur = doc
    for p in _pointer(path):
        if isinstance(cur, dict):
            if p not in cur:
                raise ValueError(f"path {path!r} not found")
            cur = cur[p]
        elif isinstance(cur, list):
            cur = cur[_index(cur, p, allow_end=False)]
        else:
            raise ValueError(f"path {path!r} not found")
    return cur


def apply_json_patch(target: Any, ops: Any) -> Any:
    """RFC 6902 JSON patch (add, remove, replace, move, copy, test); returns a new value.
    Raises :class:`ValueError` with a reason when an operation cannot apply."""
    if not isinstance(ops, list):
        raise ValueError("a JSON patch must be a list of operations")
    doc = json_copy(target)
    for op in ops:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise ValueError(f"invalid operation {op!r}")
        kind, path = op["op"], op["path"]
        if kind == "test":
            if _json_get(doc, path) != op.get("value"):
                raise ValueError(f"testing value {path} failed")
            continue
        if kind in ("move", "copy"):
            value = json_copy(_json_get(doc, op["from"]))
            if kind == "move":
                doc = _json_remove(doc, op["from"])
            doc = _json_add(doc, path, value)
        elif kind == "add":
            doc = _json_add(doc, path, json_copy(op.get("value")))
        elif kind == "remove":
            doc = _json_remove(doc, path)
        elif kind == "replace":
            _json_get(doc, path)  # must exist
            doc = _json_add(_json_remove(doc, path), path, json_copy(op.get("value")))
        else:
            raise ValueError(f"unknown operation {kind!r}")
    return doc


def _json_add(doc: Any, path: str, value: Any) -> Any:
    parts = _pointer(path)
    if not parts:
        return value
    parent, last = _resolve(doc, parts)
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, last, allow_end=True), value)
    else:
        raise ValueError(f"cannot add at {path!r}")
    return doc


def _json_remove(doc: Any, path: str) -> Any:
    parts = _pointer(path)
    if not parts:
        return None
    parent, last = _resolve(doc, parts)
    if isinstance(parent, dict):
        if last not in parent:
            raise ValueError(f"unable to remove nonexistent key: {last}")
        del parent[last]
    elif isinstance(parent, list):
        del parent[_index(parent, last, allow_end=False)]
    else:
        raise ValueError(f"cannot remove at {path!r}")
    return doc


# --------------------------------------------------------------------------- store

_Key = tuple[str, str]  # (namespace or "", name)
_Callback = Callable[[WatchEvent], None]
#: ``(event, previous object or None)`` listener of :meth:`Store.subscribe_changes`.
ChangeCallback = Callable[[WatchEvent, "dict[str, Any] | None"], None]
#: Admission hook: ``(resource, new object, old object or None, subresource) -> object to
#: store``; raises :class:`StoreError` to reject. Runs under the store lock.
Admission = Callable[
    [Resource, "dict[str, Any]", "dict[str, Any] | None", "str | None"], "dict[str, Any]"
]


@dataclass
class _HistoryEntry:
    rv: int
    event: WatchEvent
    namespace: str
    previous: JSON | None  # the object before the change (None for ADDED)


@dataclass
class _Subscriber:
    callback: _Callback | None
    copy: bool
    changes: ChangeCallback | None = None


@dataclass
class _Pending:
    events: deque[tuple[WatchEvent, JSON | None]] = field(default_factory=deque)
    dispatching: bool = False


class Store:
    """Thread-safe (one RLock) object store with a single global, monotonically increasing
    resourceVersion (stringified int), like etcd behind an apiserver.

    Every method returns deep copies; objects held inside are never mutated in place,
    so history entries and watch events can share them safely.
    """

    def __init__(self, *, history_limit: int = 100_000) -> None:
        self.lock = threading.RLock()
        self._data: dict[Resource, dict[_Key, JSON]] = {}
        self._rv = 0
        self._history: deque[_HistoryEntry] = deque()
        self._history_limit = history_limit
        self._horizon = 0  # history holds every change with rv > horizon
        self._owners: dict[str, set[tuple[Resource, _Key]]] = {}  # owner uid -> dependents
        self._subscribers: list[_Subscriber] = []
        self._pending = _Pending()
        self._qlock = threading.Lock()

    # ---------------------------------------------------------------- reads

    @property
    def current_resource_version(self) -> str:
        """The latest committed resourceVersion."""
        return str(self._rv)

    @property
    def oldest_resource_version(self) -> str:
        """Versions older than this answer 410 Gone on watch/list-at-version."""
        return str(self._horizon)

    def _bucket(self, res: Resource) -> dict[_Key, JSON]:
        b = self._data.get(res)
        if b is None:
            b = self._data[res] = {}
        return b

    def _key(self, res: Resource, namespace: str | None, name: str) -> _Key:
        return ((namespace or "") if res.namespaced else "", name)

    def get(self, res: Resource, namespace: str | None, name: str) -> dict[str, Any]:
        """The object; :class:`StoreError` 404 when absent."""
        obj = self.try_get(res, namespace, name)
        if obj is None:
            raise StoreError.not_found(res, name)
        return obj

    def try_get(self, res: Resource, namespace: str | None, name: str) -> dict[str, Any] | None:
        """The object, or None when absent."""
        with self.lock:
            obj = self._bucket(res).get(self._key(res, namespace, name))
            return _copy_obj(obj) if obj is not None else None

    def list(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> tuple[builtins.list[dict[str, Any]], str]:
        """Objects sorted by (namespace, name), and the list's resourceVersion.
        ``namespace=None`` lists every namespace."""
        ls = LabelSelector.parse(label_selector)
        fs = FieldSelector.parse(field_selector, res)
        with self.lock:
            items = self._select(self._bucket(res), res, namespace, ls, fs)
            return [json_copy(o) for o in items], str(self._rv)

    def list_at(
        self,
        res: Resource,
        namespace: str | None,
        resource_version: str,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> tuple[builtins.list[dict[str, Any]], str]:
        """The list as it was at ``resource_version`` (``resourceVersionMatch=Exact``),
        rebuilt from history; 410 when that version was compacted, 504-style
        ``Timeout`` when it lies in the future."""
        ls = LabelSelector.parse(label_selector)
        fs = FieldSelector.parse(field_selector, res)
        target = _parse_rv(resource_version)
        with self.lock:
            if target > self._rv:
                raise self._too_large(target)
            if target < self._horizon:
                raise StoreError.gone(f"too old resource version: {target} ({self._horizon})")
            items = self._select(self._state_at(res, target), res, namespace, ls, fs)
            return [json_copy(o) for o in items], str(target)

    def page(
        self,
        res: Resource,
        namespace: str | None,
        *,
        resource_version: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        after: tuple[str, str] | None = None,
        limit: int | None = None,
    ) -> tuple[builtins.list[dict[str, Any]], str, int]:
        """One page of a list — objects after the (namespace, name) key ``after``, at
        most ``limit`` — at ``resource_version`` (None: now). Returns the page, the
        list's version and how many objects remain after it. Only the page is copied:
        paging through a namespace of 10,000 large objects costs each page its size."""
        ls = LabelSelector.parse(label_selector)
        fs = FieldSelector.parse(field_selector, res)
        with self.lock:
            if resource_version is None:
                state, list_rv = self._bucket(res), str(self._rv)
            else:
                target = _parse_rv(resource_version)
                if target > self._rv:
                    raise self._too_large(target)
                if target < self._horizon:
                    raise StoreError.gone(f"too old resource version: {target} ({self._horizon})")
                state = self._state_at(res, target)
                list_rv = str(target)
            items = self._select(state, res, namespace, ls, fs)
            if after is not None:
                items = [o for o in items if _sort_key(o) > after]
            remaining = 0
            if limit is not None and limit > 0 and len(items) > limit:
                remaining = len(items) - limit
                items = items[:limit]
            return [json_copy(o) for o in items], list_rv, remaining

    def _state_at(self, res: Resource, target: int) -> dict[_Key, JSON]:
        # The bucket as it was at ``target``: today's, with later changes undone.
        state = dict(self._bucket(res))
        for entry in reversed(self._history):
            if entry.rv <= target:
                break
            if entry.event.resource != res:
                continue
            key = self._key(res, entry.namespace, entry.event.object["metadata"]["name"])
            if entry.previous is None:
                state.pop(key, None)
            else:
                state[key] = entry.previous
        return state

    def _too_large(self, target: int) -> StoreError:
        return StoreError(
            504,
            "Timeout",
            f"Too large resource version: {target}, current: {self._rv}",
            {
                "causes": [
                    {"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}
                ],
                "retryAfterSeconds": 1,
            },
            retry_after=1,
        )

    def check_not_older_than(self, resource_version: str) -> None:
        """``resourceVersionMatch=NotOlderThan``: the store is never behind, so only a
        version from the future fails (the apiserver answers 504 after waiting)."""
        target = _parse_rv(resource_version)
        with self.lock:
            if target > self._rv:
                raise self._too_large(target)

    @staticmethod
    def _select(
        bucket: dict[_Key, JSON],
        res: Resource,
        namespace: str | None,
        ls: LabelSelector,
        fs: FieldSelector,
    ) -> builtins.list[JSON]:
        out: builtins.list[tuple[_Key, JSON]] = []
        for key, obj in bucket.items():
            if namespace and res.namespaced and key[0] != namespace:
                continue
            if not ls.empty and not ls.matches(obj["metadata"].get("labels")):
                continue
            if not fs.empty and not fs.matches(obj):
                continue
            out.append((key, obj))
        out.sort(key=lambda kv: kv[0])
        return [o for _, o in out]

    def exists(self, res: Resource, namespace: str | None, name: str) -> bool:
        """Whether the object exists (no copy made)."""
        with self.lock:
            return self._key(res, namespace, name) in self._bucket(res)

    def count(self, res: Resource, namespace: str | None = None) -> int:
        """How many objects of ``res`` exist (in ``namespace``, or all)."""
        with self.lock:
            bucket = self._bucket(res)
            if not namespace or not res.namespaced:
                return len(bucket)
            return sum(1 for k in bucket if k[0] == namespace)

    # ---------------------------------------------------------------- writes

    def create(
        self,
        res: Resource,
        obj: dict[str, Any],
        *,
        namespace: str | None = None,
        admission: Admission | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """Store a new object: sets uid, resourceVersion, creationTimestamp,
        generation=1 and namespace; honours ``generateName``. 409 AlreadyExists when an
        object of that name exists, 422 when the name is missing or malformed.
        ``admission`` may rewrite or reject the object (the server's CRD validation);
        ``dry_run`` does everything but store it."""
        # apiVersion and kind lead, as the apiserver serialises them.
        new: JSON = {"apiVersion": res.api_version, "kind": res.kind, **json_copy(obj)}
        meta = _meta(new)
        if res.namespaced:
            ns = namespace or meta.get("namespace") or ""
            if not ns:
                raise StoreError.bad_request("the namespace of the object is required")
            meta["namespace"] = ns
        else:
            meta.pop("namespace", None)
            ns = ""
        with self.lock:
            bucket = self._bucket(res)
            if not meta.get("name") and meta.get("generateName"):
                meta["name"] = self._generate_name(bucket, ns, str(meta["generateName"]))
            name = meta.get("name")
            if not name:
                raise StoreError.invalid(
                    res,
                    "",
                    [
                        (
                            "metadata.name",
                            "FieldValueRequired",
                            "Required value: name or generateName is required",
                        )
                    ],
                )
            self._check_name(res, str(name))
            key = (ns, str(name))
            if key in bucket:
                raise StoreError.already_exists(res, str(name))
            for system in ("deletionTimestamp", "deletionGracePeriodSeconds", "managedFields"):
                meta.pop(system, None)
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = format_timestamp()
            if res not in _NO_GENERATION:
                meta["generation"] = 1
            else:
                meta.pop("generation", None)
            if admission is not None:
                new = admission(res, new, None, None)
            if dry_run:
                new["metadata"].pop("resourceVersion", None)
                return _copy_obj(new)
            self._commit(res, key, None, new, "ADDED")
        self._dispatch()
        return _copy_obj(new)

    @staticmethod
    def _generate_name(bucket: dict[_Key, JSON], ns: str, prefix: str) -> str:
        for _ in range(100):
            name = prefix + "".join(random.choices(_GENERATE_CHARS, k=5))
            if (ns, name) not in bucket:
                return name
        raise StoreError(500, "InternalError", "could not generate a unique name")

    @staticmethod
    def _check_name(res: Resource, name: str) -> None:
        if len(name) > 253 or not _DNS1123_SUBDOMAIN.match(name):
            raise StoreError.invalid(
                res,
                name,
                [
                    (
                        "metadata.name",
                        "FieldValueInvalid",
                        f'Invalid value: "{name}": a lowercase RFC 1123 subdomain must consist of '
                        "lower case alphanumeric characters, '-' or '.', and must start and end "
                        "with an alphanumeric character (e.g. 'example.com', regex used for "
                        "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*"
                        "[a-z0-9])?)*')",
                    )
                ],
            )

    def update(
        self,
        res: Resource,
        obj: dict[str, Any],
        *,
        subresource: str | None = None,
        check_rv: bool = True,
        admission: Admission | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """Replace an object (PUT).

        With ``check_rv`` a resourceVersion in ``obj`` that differs from the stored one
        gives 409 Conflict (none at all means an unconditional update, as the apiserver
        allows). ``subresource="status"`` changes only ``status``; ``None`` ignores
        ``status`` for types with a status subresource; ``"*"`` (in-process callers only)
        writes both. ``metadata.generation`` grows when anything but metadata/status
        changes. A write that changes nothing does not bump the resourceVersion.
        ``admission`` and ``dry_run`` as for :meth:`create`.
        """
        meta = obj.get("metadata") or {}
        name = str(meta.get("name") or "")
        with self.lock:
            old = self._bucket(res).get(self._key(res, meta.get("namespace"), name))
            if old is None:
                raise StoreError.not_found(res, name)
            stale = str(meta.get("resourceVersion") or old["metadata"]["resourceVersion"])
            if check_rv and stale != old["metadata"]["resourceVersion"]:
                raise StoreError.conflict(
                    res,
                    name,
                    "the object has been modified; please apply your changes to the "
                    "latest version and try again",
                )
            result = self._replace(res, old, json_copy(obj), subresource, admission, dry_run)
        self._dispatch()
        return _copy_obj(result)

    def _replace(
        self,
        res: Resource,
        old: JSON,
        new: JSON,
        subresource: str | None,
        admission: Admission | None = None,
        dry_run: bool = False,
    ) -> JSON:
        """Apply the registry's update strategy and commit; caller holds the lock."""
        old_meta = old["metadata"]
        if subresource == "status":
            # Only status moves; everything else stays as stored.
            merged = {k: v for k, v in old.items() if k != "status"}
            if "status" in new:
                merged["status"] = new["status"]
            new = json_copy(merged)
        else:
            if subresource is None and res in _STATUS_SUBRESOURCE:
                new.pop("status", None)
                if "status" in old:
                    new["status"] = json_copy(old["status"])
            new.setdefault("apiVersion", res.api_version)
            new.setdefault("kind", res.kind)
            meta = _meta(new)
            # System-owned metadata cannot be changed by clients.
            for system in (
                "uid",
                "creationTimestamp",
                "namespace",
                "name",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "generation",
            ):
                if system in old_meta:
                    meta[system] = old_meta[system]
                else:
                    meta.pop(system, None)
        if admission is not None:
            new = admission(res, new, old, subresource)
        if subresource != "status":
            meta = new["metadata"]
            if res not in _NO_GENERATION:
                ignore = ("metadata", "status")
                before = {k: v for k, v in old.items() if k not in ignore}
                after = {k: v for k, v in new.items() if k not in ignore}
                if before != after:
                    meta["generation"] = int(old_meta.get("generation", 1)) + 1
        _meta(new)["resourceVersion"] = old_meta["resourceVersion"]
        if new == old or dry_run:
            # No-op writes do not reach etcd: no new version, no event.
            return new
        key = self._key(res, old_meta.get("namespace"), old_meta["name"])
        meta = new["metadata"]
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            # The last finalizer went away: the pending deletion completes now.
            self._remove(res, key, new, "Background")
            return new
        self._commit(res, key, old, new, "MODIFIED")
        return new

    def patch(
        self,
        res: Resource,
        namespace: str | None,
        name: str,
        patch: Any,
        *,
        patch_type: str = "merge",
        subresource: str | None = None,
        admission: Admission | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """Patch an object. ``patch_type``: ``merge`` (RFC 7386), ``json`` (RFC 6902),
        ``strategic`` (merge, lists of named objects merge by name) or ``apply``
        (server-side apply, approximated as create-or-merge). A resourceVersion in the
        patched metadata acts as a precondition (409 when stale). ``admission`` and
        ``dry_run`` as for :meth:`create`."""
        if patch_type == "apply":
            return self._apply(res, namespace, name, patch, subresource, admission, dry_run)
        with self.lock:
            old = self._bucket(res).get(self._key(res, namespace, name))
            if old is None:
                raise StoreError.not_found(res, name)
            # A body of the wrong JSON type does not decode: 400, in the apiserver's words.
            if patch_type in ("merge", "strategic") and not isinstance(patch, dict):
                raise StoreError.bad_request(
                    f"json: cannot unmarshal {_go_json_type(patch)} into Go value of type "
                    "map[string]interface {}"
                )
            if patch_type == "json" and not isinstance(patch, list):
                raise StoreError.bad_request(
                    f"json: cannot unmarshal {_go_json_type(patch)} into Go value of type "
                    "jsonpatch.Patch"
                )
            try:
                if patch_type == "merge":
                    new = apply_merge_patch(old, patch)
                elif patch_type == "strategic":
                    new = apply_strategic_merge_patch(old, patch)
                elif patch_type == "json":
                    new = apply_json_patch(old, patch)
                else:
                    raise StoreError(
                        415, "UnsupportedMediaType", f"unsupported patch type {patch_type!r}"
                    )
            except ValueError as exc:
                raise StoreError(422, "Invalid", str(exc)) from None
            if not isinstance(new, dict):
                raise StoreError(422, "Invalid", "the patch did not produce an object")
            new_meta = _meta(new)
            if new_meta.get("resourceVersion") not in (None, old["metadata"]["resourceVersion"]):
                raise StoreError.conflict(
                    res,
                    name,
                    "the object has been modified; please apply your changes to the latest "
                    "version and try again",
                )
            result = self._replace(res, old, new, subresource, admission, dry_run)
        self._dispatch()
        return _copy_obj(result)

    def _apply(
        self,
        res: Resource,
        namespace: str | None,
        name: str,
        patch: Any,
        subresource: str | None,
        admission: Admission | None,
        dry_run: bool,
    ) -> JSON:
        if not isinstance(patch, dict):
            raise StoreError.bad_request("an apply patch must be an object")
        if subresource is None and self.try_get(res, namespace, name) is None:
            body = json_copy(patch)
            _meta(body)["name"] = name
            try:
                return self.create(
                    res, body, namespace=namespace, admission=admission, dry_run=dry_run
                )
            except StoreError as exc:
                if exc.reason != "AlreadyExists":
                    raise
        return self.patch(
            res,
            namespace,
            name,
            patch,
            subresource=subresource,
            admission=admission,
            dry_run=dry_run,
        )

    def mutate(
        self,
        res: Resource,
        namespace: str | None,
        name: str,
        fn: Callable[[dict[str, Any]], None],
        *,
        subresource: str | None = None,
    ) -> dict[str, Any]:
        """Read-modify-write under the lock: ``fn`` mutates a copy in place. The same
        rules as :meth:`update` apply (``subresource="status"`` for status changes, ``"*"``
        for both); no resourceVersion check since nothing can interleave."""
        with self.lock:
            old = self._bucket(res).get(self._key(res, namespace, name))
            if old is None:
                raise StoreError.not_found(res, name)
            new = json_copy(old)
            fn(new)
            result = self._replace(res, old, new, subresource)
        self._dispatch()
        return _copy_obj(result)

    def delete(
        self,
        res: Resource,
        namespace: str | None,
        name: str,
        *,
        propagation: str = "Background",
        preconditions: dict[str, Any] | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """Delete an object and return its last state.

        Dependents (``metadata.ownerReferences[].uid`` == its uid) are deleted
        recursively; ``Orphan`` strips the owner reference from them instead;
        ``Foreground`` marks the owner (deletionTimestamp + ``foregroundDeletion``
        finalizer), deletes dependents, then the owner. An object with other finalizers
        only gets a deletionTimestamp; it goes once an update removes the last one.
        ``preconditions`` (``uid``/``resourceVersion``) give 409 Conflict on mismatch.
        ``dry_run`` checks and returns the object without deleting it.
        """
        if propagation not in ("Background", "Foreground", "Orphan"):
            raise StoreError.bad_request(
                f'propagationPolicy: Unsupported value: "{propagation}": supported values: '
                '"Foreground", "Background", "Orphan"'
            )
        with self.lock:
            key = self._key(res, namespace, name)
            old = self._bucket(res).get(key)
            if old is None:
                raise StoreError.not_found(res, name)
            for field_name in ("uid", "resourceVersion"):
                want = (preconditions or {}).get(field_name)
                if want and str(want) != str(old["metadata"].get(field_name)):
                    raise StoreError.conflict(
                        res,
                        name,
                        f"Precondition failed: {field_name.capitalize()} in precondition: "
                        f"{want}, {field_name.capitalize()} in object meta: "
                        f"{old['metadata'].get(field_name)}",
                    )
            if dry_run:
                return _copy_obj(old)
            result = self._delete_locked(res, key, old, propagation)
        self._dispatch()
        return _copy_obj(result)

    def _delete_locked(self, res: Resource, key: _Key, old: JSON, propagation: str) -> JSON:
        meta = old["metadata"]
        finalizers = list(meta.get("finalizers") or [])
        if meta.get("deletionTimestamp") and propagation != "Foreground":
            return old  # already being deleted: nothing more to do
        if propagation == "Foreground" and self._owners.get(meta["uid"]):
            marked = _copy_obj(old)
            mm = marked["metadata"]
            mm.setdefault("deletionTimestamp", format_timestamp())
            mm["deletionGracePeriodSeconds"] = 0
            if "foregroundDeletion" not in finalizers:
                mm["finalizers"] = [*finalizers, "foregroundDeletion"]
                self._commit(res, key, old, marked, "MODIFIED")
            for dres, dkey in sorted(
                self._owners.get(meta["uid"], set()), key=lambda d: (d[0].plural, d[1])
            ):
                dep = self._bucket(dres).get(dkey)
                if dep is not None:
                    self._delete_locked(dres, dkey, dep, "Foreground")
            current = self._bucket(res)[key]
            done = _copy_obj(current)
            done["metadata"]["finalizers"] = [
                f for f in done["metadata"].get("finalizers", []) if f != "foregroundDeletion"
            ]
            if not done["metadata"]["finalizers"]:
                del done["metadata"]["finalizers"]
                self._remove(res, key, done, "Background")
            else:
                self._commit(res, key, current, done, "MODIFIED")
            return done
        if finalizers:
            marked = _copy_obj(old)
            marked["metadata"]["deletionTimestamp"] = format_timestamp()
            marked["metadata"]["deletionGracePeriodSeconds"] = 0
            self._commit(res, key, old, marked, "MODIFIED")
            return marked
        gone = _copy_obj(old)
        gone["metadata"].setdefault("deletionTimestamp", format_timestamp())
        gone["metadata"].setdefault("deletionGracePeriodSeconds", 0)
        self._remove(res, key, gone, propagation)
        return gone

    def _remove(self, res: Resource, key: _Key, last: JSON, propagation: str) -> None:
        """Remove the object (DELETED event), then handle its dependents."""
        self._commit(res, key, self._bucket(res)[key], last, "DELETED")
        uid = last["metadata"]["uid"]
        dependents = sorted(self._owners.pop(uid, set()), key=lambda d: (d[0].plural, d[1]))
        if res == NAMESPACES:
            # Deleting a namespace deletes everything in it.
            for other, bucket in self._data.items():
                if other.namespaced:
                    dependents.extend((other, k) for k in sorted(bucket) if k[0] == key[1])
        for dres, dkey in dependents:
            dep = self._bucket(dres).get(dkey)
            if dep is None:
                continue
            if propagation == "Orphan":
                freed = json_copy(dep)
                refs = [
                    r for r in freed["metadata"].get("ownerReferences", []) if r.get("uid") != uid
                ]
                if refs:
                    freed["metadata"]["ownerReferences"] = refs
                else:
                    freed["metadata"].pop("ownerReferences", None)
                self._commit(dres, dkey, dep, freed, "MODIFIED")
            else:
                self._delete_locked(dres, dkey, dep, "Background")

    def _commit(self, res: Resource, key: _Key, old: JSON | None, new: JSON, kind: str) -> None:
        """Write one change: new resourceVersion, owner index, history, subscribers."""
        self._rv += 1
        new["metadata"]["resourceVersion"] = str(self._rv)
        bucket = self._bucket(res)
        if kind == "DELETED":
            bucket.pop(key, None)
        else:
            bucket[key] = new
        self._index_owners(res, key, old, None if kind == "DELETED" else new)
        event = WatchEvent(kind, res, new)
        self._history.append(_HistoryEntry(self._rv, event, key[0], old))
        while len(self._history) > self._history_limit:
            self._horizon = self._history.popleft().rv
        self._pending.events.append((event, old))

    def _index_owners(self, res: Resource, key: _Key, old: JSON | None, new: JSON | None) -> None:
        def uids(o: JSON | None) -> set[str]:
            if o is None:
                return set()
            return {
                str(r.get("uid"))
                for r in o["metadata"].get("ownerReferences") or []
                if isinstance(r, dict) and r.get("uid")
            }

        before, after = uids(old), uids(new)
        for uid in before - after:
            deps = self._owners.get(uid)
            if deps is not None:
                deps.discard((res, key))
                if not deps:
                    del self._owners[uid]
        for uid in after - before:
            self._owners.setdefault(uid, set()).add((res, key))

    # ---------------------------------------------------------------- watch support

    def subscribe(
        self, callback: Callable[[WatchEvent], None], *, copy: bool = True
    ) -> Callable[[], None]:
        """Call ``callback`` after each committed change, in commit order, outside the
        lock (so it may call back into the store). Returns an unsubscribe function.
        ``copy=False`` hands over the stored object itself (faster; never mutate it)."""
        return self._add_subscriber(_Subscriber(callback, copy))

    def subscribe_changes(self, callback: ChangeCallback) -> Callable[[], None]:
        """Like :meth:`subscribe` but ``callback(event, previous)`` also gets the object
        as it was before the change (None for ADDED), uncopied: never mutate either. The
        watch fan-out uses it to tell when an object enters or leaves a selector."""
        return self._add_subscriber(_Subscriber(None, False, callback))

    def _add_subscriber(self, sub: _Subscriber) -> Callable[[], None]:
        with self._qlock:
            self._subscribers = [*self._subscribers, sub]

        def unsubscribe() -> None:
            with self._qlock:
                self._subscribers = [s for s in self._subscribers if s is not sub]

        return unsubscribe

    def _dispatch(self) -> None:
        # One thread at a time drains the queue, so subscribers see commit order even
        # when several threads write; a callback that writes (same thread) only queues.
        pending = self._pending
        with self._qlock:
            if pending.dispatching or not pending.events:
                return
            pending.dispatching = True
        try:
            while True:
                with self._qlock:
                    if not pending.events:
                        pending.dispatching = False
                        return
                    event, previous = pending.events.popleft()
                    subscribers = self._subscribers
                for sub in subscribers:
                    try:
                        if sub.changes is not None:
                            sub.changes(event, previous)
                        elif sub.callback is not None:
                            copied = json_copy(event.object) if sub.copy else event.object
                            sub.callback(event._replace(object=copied))
                    except Exception:
                        _log.exception("store subscriber %r failed", sub.callback or sub.changes)
        except BaseException:
            with self._qlock:
                pending.dispatching = False
            raise

    def events_since(
        self, res: Resource, resource_version: str, namespace: str | None = None
    ) -> builtins.list[WatchEvent]:
        """Changes to ``res`` (in ``namespace``, or all) after ``resource_version``, for
        watch replay. 410 Gone ("too old resource version: X (Y)") when that version was
        compacted."""
        events, _ = self.watch_snapshot(res, namespace, resource_version)
        return [e._replace(object=_copy_obj(e.object)) for e in events]

    def watch_snapshot(
        self, res: Resource, namespace: str | None, resource_version: str | None
    ) -> tuple[builtins.list[WatchEvent], int]:
        """Atomically: the events a new watch starts with, and the version after which
        live events continue. ``resource_version`` ``None``/``""``/``"0"`` gives
        synthetic ADDED events for the current state; otherwise the replayed history.
        Objects are not copied: never mutate them."""
        changes, start = self.replay(res, namespace, resource_version)
        return [event for event, _ in changes], start

    def replay(
        self, res: Resource, namespace: str | None, resource_version: str | None
    ) -> tuple[builtins.list[tuple[WatchEvent, JSON | None]], int]:
        """:meth:`watch_snapshot` with each event's previous object (uncopied)."""
        with self.lock:
            if resource_version in (None, "", "0"):
                ls, fs = LabelSelector(), FieldSelector()
                items = self._select(self._bucket(res), res, namespace, ls, fs)
                return [(WatchEvent("ADDED", res, o), None) for o in items], self._rv
            target = _parse_rv(str(resource_version))
            if target < self._horizon:
                raise StoreError.gone(f"too old resource version: {target} ({self._horizon})")
            out: builtins.list[tuple[WatchEvent, JSON | None]] = []
            for entry in reversed(self._history):
                if entry.rv <= target:
                    break
                if entry.event.resource != res:
                    continue
                if namespace and res.namespaced and entry.namespace != namespace:
                    continue
                out.append((entry.event, entry.previous))
            out.reverse()
            return out, max(self._rv, target)

    def compact(self) -> None:
        """Forget history (fault injection): any older version now answers 410."""
        with self.lock:
            self._history.clear()
            self._horizon = self._rv

    def reset(self) -> None:
        """Clear everything but keep the resourceVersion counter monotonic (clients that
        remember versions must not see them reused). Subscribers are kept."""
        with self.lock:
            self._data.clear()
            self._owners.clear()
            self._history.clear()
            self._horizon = self._rv
            with self._qlock:
                self._pending.events.clear()


# --------------------------------------------------------------------------- pod logs

_LogKey = tuple[str, str, str]


@dataclass
class _Stream:
    lines: list[tuple[datetime, str]] = field(default_factory=list)
    closed: bool = False


class PodLogs:
    """Container logs: line-timestamped, closable (follow streams end after draining).

    Writers (the simulated controller, tests) call :meth:`append` and :meth:`close`
    from any thread; readers poll :meth:`read_from` and register a wake-up with
    :meth:`listen` to follow without busy waiting.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._streams: dict[_LogKey, _Stream] = {}
        self._previous: dict[_LogKey, _Stream] = {}
        self._listeners: dict[_LogKey, list[Callable[[], None]]] = {}
        #: How far the nodes' clocks run ahead of this machine's (negative: behind).
        #: Log lines are stamped, and ``sinceSeconds`` measured, with the node's
        #: clock, as the kubelet does (see ``FaultInjector.skew_node_clock``).
        self.skew = timedelta(0)

    def now(self) -> datetime:
        """The nodes' clock: what stamps a log line written now."""
        return datetime.now(timezone.utc) + self.skew

    def _stream(self, key: _LogKey) -> _Stream:
        s = self._streams.get(key)
        if s is None:
            s = self._streams[key] = _Stream()
        return s

    def append(
        self,
        namespace: str,
        pod: str,
        container: str,
        text: str,
        *,
        timestamp: datetime | None = None,
    ) -> None:
        """Append one or more lines (split on newlines; a trailing newline is optional).
        Each line is stored with ``timestamp`` or now; lines in one call get distinct,
        increasing timestamps so ``sinceTime`` can tell them apart."""
        parts = text.split("\n")
        if parts and parts[-1] == "" and len(parts) > 1:
            parts.pop()
        base = (timestamp or self.now()).astimezone(timezone.utc)
        key = (namespace, pod, container)
        with self._lock:
            s = self._stream(key)
            if s.closed:
                # A new container instance started (restart): keep the old as "previous".
                self._previous[key] = s
                s = self._streams[key] = _Stream()
            for i, line in enumerate(parts):
                s.lines.append((base + timedelta(microseconds=i), line))
            listeners = list(self._listeners.get(key, ()))
        for wake in listeners:
            wake()

    def close(self, namespace: str, pod: str, container: str) -> None:
        """The container terminated: follow streams end once they have drained."""
        key = (namespace, pod, container)
        with self._lock:
            self._stream(key).closed = True
            listeners = list(self._listeners.get(key, ()))
        for wake in listeners:
            wake()

    def lines(
        self,
        namespace: str,
        pod: str,
        container: str,
        *,
        since: datetime | None = None,
        tail: int | None = None,
        previous: bool = False,
    ) -> list[tuple[datetime, str]]:
        """Stored ``(timestamp, line)`` pairs, filtered by ``since`` (inclusive) and the
        last ``tail`` lines; ``previous`` reads the prior container instance."""
        key = (namespace, pod, container)
        with self._lock:
            s = (self._previous if previous else self._streams).get(key)
            out = list(s.lines) if s else []
        if since is not None:
            out = [(t, line) for t, line in out if t >= since]
        if tail is not None:
            out = out[-tail:] if tail > 0 else []
        return out

    def read_from(
        self, namespace: str, pod: str, container: str, start: int
    ) -> tuple[list[tuple[datetime, str]], bool]:
        """Lines from index ``start`` on, and whether the stream is closed (for follow)."""
        with self._lock:
            s = self._streams.get((namespace, pod, container))
            if s is None:
                return [], False
            return s.lines[start:], s.closed

    def has_previous(self, namespace: str, pod: str, container: str) -> bool:
        """Whether a terminated earlier instance of the container left logs."""
        with self._lock:
            return (namespace, pod, container) in self._previous

    def is_closed(self, namespace: str, pod: str, container: str) -> bool:
        """Whether the container's current log stream is closed."""
        with self._lock:
            s = self._streams.get((namespace, pod, container))
            return bool(s and s.closed)

    def listen(
        self, namespace: str, pod: str, container: str, wake: Callable[[], None]
    ) -> Callable[[], None]:
        """Call ``wake()`` (from the writer's thread) on every append/close; returns an
        unregister function."""
        key = (namespace, pod, container)
        with self._lock:
            self._listeners.setdefault(key, []).append(wake)

        def unlisten() -> None:
            with self._lock:
                lst = self._listeners.get(key)
                if lst and wake in lst:
                    lst.remove(wake)
                if not lst:
                    self._listeners.pop(key, None)

        return unlisten

    def delete_pod(self, namespace: str, pod: str) -> None:
        """Forget a pod's logs (the pod was deleted); followers are woken to end."""
        with self._lock:
            keys = [k for k in self._streams if k[:2] == (namespace, pod)]
            listeners = [w for k in keys for w in self._listeners.get(k, ())]
            for k in keys:
                self._streams[k].closed = True
                del self._streams[k]
                self._previous.pop(k, None)
        for wake in listeners:
            wake()

    def reset(self) -> None:
        """Forget every log; followers are woken so they can end."""
        with self._lock:
            for s in self._streams.values():
                s.closed = True
            listeners = [w for lst in self._listeners.values() for w in lst]
            self._streams.clear()
            self._previous.clear()
        for wake in listeners:
            wake()
