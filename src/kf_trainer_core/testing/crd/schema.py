"""Schema nodes (compiled lazily from the raw OpenAPI schema), JSON helpers with
Kubernetes semantics and the string formats kube-openapi checks."""

from __future__ import annotations

import base64
import json
import re
from collections import Counter
from collections.abc import Callable
from datetime import datetime
from typing import Any, Final

from kf_trainer_core.k8s.patch import go_json_type
from kf_trainer_core.testing.crd.cel import Rule, compile_rule


class Node:
    """One schema node with lazily built children and compiled rules.

    CRDs like TrainingRuntime have ~10k schema nodes; building children on first use
    keeps loading cheap, and caching keeps repeated validation fast.
    """

    __slots__ = (
        "_props",
        "_rules",
        "_subs",
        "addl_allowed",
        "embedded",
        "format",
        "int_or_string",
        "list_type",
        "map_keys",
        "memo",
        "nullable",
        "preserve",
        "raw",
        "type",
    )

    def __init__(self, raw: dict[str, Any]) -> None:
        self.raw = raw
        self.type: str | None = raw.get("type")
        self.format: str | None = raw.get("format")
        self.nullable = bool(raw.get("nullable", False))
        self.int_or_string = bool(raw.get("x-kubernetes-int-or-string", False))
        self.preserve = bool(raw.get("x-kubernetes-preserve-unknown-fields", False))
        self.embedded = bool(raw.get("x-kubernetes-embedded-resource", False))
        self.list_type: str | None = raw.get("x-kubernetes-list-type")
        self.map_keys: list[str] = list(raw.get("x-kubernetes-list-map-keys") or [])
        addl = raw.get("additionalProperties")
        self.addl_allowed = addl is True or isinstance(addl, dict)
        self._props: dict[str, Node] = {}
        self._subs: dict[str, Node] = {}
        self._rules: list[Rule] | None = None
        self.memo: dict[tuple[str, str], tuple[bool, str | None]] = {}

    @property
    def properties(self) -> dict[str, Any]:
        props: dict[str, Any] = self.raw.get("properties") or {}
        return props

    def prop(self, name: str) -> Node | None:
        """The declared property ``name`` (not ``additionalProperties``)."""
        node = self._props.get(name)
        if node is None:
            raw = self.properties.get(name)
            if raw is None:
                return None
            node = self._props[name] = Node(raw)
        return node

    def _sub(self, key: str) -> Node | None:
        # The node of an ``items`` / ``additionalProperties`` schema, built once.
        node = self._subs.get(key)
        if node is None:
            raw = self.raw.get(key)
            if not isinstance(raw, dict):
                return None
            node = self._subs[key] = Node(raw)
        return node

    @property
    def additional(self) -> Node | None:
        return self._sub("additionalProperties")

    def child(self, name: str) -> tuple[Node | None, bool]:
        """Schema of key ``name`` in an object, and whether it is a map entry."""
        node = self.prop(name)
        if node is not None:
            return node, False
        return self.additional, True

    @property
    def items(self) -> Node | None:
        return self._sub("items")

    @property
    def rules(self) -> list[Rule]:
        if self._rules is None:
            self._rules = [compile_rule(r) for r in self.raw.get("x-kubernetes-validations") or []]
        return self._rules

    @property
    def has_rules(self) -> bool:
        return bool(self.raw.get("x-kubernetes-validations"))


class _Missing:
    __slots__ = ()


MISSING: Final = _Missing()

OBJECT_META_FIELDS: Final = frozenset(
    {
        "name",
        "generateName",
        "namespace",
        "selfLink",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "labels",
        "annotations",
        "ownerReferences",
        "finalizers",
        "managedFields",
    }
)
# Of ObjectMeta, CEL rules see only these (KEP-2876).
CEL_META_FIELDS: Final = ("name", "generateName")


