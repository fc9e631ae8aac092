"""The OpenAPI schema walk of one validation: types, formats, bounds, required and
list-type invariants, combinators; nodes with CEL rules are queued for :mod:`.rules`."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any, Final

from kf_trainer_core.testing.crd.cel import go_regex
from kf_trainer_core.testing.crd.errors import OMIT, TYPE_INVALID, FieldError, go_float, go_quote
from kf_trainer_core.testing.crd.paths import Key, PathT, fpath, opath
from kf_trainer_core.testing.crd.rules import RuleJob
from kf_trainer_core.testing.crd.schema import (
    CEL_META_FIELDS,
    MISSING,
    Node,
    canonical,
    correlate_item,
    json_equal,
    json_type,
    valid_format,
)

_INT_RANGES: Final = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}
NOT_CHECKED: Final = (
    "some validation rules were not checked because the object was invalid; "
    "correct the existing errors to complete validation"
)


def _bound(value: Any) -> str:
    return go_float(float(value)) if isinstance(value, float) else str(value)


def _in_body(name: str, detail: str, value: Any) -> FieldError:
    """kube-openapi's "``<path> in body <detail>``" error."""
    return FieldError(name, "Invalid value", f"{name} in body {detail}", value)


def _wrong_type(name: str, expected: str, shown: str, value: Any) -> FieldError:
    # A blocking error: CEL rules are skipped after it.
    detail = f"{name} in body must be of type {expected}: {go_quote(shown)}"
    return FieldError(name, "Invalid value", detail, value, TYPE_INVALID)


def _too_many(name: str, limit: int, count: int) -> FieldError:
    return FieldError(
        name, "Too many", f"must have at most {limit} {'item' if limit == 1 else 'items'}", count
    )


# (bound, its exclusive flag, the words of the error): minimum and maximum checks.
_BOUNDS: Final = (
    ("minimum", "exclusiveMinimum", "greater than"),
    ("maximum", "exclusiveMaximum", "less than"),
)
# (most, least, what is counted): the size limits of objects and arrays.
_Limits = tuple[str, str, str]
_OBJECT_LIMITS: Final[_Limits] = ("maxProperties", "minProperties", "properties")
_ARRAY_LIMITS: Final[_Limits] = ("maxItems", "minItems", "items")
_COMBINATOR_DETAIL: Final = {
    "allOf": "must validate all the schemas (allOf)",
    "anyOf": "must validate at least one schema (anyOf)",
    "oneOf": "must validate one and only one schema (oneOf)",
    "not": "must not validate the schema (not)",
}


