"""Structural defaulting and pruning of unknown fields, in place."""

from __future__ import annotations

import copy
from typing import Any

from kf_trainer_core.testing.crd.paths import PathT, opath
from kf_trainer_core.testing.crd.schema import MISSING, OBJECT_META_FIELDS, Node


def fill_defaults(value: Any, node: Node | None, is_root: bool = False) -> None:
    """Apply defaults in place (structuraldefaulting.Default), after removing the null
    values of fields that are neither nullable nor defaulted, as the apiserver's
    defaulter does first (PruneNonNullableNullsWithoutDefaults: ``"initializer": null``
    is stored as no initializer, not refused as a wrong type)."""
    if node is None:
        return
    if isinstance(value, dict):
        for name, raw in node.properties.items():
            if "default" not in raw or (is_root and name == "metadata"):
                continue
            current = value.get(name, MISSING)
            if current is MISSING or (current is None and not raw.get("nullable")):
                value[name] = copy.deepcopy(raw["default"])
        for key in list(value):
            if is_root and key == "metadata":
                continue
            child, _ = node.child(key)
            if child is None:
                continue
            if value[key] is None and not child.nullable:
                if "default" not in child.raw:
                    del value[key]  # a property's or a map entry's alike
                    continue
                value[key] = copy.deepcopy(child.raw["default"])
            fill_defaults(value[key], child)
    elif isinstance(value, list):
        items = node.items
        if items is None:
            return
        for index, item in enumerate(value):
            if item is None and not items.nullable:
                if "default" not in items.raw:
                    continue
                value[index] = copy.deepcopy(items.raw["default"])
            fill_defaults(value[index], items)


def prune_fields(
    value: Any,
    node: Node | None,
    path: PathT,
    found: list[str],
    *,
    remove: bool,
    is_root: bool = False,
    drop_nulls: bool = False,
) -> None:
    """Collect (and with ``remove`` delete) undeclared fields, in place."""
    if node is None:
        return
    if isinstance(value, dict):
        if node.type not in (None, "object") and not node.preserve:
            return  # a type error, reported by validate()
        for key in list(value):
            item = value[key]
            if (
                (is_root or node.embedded)
                and key in ("apiVersion", "kind")
                and node.prop(key) is None
            ):
                continue
            if (is_root or node.embedded) and key == "metadata":
                _prune_object_meta(item, (*path, "metadata"), found, remove=remove)
                continue
            child, is_entry = node.child(key)
            if child is None:
                if node.preserve or node.addl_allowed:
                    continue
                found.append(opath((*path, key)))
                if remove:
                    del value[key]
                continue
            if (
                drop_nulls
                and item is None
                and not is_entry
                and not child.nullable
                and "default" not in child.raw
            ):
                del value[key]
                continue
            prune_fields(item, child, (*path, key), found, remove=remove, drop_nulls=drop_nulls)
    elif isinstance(value, list):
        items = node.items
        for index, item in enumerate(value):
            prune_fields(item, items, (*path, index), found, remove=remove, drop_nulls=drop_nulls)


def _prune_object_meta(meta: Any, path: PathT, found: list[str], *, remove: bool) -> None:
    if not isinstance(meta, dict):
        return
    for key in list(meta):
        if key not in OBJECT_META_FIELDS:
            found.append(opath((*path, key)))
            if remove:
                del meta[key]
