"""Patches as the apiserver applies them: JSON merge patch (RFC 7386), the strategic
merge patch of built-in types (reduced to what the suite needs) and JSON Patch
(RFC 6902, applied by the ``jsonpatch`` library), plus a fast deep copy of JSON data.

The test server and the local backend both apply patches with these functions.
``jsonpatch`` is imported only when a JSON Patch is applied, so the local backend's
supervisor, which merges status patches, stays on the standard library.
"""

from __future__ import annotations

from typing import Any

from kf_trainer_core.base.quoting import shown

__all__ = [
    "apply_json_patch",
    "apply_merge_patch",
    "apply_strategic_merge_patch",
    "go_json_type",
    "json_copy",
]

JSON = dict[str, Any]


def json_copy(value: Any) -> Any:
    """Deep copy of JSON-shaped data (dicts, lists, scalars); several times faster than
    :func:`copy.deepcopy`, which matters because every read hands out a copy."""
    if isinstance(value, dict):
        return {k: json_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [json_copy(v) for v in value]
    return value


def go_json_type(value: Any) -> str:
    """How Go's JSON decoder names the type of ``value`` in an unmarshal error."""
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "bool"
    return "number" if isinstance(value, (int, float)) else "null"


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


_OPS = frozenset({"add", "remove", "replace", "move", "copy", "test"})


def apply_json_patch(target: Any, ops: Any) -> Any:
    """RFC 6902 JSON patch (add, remove, replace, move, copy, test); returns a new value.

    Raises :class:`ValueError` naming the failed operation and path, worded after the
    apiserver's JSON Patch library (``jsonpatch``'s own texts quote document values,
    which may be secrets, so they are not passed on)."""
    import jsonpatch
    import jsonpointer

    if not isinstance(ops, list):
        raise ValueError("a JSON patch must be a list of operations")
    doc = json_copy(target)
    for op in ops:
        if not isinstance(op, dict) or not isinstance(op.get("path"), str):
            raise ValueError("invalid operation: an operation needs an op and a path")
        kind, path = op.get("op"), op["path"]
        if kind not in _OPS:
            raise ValueError(f"unknown operation {shown(kind)}")
        if kind in ("add", "replace", "test") and "value" not in op:
            raise ValueError(f'{kind} operation does not apply: missing value for "{path}"')
        if kind in ("move", "copy") and not isinstance(op.get("from"), str):
            raise ValueError(f'{kind} operation does not apply: missing from for "{path}"')
        try:
            doc = jsonpatch.JsonPatch([op]).apply(doc, in_place=True)
        except jsonpatch.JsonPatchTestFailed:
            raise ValueError(f"testing value {path} failed") from None
        except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException) as exc:
            raise ValueError(_json_patch_failure(kind, path, op, str(exc))) from None
    return doc


def _json_patch_failure(kind: str, path: str, op: JSON, detail: str) -> str:
    where = f'"{op["from"]}" to "{path}"' if kind in ("move", "copy") else f'"{path}"'
    if "outside of list" in detail or "sequence index" in detail or "out of range" in detail:
        return f"{kind} operation does not apply: array index out of bounds at {where}"
    if kind == "remove" and "non-existent" in detail:
        return f"unable to remove nonexistent key: {path.rpartition('/')[2]}"
    if "must start with /" in detail:
        return f"{kind} operation does not apply: invalid JSON pointer {where}"
    return f"{kind} operation does not apply: doc is missing path: {where}"