class Validation:
    """State of one :meth:`CRDSchema.validate` call."""

    def __init__(self, old_root: Any, ratcheting: bool) -> None:
        self.schema_errors: list[FieldError] = []
        self.list_errors: list[FieldError] = []
        self.jobs: list[RuleJob] = []
        self.updating = old_root is not None
        self.ratcheting = ratcheting and self.updating

    # -- schema walk ---------------------------------------------------------------

    def walk(self, value: Any, node: Node, path: PathT, old: Any, parent_unchanged: bool) -> None:
        """Validate ``value`` against ``node``; ``old`` is the correlated old value."""
        if parent_unchanged:
            unchanged = True
        elif self.ratcheting and old is not MISSING:
            unchanged = json_equal(value, old, node)
        else:
            unchanged = False
        errors = [] if (self.ratcheting and unchanged) else self.schema_errors

        if value is None:
            if not node.nullable and (node.type or node.int_or_string):
                self._type_error(node, path, value)
            return
        if not self._check_type(value, node, path):
            return
        if node.has_rules:  # queued before the children's: the apiserver's pre-order
            self.jobs.append(RuleJob(node, value, old, path, unchanged, is_root=not path))

        if "enum" in node.raw:
            allowed = node.raw["enum"] or []
            if not any(json_equal(value, a, None) for a in allowed):
                errors.append(
                    FieldError(
                        opath(path),
                        "Unsupported value",
                        "supported values: "
                        + ", ".join(
                            go_quote(a if isinstance(a, str) else json.dumps(a)) for a in allowed
                        ),
                        value,
                    )
                )
        if isinstance(value, str):
            self._check_string(value, node, path, errors)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            self._check_number(value, node, path, errors)
        elif isinstance(value, dict):
            self._check_object(value, node, path, errors)
            self._walk_object(value, node, path, old, unchanged)
        elif isinstance(value, list):
            self._check_array(value, node, path, errors)
            self._walk_array(value, node, path, old, unchanged)
        for combinator in ("allOf", "anyOf", "oneOf", "not"):
            if combinator in node.raw and not (combinator == "anyOf" and node.int_or_string):
                self._check_combinator(combinator, value, node, path, errors)

    def _type_error(self, node: Node, path: PathT, value: Any) -> None:
        expected = "integer,string" if node.int_or_string else str(node.type)
        actual = json_type(value)
        self.schema_errors.append(_wrong_type(opath(path), expected, actual, actual))

    def _check_type(self, value: Any, node: Node, path: PathT) -> bool:
        kind = json_type(value)
        if node.int_or_string:
            ok = kind in ("integer", "string")
        elif node.type is None:
            ok = True
        elif node.type == "number":
            ok = kind in ("integer", "number")
        else:
            ok = kind == node.type
        if not ok:
            self._type_error(node, path, value)
            return False
        name = opath(path)
        if kind == "integer" and node.format in _INT_RANGES:
            low, high = _INT_RANGES[node.format]
            if not low <= value <= high:
                self.schema_errors.append(_wrong_type(name, node.format, str(value), value))
                return False
        if kind == "string" and node.format and not valid_format(node.format, value):
            self.schema_errors.append(_wrong_type(name, node.format, value, value))
            return False
        return True

    @staticmethod
    def _check_string(value: str, node: Node, path: PathT, errors: list[FieldError]) -> None:
        raw = node.raw
        name = opath(path)
        if "maxLength" in raw and len(value) > raw["maxLength"]:
            limit = int(raw["maxLength"])
            unit = "byte" if limit == 1 else "bytes"
            errors.append(
                FieldError(name, "Too long", f"may not be more than {limit} {unit}", value)
            )
        if "minLength" in raw and len(value) < raw["minLength"]:
            errors.append(
                _in_body(name, f"should be at least {raw['minLength']} chars long", value)
            )
        pattern = raw.get("pattern")
        if pattern and not go_regex(pattern).search(value):
            errors.append(_in_body(name, f"should match '{pattern}'", value))

    @staticmethod
    def _check_number(value: float, node: Node, path: PathT, errors: list[FieldError]) -> None:
        raw = node.raw
        name = opath(path)
        for key, exclusive, words in _BOUNDS:
            if key not in raw:
                continue
            bound = raw[key]
            below = key == "minimum"
            if raw.get(exclusive) and (value <= bound if below else value >= bound):
                errors.append(_in_body(name, f"should be {words} {_bound(bound)}", value))
            elif value < bound if below else value > bound:
                detail = f"should be {words} or equal to {_bound(bound)}"
                errors.append(_in_body(name, detail, value))
        factor = raw.get("multipleOf")
        if factor and not float(value / factor).is_integer():
            errors.append(_in_body(name, f"should be a multiple of {_bound(factor)}", value))

    @staticmethod
    def _check_size(
        raw: dict[str, Any], name: str, size: int, limits: _Limits, errors: list[FieldError]
    ) -> None:
        # maxProperties/minProperties of objects, maxItems/minItems of arrays.
        most, least, noun = limits
        if most in raw and size > raw[most]:
            errors.append(_too_many(name, int(raw[most]), size))
        if least in raw and size < raw[least]:
            errors.append(_in_body(name, f"should have at least {raw[least]} {noun}", size))

    @classmethod
    def _check_object(
        cls, value: dict[str, Any], node: Node, path: PathT, errors: list[FieldError]
    ) -> None:
        raw = node.raw
        for required in raw.get("required") or []:
            if required not in value:
                errors.append(FieldError(opath((*path, required)), "Required value", "", OMIT))
        cls._check_size(raw, opath(path), len(value), _OBJECT_LIMITS, errors)

    def _walk_object(
        self, value: dict[str, Any], node: Node, path: PathT, old: Any, unchanged: bool
    ) -> None:
        old_map = old if isinstance(old, dict) else None
        for key in sorted(value):
            if not path and key == "metadata":
                self._walk_root_metadata(value[key], node.prop("metadata"), old_map)
                continue
            child, is_entry = node.child(key)
            if child is None:
                continue  # unknown fields are pruned, not validated
            child_old = old_map.get(key, MISSING) if old_map is not None else MISSING
            self.walk(
                value[key], child, (*path, Key(key) if is_entry else key), child_old, unchanged
            )

    def _walk_root_metadata(self, meta: Any, node: Node | None, old: dict[str, Any] | None) -> None:
        # ObjectMeta is validated by the apiserver's own code; a CRD schema may only add
        # constraints on name and generateName, which are all we check against it.
        if node is None:
            return
        if not isinstance(meta, dict):
            self._type_error(node, ("metadata",), meta)
            return
        old_meta = old.get("metadata") if old is not None else None
        for key in CEL_META_FIELDS:
            child = node.prop(key)
            if child is not None and key in meta:
                child_old = old_meta.get(key, MISSING) if isinstance(old_meta, dict) else MISSING
                self.walk(meta[key], child, ("metadata", key), child_old, False)

    def _check_array(
        self, value: list[Any], node: Node, path: PathT, errors: list[FieldError]
    ) -> None:
        raw = node.raw
        name = opath(path)
        self._check_size(raw, name, len(value), _ARRAY_LIMITS, errors)
        if raw.get("uniqueItems") and len({canonical(v) for v in value}) != len(value):
            errors.append(_in_body(name, "shouldn't contain duplicates", value))
        self._check_list_type(value, node, path)

    def _walk_array(
        self, value: list[Any], node: Node, path: PathT, old: Any, unchanged: bool
    ) -> None:
        items = node.items
        if items is None:
            return
        for index, item in enumerate(value):
            item_old = correlate_item(item, old, node) if self.updating else MISSING
            self.walk(item, items, (*path, index), item_old, unchanged)

    def _check_list_type(self, value: list[Any], node: Node, path: PathT) -> None:
        # structurallisttype.ValidateListSetsAndMaps: reported once per duplicated entry,
        # at its second occurrence (a set's item, a map's keys); never ratcheted.
        is_map = node.list_type == "map" and bool(node.map_keys)
        if node.list_type != "set" and not is_map:
            return
        seen: Counter[str] = Counter()
        for index, item in enumerate(value):
            shown = item
            if is_map:
                if not isinstance(item, dict):
                    detail = "must be an object for an array of list-type map"
                    self.list_errors.append(
                        FieldError(fpath((*path, index)), "Invalid value", detail, item)
                    )
                    return
                if any(k not in item for k in node.map_keys):
                    continue  # missing keys are "Required value" schema errors
                shown = {k: item[k] for k in node.map_keys}
            key = canonical(shown)
            seen[key] += 1
            if seen[key] == 2:
                self.list_errors.append(
                    FieldError(fpath((*path, index)), "Duplicate value", "", shown)
                )

    def _check_combinator(
        self, combinator: str, value: Any, node: Node, path: PathT, errors: list[FieldError]
    ) -> None:
        # Structural schemas allow these only as value validations (no types or
        # properties of their own), so each branch is checked with a throw-away walk.
        def passes(raw: dict[str, Any]) -> bool:
            probe = Validation(None, ratcheting=False)
            probe.walk(value, Node(raw), path, MISSING, False)
            return not (probe.schema_errors or probe.list_errors)

        if combinator == "not":
            failed = passes(node.raw["not"])
        else:
            results = [passes(branch) for branch in node.raw[combinator]]
            failed = {
                "allOf": not all(results),
                "anyOf": not any(results),
                "oneOf": results.count(True) != 1,
            }[combinator]
        if failed:
            errors.append(_in_body(opath(path), _COMBINATOR_DETAIL[combinator], ""))