def json_type(value: Any) -> str:
    """kube-openapi's name for the JSON type of ``value``: Go's decoder's name
    (:func:`~kf_trainer_core.k8s.patch.go_json_type`), except that a boolean is
    ``boolean`` and a whole number (a float such as ``2.0`` too) is ``integer``; a value
    JSON cannot hold (a YAML timestamp) is named by its Python type."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
        return "integer"
    kind = go_json_type(value)
    return type(value).__name__ if kind == "null" and value is not None else kind


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def json_equal(a: Any, b: Any, node: Node | None) -> bool:
    """Deep equality with Kubernetes semantics.

    Absent and null object fields are the same; ``1 == 1.0``; booleans never equal
    numbers; lists with ``x-kubernetes-list-type`` ``set`` or ``map`` ignore order.
    """
    if a is b:
        return True
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, dict):
        if not isinstance(b, dict):
            return False
        keys = {k for k, v in a.items() if v is not None}
        if keys != {k for k, v in b.items() if v is not None}:
            return False
        for key in keys:
            child = node.child(key)[0] if node is not None else None
            if not json_equal(a[key], b[key], child):
                return False
        return True
    if isinstance(a, list):
        if not isinstance(b, list) or len(a) != len(b):
            return False
        items = node.items if node is not None else None
        list_type = node.list_type if node is not None else None
        if list_type == "map" and node is not None and node.map_keys:
            keys_of = _map_key_getter(node.map_keys)
            by_key = {keys_of(x): x for x in b}
            return len(by_key) == len(b) and all(
                keys_of(x) in by_key and json_equal(x, by_key[keys_of(x)], items) for x in a
            )
        if list_type == "set":
            return Counter(map(canonical, a)) == Counter(map(canonical, b))
        return all(json_equal(x, y, items) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and bool(a == b)


def _map_key_getter(keys: list[str]) -> Callable[[Any], str]:
    def key_of(item: Any) -> str:
        if not isinstance(item, dict):
            return canonical(item)
        return canonical([item.get(k) for k in keys])

    return key_of


def correlate_item(item: Any, old_list: Any, node: Node) -> Any:
    """The old list item that ``item`` updates, as Kubernetes correlates them.

    Only ``map`` lists (by their keys) and ``set`` lists (by value) correlate; items of
    atomic lists have no old counterpart, so transition rules under them cannot run.
    """
    if not isinstance(old_list, list):
        return MISSING
    if node.list_type == "map" and node.map_keys and isinstance(item, dict):
        wanted = [item.get(k) for k in node.map_keys]
        for old in old_list:
            if isinstance(old, dict) and [old.get(k) for k in node.map_keys] == wanted:
                return old
        return MISSING
    if node.list_type == "set":
        for old in old_list:
            if json_equal(item, old, node.items):
                return old
    return MISSING


_DATE_TIME: Final = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-]\d{2}:\d{2})\Z"
)
_DATE: Final = re.compile(r"^(\d{4})-(\d{2})-(\d{2})\Z")


def _calendar_date(match: re.Match[str] | None) -> bool:
    # Groups 1-3 (year, month, day) name a day that exists.
    if not match:
        return False
    try:
        datetime(int(match.group(1)), int(match.group(2)), int(match.group(3)))
    except ValueError:
        return False
    return True


def _valid_date_time(text: str) -> bool:
    match = _DATE_TIME.match(text)
    if not match or not _calendar_date(match):
        return False
    hour, minute, second = (int(match.group(i)) for i in range(4, 7))
    return hour < 24 and minute < 60 and second < 61


def valid_format(fmt: str, text: str) -> bool:
    """The string formats kube-openapi checks for CRDs that matter here."""
    if fmt == "date-time":
        return _valid_date_time(text)
    if fmt == "date":
        return _calendar_date(_DATE.match(text))
    if fmt == "byte":
        try:
            base64.b64decode(text, validate=True)
        except ValueError:
            return False
        return True
    return True  # other formats are not checked (as kube-openapi ignores unknown ones)
