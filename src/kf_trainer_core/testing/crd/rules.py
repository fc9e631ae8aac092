"""Running a validation's CEL rules: conversion of JSON values to CEL, evaluation
(memoized per input), and the errors the apiserver reports for failed rules."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any, Final

from kf_trainer_core.testing.crd.cel import Rule, cel_runtime, compile_rule, project
from kf_trainer_core.testing.crd.errors import OMIT, FieldError
from kf_trainer_core.testing.crd.paths import PathT, fpath
from kf_trainer_core.testing.crd.schema import (
    CEL_META_FIELDS,
    MISSING,
    Node,
    canonical,
    json_equal,
    valid_format,
)


@dataclass
class RuleJob:
    """A node whose CEL rules run after the schema walk (if nothing blocks them)."""

    node: Node
    value: Any
    old: Any
    path: PathT
    unchanged: bool
    is_root: bool


def run_rules(jobs: list[RuleJob], ratcheting: bool) -> list[FieldError]:
    """Evaluate the collected rules, in schema pre-order as the apiserver does."""
    errors: list[FieldError] = []
    for job in jobs:
        self_value: Any = MISSING
        old_value: Any = MISSING
        for rule in job.node.rules:
            transition = rule.program.uses_old_self
            if transition and (job.old is MISSING or job.old is None):
                continue  # transition rules need a correlated old value
            if not transition and ratcheting and job.unchanged:
                continue  # ratcheting: an unchanged value keeps passing
            failure: str | None
            if rule.program.runner is None:  # self == oldSelf, done natively
                if json_equal(job.value, job.old, job.node):
                    continue
                failure = None
            elif transition:
                if self_value is MISSING:
                    self_value = _to_cel(job.value, job.node, job.is_root)
                if old_value is MISSING:
                    old_value = _to_cel(job.old, job.node, job.is_root)
                passed, failure = _evaluate(rule, {"self": self_value, "oldSelf": old_value})
                if passed:
                    continue
            else:
                passed, failure = _evaluate_memoized(job, rule)
                if passed:
                    continue
            errors.append(_rule_error(job, rule, failure))
    return errors


def _rule_error(job: RuleJob, rule: Rule, failure: str | None) -> FieldError:
    schema_type = job.node.type or ""
    if failure is not None:
        # An evaluation error is reported at the rule's node, not at its fieldPath.
        if failure == "no such overload":
            detail = (
                f"'{failure}': call arguments did not match a supported operator, function or "
                f"macro signature for rule: {rule.error_string()}"
            )
        else:
            detail = f"{failure} evaluating rule: {rule.error_string()}"
        return FieldError(fpath(job.path), "Invalid value", detail, schema_type)
    detail = rule.default_message()
    # What the error shows of the value (kube-apiserver 1.36): a scalar itself, an
    # object or a list nothing, and nothing beside a messageExpression's message (the
    # expression embeds the value where it wants it).
    shown: Any = OMIT if isinstance(job.value, (dict, list)) else job.value
    if rule.message_expression is not None and rule.message_expression.runner is not None:
        expression = rule.message_expression
        activation = {"self": _to_cel(job.value, job.node, job.is_root)}
        if expression.uses_old_self and job.old is not MISSING:
            activation["oldSelf"] = _to_cel(job.old, job.node, job.is_root)
        message, problem = cel_runtime().run(expression, activation)
        # Like the apiserver: an empty, non-string or failing messageExpression falls
        # back to message (or the "failed rule" text).
        if problem is None and isinstance(message, str) and message.strip():
            detail = str(message).strip()
            shown = OMIT
    path = fpath((*job.path, *rule.field_path))
    if rule.reason == "FieldValueForbidden":
        return FieldError(path, "Forbidden", detail, OMIT)
    if rule.reason == "FieldValueRequired":
        return FieldError(path, "Required value", detail, OMIT)
    if rule.reason == "FieldValueDuplicate":
        return FieldError(path, "Duplicate value", "", job.value)
    return FieldError(path, "Invalid value", detail, shown)


def _evaluate(rule: Rule, activation: dict[str, Any]) -> tuple[bool, str | None]:
    """Run a rule: ``(True, None)`` passed, ``(False, None)`` false, else an error."""
    result, failure = cel_runtime().run(rule.program, activation)
    if failure is not None:
        return False, failure
    if not isinstance(result, (bool, cel_runtime().types.BoolType)):
        return False, "rule did not evaluate to a boolean"
    return bool(result), None


_MEMO_LIMIT: Final = 2048


def _evaluate_memoized(job: RuleJob, rule: Rule) -> tuple[bool, str | None]:
    """Evaluate a rule without ``oldSelf``, remembering the outcome per input.

    CEL is deterministic, so the outcome is a function of the values the rule reads
    (:func:`_self_paths`). A test server validates the same few field values over and
    over (``managedBy``, a storage URI, ...), which makes most evaluations cache hits.
    The memo lives on the schema node because the same rule text can convert values
    differently at differently typed nodes.
    """
    value = project(job.value, rule.program.self_paths)
    key = (rule.program.text, canonical(value))
    memo = job.node.memo
    outcome = memo.get(key)
    if outcome is None:
        outcome = _evaluate(rule, {"self": _to_cel(value, job.node, job.is_root)})
        if len(memo) >= _MEMO_LIMIT:
            memo.clear()
        memo[key] = outcome
    return outcome


def evaluate_rule(
    rule: str | dict[str, Any],
    value: Any,
    old_value: Any = OMIT,
    *,
    schema: dict[str, Any] | None = None,
    root: bool = False,
) -> tuple[bool, str | None]:
    """Evaluate one ``x-kubernetes-validations`` rule exactly as :meth:`CRDSchema.validate` does.

    ``rule`` is the rule text or the whole entry; ``schema`` the schema node it sits on
    (it decides how values convert: doubles, timestamps, unordered lists); ``root`` marks
    a rule on the resource root (only ``metadata.name``/``generateName`` are visible).
    Returns ``(True, None)`` when the rule holds, ``(False, None)`` when it is false and
    ``(False, message)`` when evaluation fails. A rule using ``oldSelf`` needs
    ``old_value``.
    """
    compiled = compile_rule(rule if isinstance(rule, dict) else {"rule": rule})
    node = Node(schema or {})
    activation = {"self": _to_cel(value, node, root)} if compiled.program.runner else {}
    if compiled.program.uses_old_self:
        if old_value is OMIT:
            raise ValueError(f"rule {compiled.program.text!r} uses oldSelf: pass old_value")
        if compiled.program.runner is None:
            return json_equal(value, old_value, node), None
        activation["oldSelf"] = _to_cel(old_value, node, root)
    return _evaluate(compiled, activation)


def _to_cel(value: Any, node: Node | None, is_root: bool = False) -> Any:
    """Convert decoded JSON to cel-python values, guided by the schema.

    As in Kubernetes: ``number`` fields are doubles even when written as ``1``; strings
    with format ``date-time``/``date`` are timestamps, ``duration`` durations and
    ``byte`` bytes; null object fields are absent (so ``has()`` is false); the root and
    embedded resources expose only ``metadata.name`` and ``metadata.generateName``; and
    ``set``/``map`` lists compare regardless of order.
    """
    rt = cel_runtime()
    t = rt.types
    if value is None:
        return None
    if isinstance(value, bool):
        return t.BoolType(value)
    if isinstance(value, int):
        if node is not None and node.type == "number":
            return t.DoubleType(float(value))
        return t.IntType(value)
    if isinstance(value, float):
        if node is not None and node.type == "integer" and value.is_integer():
            return t.IntType(int(value))
        return t.DoubleType(value)
    if isinstance(value, str):
        fmt = node.format if node is not None and node.type == "string" else None
        try:
            if fmt in ("date-time", "date") and valid_format(fmt, value):
                return t.TimestampType(value if fmt == "date-time" else f"{value}T00:00:00Z")
            if fmt == "duration":
                return t.DurationType(value)
            if fmt == "byte":
                return t.BytesType(base64.b64decode(value))
        except (ValueError, TypeError):
            pass  # keep it a string; the schema walk reports the bad format
        return t.StringType(value)
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if item is None:
                continue
            child = node.child(key)[0] if node is not None else None
            if (
                key == "metadata"
                and node is not None
                and (is_root or node.embedded)
                and isinstance(item, dict)
            ):
                item = {k: item[k] for k in CEL_META_FIELDS if k in item}
            out[t.StringType(key)] = _to_cel(item, child)
        return t.MapType(out)
    if isinstance(value, list):
        items = node.items if node is not None else None
        converted = [_to_cel(item, items) for item in value]
        if node is not None and node.list_type in ("set", "map"):
            return rt.unordered_list(converted)
        return t.ListType(converted)
    raise TypeError(f"cannot convert {type(value).__name__} to CEL")
