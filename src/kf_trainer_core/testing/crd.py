"""Validate custom resources against a CustomResourceDefinition the way kube-apiserver does.

This module lets tests (and the Kubernetes-API test server in this package) treat a CRD
file as the single source of truth for what the API server accepts: OpenAPI defaulting,
pruning of unknown fields, structural-schema validation, ``x-kubernetes-list-type``
invariants and the CRD's ``x-kubernetes-validations`` CEL rules, with error messages
shaped like the apiserver's 422 answers.

The upstream CRDs are *data* read at run time from a folder outside the repository
(see :func:`find_upstream`); nothing from them is copied here.

Fidelity notes (why things are done the way they are):

* Error order follows ``customResourceStrategy.Validate``: ObjectMeta checks, then
  OpenAPI schema errors, then list-type errors, then CEL rules. As in the apiserver,
  CEL rules are skipped when a "blocking" error (wrong type, bad format, unsupported
  enum value) was found, and one extra error says so.
* CEL errors carry the *schema type* as the bad value (``Invalid value: "object"``) and
  root-level rules have an empty field path, printed ``<nil>`` like ``field.Path``.
* On updates, validation ratcheting (on by default since Kubernetes 1.30) is applied:
  value errors and non-transition CEL rules are ignored for sub-trees that did not change.
* OpenAPI errors use kube-openapi's "``<path> in body ...``" details. Map entries
  (``additionalProperties``) are named ``a.b.key`` in OpenAPI errors but ``a.b[key]``
  in CEL and list-type errors, because the two apiserver code paths build paths
  differently.

CEL is evaluated with cel-python (``celpy``), imported lazily so that this module can be
imported where cel-python is not installed (only CRDs with rules need it).
"""

from __future__ import annotations

import base64
import copy
import itertools
import json
import math
import os
import re
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from functools import lru_cache
from pathlib import Path
from typing import Any, Final

import yaml

__all__ = [
    "OMIT",
    "UPSTREAM_ENV",
    "CELCompileError",
    "CRDSchema",
    "FieldError",
    "evaluate_rule",
    "find_upstream",
    "format_invalid",
    "format_unknown_fields",
    "invalid_status",
    "load_upstream_crds",
]

#: Environment variable that points at the shared upstream folder (overrides the search).
UPSTREAM_ENV: Final = "KF_TRAINER_UPSTREAM"


# --------------------------------------------------------------------------------------
# Locating the upstream data
# --------------------------------------------------------------------------------------


def find_upstream(start: Path | None = None) -> Path | None:
    """Locate the shared folder of upstream data files (CRDs, default runtimes).

    ``$KF_TRAINER_UPSTREAM`` wins when set (``None`` if it names no folder). Otherwise
    each ancestor of ``start`` (default: this file, then the working directory) is
    checked for a ``shared/upstream`` folder, i.e. ``<repo>/../shared/upstream`` for a
    checkout at ``<parent>/<repo>``. Returns ``None`` when nothing is found.
    """
    env = os.environ.get(UPSTREAM_ENV)
    if env:
        path = Path(env).expanduser()
        return path if path.is_dir() else None
    bases = [start] if start is not None else [Path(__file__), Path.cwd()]
    for base in bases:
        base = base.resolve()
        for folder in (base, *base.parents):
            candidate = folder / "shared" / "upstream"
            if candidate.is_dir():
                return candidate
    return None


# --------------------------------------------------------------------------------------
# Field errors, formatted like k8s.io/apimachinery/pkg/util/validation/field
# --------------------------------------------------------------------------------------


class _Omit:
    """Marker for "no bad value to print" (``field.OmitValueType`` in Go)."""

    _instance: _Omit | None = None

    def __new__(cls) -> _Omit:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "OMIT"


#: Use as :attr:`FieldError.value` when the error should not print a value.
OMIT: Final = _Omit()

# ErrorType.String() -> the StatusCause "reason" the apiserver reports for it.
_CAUSES: Final = {
    "Not found": "FieldValueNotFound",
    "Required value": "FieldValueRequired",
    "Duplicate value": "FieldValueDuplicate",
    "Invalid value": "FieldValueInvalid",
    "Unsupported value": "FieldValueNotSupported",
    "Forbidden": "FieldValueForbidden",
    "Too long": "FieldValueTooLong",
    "Too many": "FieldValueTooMany",
    "Internal error": "InternalError",
}
# These error types never print the bad value (see field.Error.ErrorBody).
_VALUELESS: Final = frozenset({"Required value", "Forbidden", "Too long", "Internal error"})
_TYPE_INVALID: Final = "FieldValueTypeInvalid"


@dataclass(frozen=True)
class FieldError:
    """One validation failure, as ``field.Error`` in the Kubernetes apimachinery.

    ``path`` is the field path (``spec.trainer.env[2].name``; empty for the object root,
    printed ``<nil>``), ``type`` the error type as printed (``Invalid value``, ``Required
    value``, ...), ``detail`` the human message and ``value`` the bad value (:data:`OMIT`
    to print none). ``reason`` overrides the StatusCause reason derived from ``type``
    (the apiserver reports wrong types as ``FieldValueTypeInvalid``).
    """

    path: str
    type: str
    detail: str
    value: Any = None
    reason: str | None = None

    @property
    def cause_reason(self) -> str:
        """The ``reason`` of the StatusCause the apiserver returns for this error."""
        return self.reason or _CAUSES.get(self.type, "FieldValueInvalid")

    @property
    def blocking(self) -> bool:
        """True for errors that make the apiserver skip CEL rules (wrong type, bad enum)."""
        return self.cause_reason in (_TYPE_INVALID, "FieldValueNotSupported")

    def body(self) -> str:
        """The message without the path (``field.Error.ErrorBody``)."""
        if self.type in _VALUELESS or self.value is OMIT:
            text = self.type
        else:
            text = f"{self.type}: {_go_value(self.value)}"
        if self.detail:
            text += f": {self.detail}"
        return text

    def cause(self) -> dict[str, str]:
        """This error as a ``metav1.StatusCause`` (what a 422 Status lists)."""
        return {"reason": self.cause_reason, "message": self.body(), "field": self.path}

    def __str__(self) -> str:
        return f"{self.path or '<nil>'}: {self.body()}"


def _qualified_kind(kind: str, group: str) -> str:
    return f"{kind}.{group}" if group else kind


def _aggregate(errors: list[FieldError]) -> str:
    # utilerrors.Aggregate prints one error bare and several in brackets, each message once.
    messages = list(dict.fromkeys(str(e) for e in errors))
    if len(messages) == 1:
        return messages[0]
    return "[" + ", ".join(messages) + "]"


def format_invalid(kind: str, group: str, name: str, errors: list[FieldError]) -> str:
    """The apiserver's message for a 422 Invalid answer (``apierrors.NewInvalid``).

    ``TrainJob.trainer.kubeflow.org "my-job" is invalid: [spec.a: ..., spec.b: ...]``;
    a single error is printed without brackets.
    """
    head = f"{_qualified_kind(kind, group)} {_go_quote(name)} is invalid"
    return f"{head}: {_aggregate(errors)}" if errors else head


def invalid_status(kind: str, group: str, name: str, errors: list[FieldError]) -> dict[str, Any]:
    """The full ``metav1.Status`` body of a 422 Invalid answer, causes included."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": format_invalid(kind, group, name, errors),
        "reason": "Invalid",
        "details": {
            "name": name,
            "group": group,
            "kind": kind,
            "causes": [e.cause() for e in errors],
        },
        "code": 422,
    }


def format_unknown_fields(paths: list[str]) -> str:
    """The 400 message for ``fieldValidation=Strict`` writes with undeclared fields."""
    return "strict decoding error: " + ", ".join(f"unknown field {_go_quote(p)}" for p in paths)


# Go's fmt verbs, enough of them to print bad values as the apiserver does.


def _go_quote(text: str) -> str:
    """``strconv.Quote``: printable runes kept, everything else escaped."""
    out = ['"']
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch in _GO_ESCAPES:
            out.append(_GO_ESCAPES[ch])
        elif ch.isprintable():
            out.append(ch)
        else:
            code = ord(ch)
            if code < 0x80:
                out.append(f"\\x{code:02x}")
            elif code < 0x10000:
                out.append(f"\\u{code:04x}")
            else:
                out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


_GO_ESCAPES: Final = {
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\v": "\\v",
}


def _go_float(number: float) -> str:
    """``%v`` of a float64: shortest digits, exponent form below 1e-4 or from 1e+06."""
    if math.isnan(number):
        return "NaN"
    if math.isinf(number):
        return "+Inf" if number > 0 else "-Inf"
    if number == 0:
        return "-0" if math.copysign(1.0, number) < 0 else "0"
    sign, digits, exponent = Decimal(repr(number)).normalize().as_tuple()
    assert isinstance(exponent, int)
    text = "".join(map(str, digits))
    point = len(text) + exponent  # position of the decimal point in the digit string
    minus = "-" if sign else ""
    exp = point - 1
    if exp < -4 or exp >= 6:  # strconv 'g' with shortest precision uses eprec = 6
        mantissa = text[0] + ("." + text[1:] if len(text) > 1 else "")
        return f"{minus}{mantissa}e{'+' if exp >= 0 else '-'}{abs(exp):02d}"
    if point <= 0:
        return f"{minus}0.{'0' * -point}{text}"
    if point >= len(text):
        return minus + text + "0" * (point - len(text))
    return f"{minus}{text[:point]}.{text[point:]}"


def _go_sharp(value: Any) -> str:
    """``%#v`` of a decoded JSON value (how Duplicate errors print map keys)."""
    if value is None:
        return "interface {}(nil)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _go_float(value)
    if isinstance(value, str):
        return _go_quote(value)
    if isinstance(value, dict):
        inner = ", ".join(f"{_go_quote(str(k))}:{_go_sharp(value[k])}" for k in sorted(value))
        return "map[string]interface {}{" + inner + "}"
    if isinstance(value, list):
        return "[]interface {}{" + ", ".join(_go_sharp(v) for v in value) + "}"
    return str(value)


def _go_value(value: Any) -> str:
    """The bad value as ``field.Error.ErrorBody`` prints it."""
    if value is None:
        return '"null"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _go_float(value)
    if isinstance(value, str):
        return _go_quote(value)
    return _go_sharp(value)


# --------------------------------------------------------------------------------------
# Field paths
# --------------------------------------------------------------------------------------


class _Key(str):
    """A map key (``additionalProperties``) in a path: ``[key]`` in field paths."""

    __slots__ = ()


_PathT = tuple[Any, ...]  # elements: str (field), _Key (map key), int (list index)


def _fpath(path: _PathT) -> str:
    """Render like ``field.Path.String()``: ``a.b[0][key].c``."""
    out = ""
    for part in path:
        if isinstance(part, (int, _Key)):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out


def _opath(path: _PathT) -> str:
    """Render like kube-openapi: map keys are ``.key`` rather than ``[key]``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out


_FIELD_PATH_TOKEN: Final = re.compile(
    r"\.(?P<name>[A-Za-z_$][A-Za-z0-9_$-]*)|\[\s*'(?P<key>(?:[^'\\]|\\.)*)'\s*\]|\[(?P<index>\d+)\]"
)


def _parse_field_path(text: str) -> _PathT:
    """Parse a rule's ``fieldPath`` (``.spec.x``, ``.map['key']``, ``.list[0]``)."""
    parts: list[Any] = []
    pos = 0
    while pos < len(text):
        match = _FIELD_PATH_TOKEN.match(text, pos)
        if match is None:
            raise ValueError(f"unsupported fieldPath {text!r}")
        if match.group("name") is not None:
            parts.append(match.group("name"))
        elif match.group("key") is not None:
            parts.append(_Key(re.sub(r"\\(.)", r"\1", match.group("key"))))
        else:
            parts.append(int(match.group("index")))
        pos = match.end()
    return tuple(parts)


# --------------------------------------------------------------------------------------
# CEL (cel-python) with the Kubernetes additions
# --------------------------------------------------------------------------------------


class CELCompileError(ValueError):
    """A CEL rule that cel-python cannot parse, or that calls an unsupported function."""


# Comprehension macros and macro-like functions cel-python handles itself.
_CEL_MACROS: Final = frozenset(
    {"has", "dyn", "all", "exists", "exists_one", "map", "filter", "reduce", "min"}
)

# Normalised rule texts evaluated natively instead of through cel-python. ``self ==
# oldSelf`` is by far the most common rule (56 of the 93 in the upstream CRDs); doing it
# in Python is ~100x faster and lets equality ignore the order of set/map lists, as
# Kubernetes CEL does, which cel-python's list equality cannot.
_SELF_EQ_OLD: Final = frozenset({"self==oldSelf", "oldSelf==self"})


@dataclass(frozen=True)
class _Program:
    text: str
    runner: Any  # celpy Runner, None for natively evaluated rules
    uses_old_self: bool
    # The field paths under `self` the result depends on (() = all of self); see
    # _self_paths. Used to evaluate on, and memoize by, just those values.
    self_paths: tuple[tuple[str, ...], ...]


class _CelRuntime:
    """cel-python, loaded once, with a cache of compiled programs keyed by rule text."""

    def __init__(self) -> None:
        try:
            import celpy
            from celpy import celtypes
            from celpy.evaluation import CELEvalError, base_functions
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise CELCompileError(
                "CEL rules need cel-python (pip install cel-python) to be evaluated"
            ) from exc
        self.types = celtypes
        self.eval_error: type[Exception] = CELEvalError
        # The interpreted runner: the transpiling CompiledRunner of cel-python 0.5 returns
        # Python bools from has(), which makes `!has(x)` fail, and it resolves extension
        # functions by module path; the interpreter has neither problem.
        self.env = celpy.Environment()
        # Environment() preloads protobuf wrapper-type annotations (google.protobuf.*),
        # which Kubernetes CEL never uses; every evaluation copies them, so drop them.
        self.env.annotations = {}
        self.unordered_list = type("_UnorderedList", (celtypes.ListType,), {})
        self.functions = _kubernetes_cel_library(self)
        self.known_functions = frozenset(base_functions) | frozenset(self.functions) | _CEL_MACROS
        self._lock = threading.Lock()
        self._programs: dict[str, _Program] = {}

    def compile(self, text: str) -> _Program:
        """Compile ``text`` once; raise :class:`CELCompileError` if it cannot run here."""
        program = self._programs.get(text)
        if program is not None:
            return program
        with self._lock:  # cel-python's parser is a shared, non-reentrant lark instance
            program = self._programs.get(text)
            if program is not None:
                return program
            try:
                ast = self.env.compile(text)
            except Exception as exc:
                raise CELCompileError(f"cannot compile CEL rule {text!r}: {exc}") from exc
            called: set[str] = set()
            idents: set[str] = set()
            for node in ast.iter_subtrees():
                if node.data in ("member_dot_arg", "dot_ident_arg", "ident_arg"):
                    token = node.children[1 if node.data == "member_dot_arg" else 0]
                    called.add(str(token))
                elif node.data == "ident":
                    idents.add(str(node.children[0]))
            unknown = sorted(called - self.known_functions)
            if unknown:
                raise CELCompileError(
                    f"CEL rule {text!r} calls {', '.join(unknown)}, which this validator "
                    "does not implement"
                )
            native = "".join(text.split()) in _SELF_EQ_OLD
            runner = None if native else self.env.program(ast, functions=self.functions)
            program = _Program(text, runner, "oldSelf" in idents, _self_paths(ast))
            self._programs[text] = program
            return program

    def run(self, program: _Program, activation: dict[str, Any]) -> tuple[Any, str | None]:
        """Evaluate; return ``(value, None)`` or ``(None, error text as Kubernetes words it)``."""
        try:
            return program.runner.evaluate(activation), None
        except self.eval_error as exc:
            return None, _describe_cel_error(exc)
        except Exception as exc:  # cel-python can leak plain Python errors
            return None, f"{type(exc).__name__}: {exc}"


def _self_chain(tree: Any) -> tuple[str, ...] | None:
    """``("a", "b")`` if ``tree`` is the field selection ``self.a.b``, else None."""
    data = getattr(tree, "data", None)
    if data == "ident":
        return () if str(tree.children[0]) == "self" else None
    if data == "member_dot":
        head = _self_chain(tree.children[0])
        return None if head is None else (*head, str(tree.children[1]))
    if (
        data
        in (
            "expr",
            "conditionalor",
            "conditionaland",
            "relation",
            "addition",
            "multiplication",
            "unary",
            "member",
            "primary",
        )
        and len(tree.children) == 1
    ):
        return _self_chain(tree.children[0])
    return None


def _self_paths(ast: Any) -> tuple[tuple[str, ...], ...]:
    """The parts of ``self`` a rule reads: each maximal ``self.a.b`` selection.

    Whatever a rule does with ``self.a.b`` (call methods on it, index it, test it with
    ``has()``) depends only on that sub-tree, so evaluating the rule on an object that
    keeps just these paths gives the same result. A bare ``self`` yields ``()``.
    """
    found: set[tuple[str, ...]] = set()

    def visit(tree: Any) -> None:
        chain = _self_chain(tree)
        if chain is not None:
            found.add(chain)
            return
        for child in getattr(tree, "children", ()):
            visit(child)

    visit(ast)
    kept: list[tuple[str, ...]] = []
    for path in sorted(found, key=len):  # a path covers every longer path it prefixes
        if not any(path[: len(short)] == short for short in kept):
            kept.append(path)
    return tuple(kept)


def _project(value: Any, paths: tuple[tuple[str, ...], ...]) -> Any:
    """A copy of ``value`` with only ``paths`` (absent fields stay absent)."""
    if not paths or () in paths or not isinstance(value, dict):
        return value
    out: dict[str, Any] = {}
    for path in paths:
        source: Any = value
        target = out
        for depth, name in enumerate(path):
            if not isinstance(source, dict) or name not in source:
                break
            source = source[name]
            if depth == len(path) - 1:
                target[name] = source
            else:
                existing = target.setdefault(name, {})
                if not isinstance(existing, dict) or not isinstance(source, dict):
                    target[name] = source  # not an object: keep it whole
                    break
                target = existing
    return out


def _describe_cel_error(exc: Exception) -> str:
    text = str(exc.args[0]) if exc.args else str(exc)
    missing = re.match(r"no such member in mapping: '(.*)'$", text)
    if missing:
        return f"no such key: {missing.group(1)}"
    if "no matching overload" in text or "no such overload" in text:
        return "no such overload"
    return text


_cel_runtime: _CelRuntime | None = None
_cel_runtime_lock = threading.Lock()


def _cel() -> _CelRuntime:
    global _cel_runtime
    if _cel_runtime is None:
        with _cel_runtime_lock:
            if _cel_runtime is None:
                _cel_runtime = _CelRuntime()
    return _cel_runtime


def _kubernetes_cel_library(rt: _CelRuntime) -> dict[str, Callable[..., Any]]:
    """Kubernetes' CEL additions that cel-python lacks, plus heterogeneous equality.

    cel-python has the CEL standard library (``size``, ``matches``, ``startsWith``, the
    macros, ...). Kubernetes adds the cel-go string extensions (``lowerAscii``, ``split``,
    ...), its list library (``isSorted``, ``sum``, ...) and regex ``find``/``findAll``;
    they are provided here as functions that cel-python calls for ``x.f(args)`` as well
    as ``f(x, args)``. Not provided (a rule using them fails to compile, loudly):
    ``url``, ``quantity``, ``ip``, ``cidr``, ``semver``, ``format``, ``quote`` and the
    authorizer library. ``min()`` on lists is cel-python's own macro.

    ``==``, ``!=`` and ``in`` are replaced because Kubernetes CEL compares ``1 == 1.0`` as
    true and ``1 == 'a'`` as false, where cel-python raises "no such overload", and
    because lists with ``x-kubernetes-list-type: set`` or ``map`` compare regardless of
    order (they are converted to the ``_UnorderedList`` subclass).
    """
    t = rt.types

    def plain(value: Any) -> Any:
        # celtypes wrap Python numbers; compare them as plain Python numbers.
        if isinstance(value, t.BoolType):
            return bool(value)
        if isinstance(value, float):
            return float(value)
        if isinstance(value, int):
            return int(value)
        return value

    def equal(a: Any, b: Any) -> bool:
        a_bool, b_bool = isinstance(a, t.BoolType), isinstance(b, t.BoolType)
        if a_bool or b_bool:
            return a_bool and b_bool and bool(a) == bool(b)
        if isinstance(a, (int, float)) and isinstance(b, (int, float)):
            return bool(plain(a) == plain(b))
        if a is None or b is None:
            return a is None and b is None
        if isinstance(a, dict) and isinstance(b, dict):
            return len(a) == len(b) and all(k in b and equal(v, b[k]) for k, v in a.items())
        if isinstance(a, list) and isinstance(b, list):
            if len(a) != len(b):
                return False
            if isinstance(a, rt.unordered_list) or isinstance(b, rt.unordered_list):
                rest = list(b)
                for item in a:
                    for i, other in enumerate(rest):
                        if equal(item, other):
                            del rest[i]
                            break
                    else:
                        return False
                return True
            return all(equal(x, y) for x, y in zip(a, b, strict=True))
        for kind in (str, bytes, datetime, timedelta):
            if isinstance(a, kind) and isinstance(b, kind):
                # the celtypes subclasses refuse mixed operands; compare as the base type
                return bool(kind.__eq__(a, b))  # type: ignore[operator]
        if isinstance(a, type) or isinstance(b, type):  # type values: type(x) == string
            return a is b
        return False

    def cel_eq(a: Any, b: Any) -> Any:
        return t.BoolType(equal(a, b))

    def cel_ne(a: Any, b: Any) -> Any:
        return t.BoolType(not equal(a, b))

    def cel_in(item: Any, container: Any) -> Any:
        if isinstance(container, dict):
            return t.BoolType(any(equal(item, key) for key in container))
        if isinstance(container, list):
            return t.BoolType(any(equal(item, x) for x in container))
        raise TypeError("no such overload")

    def char_at(text: Any, index: Any) -> Any:
        i = int(index)
        if i < 0 or i > len(text):
            raise IndexError(f"index out of range: {i}")
        return t.StringType(text[i : i + 1])

    def index_of(container: Any, item: Any, start: Any = 0) -> Any:
        if isinstance(container, list):
            return t.IntType(next((i for i, x in enumerate(container) if equal(x, item)), -1))
        offset = int(start)
        if offset < 0 or offset > len(container):
            raise IndexError(f"index out of range: {offset}")
        return t.IntType(str(container).find(str(item), offset))

    def last_index_of(container: Any, item: Any, end: Any = None) -> Any:
        if isinstance(container, list):
            hits = [i for i, x in enumerate(container) if equal(x, item)]
            return t.IntType(hits[-1] if hits else -1)
        text, sub = str(container), str(item)
        if end is None:
            return t.IntType(text.rfind(sub))
        offset = int(end)
        if offset < 0 or offset > len(text):
            raise IndexError(f"index out of range: {offset}")
        return t.IntType(text.rfind(sub, 0, offset + len(sub)))

    def lower_ascii(text: Any) -> Any:
        return t.StringType(str(text).translate(_ASCII_LOWER))

    def upper_ascii(text: Any) -> Any:
        return t.StringType(str(text).translate(_ASCII_UPPER))

    def replace(text: Any, old: Any, new: Any, count: Any = -1) -> Any:
        return t.StringType(str(text).replace(str(old), str(new), int(count)))

    def split(text: Any, sep: Any, limit: Any = -1) -> Any:
        s, separator, n = str(text), str(sep), int(limit)
        if n == 0:
            return t.ListType([])
        if separator == "":  # Go's strings.SplitN splits into characters
            parts = list(s) if n < 0 else [*list(s[: n - 1]), s[n - 1 :]] if s else []
        else:
            parts = s.split(separator) if n < 0 else s.split(separator, n - 1)
        return t.ListType([t.StringType(p) for p in parts])

    def substring(text: Any, start: Any, end: Any = None) -> Any:
        s = str(text)
        first, last = int(start), len(s) if end is None else int(end)
        if not 0 <= first <= last <= len(s):
            raise IndexError(f"substring range [{first}:{last}] out of bounds")
        return t.StringType(s[first:last])

    def trim(text: Any) -> Any:
        return t.StringType(str(text).strip())

    def join(items: Any, sep: Any = "") -> Any:
        return t.StringType(str(sep).join(str(x) for x in items))

    def is_sorted(items: Any) -> Any:
        values = [plain(x) for x in items]
        return t.BoolType(all(a <= b for a, b in itertools.pairwise(values)))

    def list_sum(items: Any) -> Any:
        values = [plain(x) for x in items]
        if any(isinstance(v, float) for v in values):
            return t.DoubleType(math.fsum(values))
        return t.IntType(sum(values))

    def list_max(items: Any) -> Any:
        if not items:
            raise ValueError("max of an empty list")
        best = items[0]
        for x in items[1:]:
            if plain(x) > plain(best):
                best = x
        return best

    def find(text: Any, pattern: Any) -> Any:
        match = _go_regex(str(pattern)).search(str(text))
        return t.StringType(match.group(0) if match else "")

    def find_all(text: Any, pattern: Any, limit: Any = -1) -> Any:
        found = [m.group(0) for m in _go_regex(str(pattern)).finditer(str(text))]
        n = int(limit)
        return t.ListType([t.StringType(s) for s in (found if n < 0 else found[:n])])

    return {
        "_==_": cel_eq,
        "_!=_": cel_ne,
        "_in_": cel_in,
        "charAt": char_at,
        "indexOf": index_of,
        "lastIndexOf": last_index_of,
        "lowerAscii": lower_ascii,
        "upperAscii": upper_ascii,
        "replace": replace,
        "split": split,
        "substring": substring,
        "trim": trim,
        "join": join,
        "isSorted": is_sorted,
        "sum": list_sum,
        "max": list_max,
        "find": find,
        "findAll": find_all,
    }


_ASCII_LOWER: Final = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
_ASCII_UPPER: Final = str.maketrans("abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ")


@lru_cache(maxsize=512)
def _go_regex(pattern: str) -> re.Pattern[str]:
    """Compile a Go (RE2) pattern with Python's ``re``.

    Go's ``$`` (without the m flag) matches only at the very end of the text, Python's
    also before a final newline, so ``$`` outside character classes becomes ``\\Z``.
    """
    out: list[str] = []
    in_class = False
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            nxt = pattern[i + 1]
            out.append("\\Z" if nxt == "z" and not in_class else ch + nxt)
            i += 2
            continue
        if in_class:
            in_class = ch != "]" or bool(out and out[-1] == "[")
        elif ch == "[":
            in_class = True
        elif ch == "$":
            ch = "\\Z"
        out.append(ch)
        i += 1
    # RE2's \d, \w, \s and \b are ASCII-only, Python's are Unicode-aware by default.
    return re.compile("".join(out), re.ASCII)


# --------------------------------------------------------------------------------------
# Schema nodes
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Rule:
    program: _Program
    message: str | None
    message_expression: _Program | None
    reason: str | None
    field_path: _PathT
    optional_old_self: bool

    def default_message(self) -> str:
        # ruleMessageOrDefault() in apiextensions-apiserver
        if self.message and self.message.strip():
            return self.message.strip()
        return f"failed rule: {self.program.text.strip()}"

    def error_string(self) -> str:
        # ruleErrorString()
        if self.message and self.message.strip():
            return self.message.strip()
        return self.program.text.strip()


class _Node:
    """One schema node with lazily built children and compiled rules.

    CRDs like TrainingRuntime have ~10k schema nodes; building children on first use
    keeps loading cheap, and caching keeps repeated validation fast.
    """

    __slots__ = (
        "_addl",
        "_items",
        "_props",
        "_rules",
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
        self._props: dict[str, _Node] = {}
        self._items: _Node | None = None
        self._addl: _Node | None = None
        self._rules: list[_Rule] | None = None
        self.memo: dict[tuple[str, str], tuple[bool, str | None]] = {}

    @property
    def properties(self) -> dict[str, Any]:
        props: dict[str, Any] = self.raw.get("properties") or {}
        return props

    def prop(self, name: str) -> _Node | None:
        """The declared property ``name`` (not ``additionalProperties``)."""
        node = self._props.get(name)
        if node is None:
            raw = self.properties.get(name)
            if raw is None:
                return None
            node = self._props[name] = _Node(raw)
        return node

    @property
    def additional(self) -> _Node | None:
        if self._addl is None:
            raw = self.raw.get("additionalProperties")
            if isinstance(raw, dict):
                self._addl = _Node(raw)
        return self._addl

    def child(self, name: str) -> tuple[_Node | None, bool]:
        """Schema of key ``name`` in an object, and whether it is a map entry."""
        node = self.prop(name)
        if node is not None:
            return node, False
        return self.additional, True

    @property
    def items(self) -> _Node | None:
        if self._items is None:
            raw = self.raw.get("items")
            if isinstance(raw, dict):
                self._items = _Node(raw)
        return self._items

    @property
    def rules(self) -> list[_Rule]:
        if self._rules is None:
            self._rules = [_compile_rule(r) for r in self.raw.get("x-kubernetes-validations") or []]
        return self._rules

    @property
    def has_rules(self) -> bool:
        return bool(self.raw.get("x-kubernetes-validations"))


def _compile_rule(raw: dict[str, Any]) -> _Rule:
    rt = _cel()
    text = raw.get("rule")
    if not isinstance(text, str) or not text.strip():
        raise CELCompileError(f"x-kubernetes-validations entry without a rule: {raw!r}")
    program = rt.compile(text)
    expression = raw.get("messageExpression")
    return _Rule(
        program=program,
        message=raw.get("message"),
        message_expression=rt.compile(expression) if expression else None,
        reason=raw.get("reason"),
        field_path=_parse_field_path(raw["fieldPath"]) if raw.get("fieldPath") else (),
        optional_old_self=bool(raw.get("optionalOldSelf", False)),
    )


# --------------------------------------------------------------------------------------
# JSON helpers
# --------------------------------------------------------------------------------------


class _Missing:
    __slots__ = ()


_MISSING: Final = _Missing()

_OBJECT_META_FIELDS: Final = frozenset(
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
_CEL_META_FIELDS: Final = ("name", "generateName")


def _json_type(value: Any) -> str:
    """kube-openapi's name for the JSON type of ``value``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if value.is_integer() else "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    return type(value).__name__


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def _json_equal(a: Any, b: Any, node: _Node | None) -> bool:
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
            if not _json_equal(a[key], b[key], child):
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
                keys_of(x) in by_key and _json_equal(x, by_key[keys_of(x)], items) for x in a
            )
        if list_type == "set":
            return Counter(map(_canonical, a)) == Counter(map(_canonical, b))
        return all(_json_equal(x, y, items) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and bool(a == b)


def _map_key_getter(keys: list[str]) -> Callable[[Any], str]:
    def key_of(item: Any) -> str:
        if not isinstance(item, dict):
            return _canonical(item)
        return _canonical([item.get(k) for k in keys])

    return key_of


def _correlate_item(item: Any, old_list: Any, node: _Node) -> Any:
    """The old list item that ``item`` updates, as Kubernetes correlates them.

    Only ``map`` lists (by their keys) and ``set`` lists (by value) correlate; items of
    atomic lists have no old counterpart, so transition rules under them cannot run.
    """
    if not isinstance(old_list, list):
        return _MISSING
    if node.list_type == "map" and node.map_keys and isinstance(item, dict):
        wanted = [item.get(k) for k in node.map_keys]
        for old in old_list:
            if isinstance(old, dict) and [old.get(k) for k in node.map_keys] == wanted:
                return old
        return _MISSING
    if node.list_type == "set":
        for old in old_list:
            if _json_equal(item, old, node.items):
                return old
    return _MISSING


# --------------------------------------------------------------------------------------
# ObjectMeta validation (apimachinery's ValidateObjectMeta, the parts CRs hit)
# --------------------------------------------------------------------------------------

_DNS1123_SUBDOMAIN_FMT: Final = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_DNS1123_SUBDOMAIN: Final = re.compile(rf"^{_DNS1123_SUBDOMAIN_FMT}\Z")
_QUALIFIED_NAME_FMT: Final = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_QUALIFIED_NAME: Final = re.compile(rf"^{_QUALIFIED_NAME_FMT}\Z")
_LABEL_VALUE_FMT: Final = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?"
_LABEL_VALUE: Final = re.compile(rf"^{_LABEL_VALUE_FMT}\Z")
_QUALIFIED_NAME_MSG: Final = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
    "with an alphanumeric character"
)
_ANNOTATIONS_MAX_BYTES: Final = 256 * 1024


def _regex_error(message: str, fmt: str, *examples: str) -> str:
    shown = ",  or ".join(f"'{e}'" for e in examples)
    return f"{message} (e.g. {shown}, regex used for validation is '{fmt}')"


def _dns1123_subdomain_errors(value: str) -> list[str]:
    errors = []
    if len(value) > 253:
        errors.append("must be no more than 253 characters")
    if not _DNS1123_SUBDOMAIN.match(value):
        errors.append(
            _regex_error(
                "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
                "characters, '-' or '.', and must start and end with an alphanumeric character",
                _DNS1123_SUBDOMAIN_FMT,
                "example.com",
            )
        )
    return errors


def _qualified_name_errors(value: str) -> list[str]:
    parts = value.split("/")
    errors: list[str] = []
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errors.append("prefix part must be non-empty")
        else:
            errors.extend("prefix part " + e for e in _dns1123_subdomain_errors(prefix))
    else:
        return [
            "a qualified name "
            + _regex_error(_QUALIFIED_NAME_MSG, _QUALIFIED_NAME_FMT, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if not name:
        errors.append("name part must be non-empty")
    elif len(name) > 63:
        errors.append("name part must be no more than 63 characters")
    if not _QUALIFIED_NAME.match(name):
        errors.append(
            "name part "
            + _regex_error(_QUALIFIED_NAME_MSG, _QUALIFIED_NAME_FMT, "MyName", "my.name", "123-abc")
        )
    return errors


def _validate_object_meta(meta: Any, root: _PathT = ()) -> list[FieldError]:
    """Name, labels and annotation checks the apiserver runs for every object."""
    path = _fpath((*root, "metadata"))
    if meta is None:
        meta = {}
    if not isinstance(meta, dict):
        return []  # a wrong type is reported by the schema walk
    errors: list[FieldError] = []
    name = meta.get("name")
    if not name and not meta.get("generateName"):
        errors.append(
            FieldError(f"{path}.name", "Required value", "name or generateName is required")
        )
    elif isinstance(name, str) and name:
        errors.extend(
            FieldError(f"{path}.name", "Invalid value", msg, name)
            for msg in _dns1123_subdomain_errors(name)
        )
    labels = meta.get("labels")
    if isinstance(labels, dict):
        for key in sorted(labels):
            errors.extend(
                FieldError(f"{path}.labels", "Invalid value", msg, key)
                for msg in _qualified_name_errors(key)
            )
            value = labels[key]
            if not isinstance(value, str):
                continue
            if len(value) > 63:
                errors.append(
                    FieldError(
                        f"{path}.labels",
                        "Invalid value",
                        "must be no more than 63 characters",
                        value,
                    )
                )
            if not _LABEL_VALUE.match(value):
                errors.append(
                    FieldError(
                        f"{path}.labels",
                        "Invalid value",
                        _regex_error(
                            "a valid label must be an empty string or consist of alphanumeric "
                            "characters, '-', '_' or '.', and must start and end with an "
                            "alphanumeric character",
                            _LABEL_VALUE_FMT,
                            "MyValue",
                            "my_value",
                            "12345",
                        ),
                        value,
                    )
                )
    annotations = meta.get("annotations")
    if isinstance(annotations, dict):
        size = 0
        for key in sorted(annotations):
            errors.extend(
                FieldError(f"{path}.annotations", "Invalid value", msg, key)
                for msg in _qualified_name_errors(key.lower())
            )
            size += len(key) + len(str(annotations[key] or ""))
        if size > _ANNOTATIONS_MAX_BYTES:
            errors.append(
                FieldError(
                    f"{path}.annotations",
                    "Too long",
                    f"may not be more than {_ANNOTATIONS_MAX_BYTES} bytes",
                    OMIT,
                )
            )
    return errors


# --------------------------------------------------------------------------------------
# The validator proper
# --------------------------------------------------------------------------------------

_DATE_TIME: Final = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-]\d{2}:\d{2})\Z"
)
_DATE: Final = re.compile(r"^(\d{4})-(\d{2})-(\d{2})\Z")
_INT_RANGES: Final = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}
_NOT_CHECKED: Final = (
    "some validation rules were not checked because the object was invalid; "
    "correct the existing errors to complete validation"
)


def _valid_date_time(text: str) -> bool:
    match = _DATE_TIME.match(text)
    if not match:
        return False
    try:
        datetime(int(match.group(1)), int(match.group(2)), int(match.group(3)))
    except ValueError:
        return False
    hour, minute, second = (int(match.group(i)) for i in range(4, 7))
    return hour < 24 and minute < 60 and second < 61


def _valid_format(fmt: str, text: str) -> bool:
    """The string formats kube-openapi checks for CRDs that matter here."""
    if fmt == "date-time":
        return _valid_date_time(text)
    if fmt == "date":
        match = _DATE.match(text)
        if not match:
            return False
        try:
            datetime(int(match.group(1)), int(match.group(2)), int(match.group(3)))
        except ValueError:
            return False
        return True
    if fmt == "byte":
        try:
            base64.b64decode(text, validate=True)
        except ValueError:
            return False
        return True
    return True  # other formats are not checked (as kube-openapi ignores unknown ones)


def _bound(value: Any) -> str:
    return _go_float(float(value)) if isinstance(value, float) else str(value)


@dataclass
class _Job:
    """A node whose CEL rules run after the schema walk (if nothing blocks them)."""

    node: _Node
    value: Any
    old: Any
    path: _PathT
    unchanged: bool
    is_root: bool


class _Validation:
    """State of one :meth:`CRDSchema.validate` call."""

    def __init__(self, old_root: Any, ratcheting: bool) -> None:
        self.schema_errors: list[FieldError] = []
        self.list_errors: list[FieldError] = []
        self.jobs: list[_Job] = []
        self.updating = old_root is not None
        self.ratcheting = ratcheting and self.updating

    # -- schema walk ---------------------------------------------------------------

    def walk(self, value: Any, node: _Node, path: _PathT, old: Any, parent_unchanged: bool) -> None:
        """Validate ``value`` against ``node``; ``old`` is the correlated old value."""
        if parent_unchanged:
            unchanged = True
        elif self.ratcheting and old is not _MISSING:
            unchanged = _json_equal(value, old, node)
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
            self.jobs.append(_Job(node, value, old, path, unchanged, is_root=not path))

        if "enum" in node.raw:
            allowed = node.raw["enum"] or []
            if not any(_json_equal(value, a, None) for a in allowed):
                errors.append(
                    FieldError(
                        _opath(path),
                        "Unsupported value",
                        "supported values: "
                        + ", ".join(
                            _go_quote(a if isinstance(a, str) else json.dumps(a)) for a in allowed
                        ),
                        value,
                    )
                )
        if isinstance(value, str):
            self._check_string(value, node, path, errors)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            self._check_number(value, node, path, errors)
        elif isinstance(value, dict):
            self._check_object(value, node, path, old, unchanged, errors)
        elif isinstance(value, list):
            self._check_array(value, node, path, old, unchanged, errors)
        for combinator in ("allOf", "anyOf", "oneOf", "not"):
            if combinator in node.raw and not (combinator == "anyOf" and node.int_or_string):
                self._check_combinator(combinator, value, node, path, errors)

    def _type_error(self, node: _Node, path: _PathT, value: Any) -> None:
        expected = "integer,string" if node.int_or_string else str(node.type)
        actual = _json_type(value)
        name = _opath(path)
        self.schema_errors.append(
            FieldError(
                name,
                "Invalid value",
                f"{name} in body must be of type {expected}: {_go_quote(actual)}",
                actual,
                _TYPE_INVALID,
            )
        )

    def _check_type(self, value: Any, node: _Node, path: _PathT) -> bool:
        kind = _json_type(value)
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
        name = _opath(path)
        if kind == "integer" and node.format in _INT_RANGES:
            low, high = _INT_RANGES[node.format]
            if not low <= value <= high:
                self.schema_errors.append(
                    FieldError(
                        name,
                        "Invalid value",
                        f"{name} in body must be of type {node.format}: {_go_quote(str(value))}",
                        value,
                        _TYPE_INVALID,
                    )
                )
                return False
        if kind == "string" and node.format and not _valid_format(node.format, value):
            self.schema_errors.append(
                FieldError(
                    name,
                    "Invalid value",
                    f"{name} in body must be of type {node.format}: {_go_quote(value)}",
                    value,
                    _TYPE_INVALID,
                )
            )
            return False
        return True

    @staticmethod
    def _check_string(value: str, node: _Node, path: _PathT, errors: list[FieldError]) -> None:
        raw = node.raw
        name = _opath(path)
        if "maxLength" in raw and len(value) > raw["maxLength"]:
            limit = int(raw["maxLength"])
            unit = "byte" if limit == 1 else "bytes"
            errors.append(
                FieldError(name, "Too long", f"may not be more than {limit} {unit}", value)
            )
        if "minLength" in raw and len(value) < raw["minLength"]:
            errors.append(
                FieldError(
                    name,
                    "Invalid value",
                    f"{name} in body should be at least {raw['minLength']} chars long",
                    value,
                )
            )
        pattern = raw.get("pattern")
        if pattern and not _go_regex(pattern).search(value):
            errors.append(
                FieldError(name, "Invalid value", f"{name} in body should match '{pattern}'", value)
            )

    @staticmethod
    def _check_number(value: float, node: _Node, path: _PathT, errors: list[FieldError]) -> None:
        raw = node.raw
        name = _opath(path)
        if "minimum" in raw:
            low = raw["minimum"]
            if raw.get("exclusiveMinimum") and value <= low:
                errors.append(
                    FieldError(
                        name,
                        "Invalid value",
                        f"{name} in body should be greater than {_bound(low)}",
                        value,
                    )
                )
            elif value < low:
                errors.append(
                    FieldError(
                        name,
                        "Invalid value",
                        f"{name} in body should be greater than or equal to {_bound(low)}",
                        value,
                    )
                )
        if "maximum" in raw:
            high = raw["maximum"]
            if raw.get("exclusiveMaximum") and value >= high:
                errors.append(
                    FieldError(
                        name,
                        "Invalid value",
                        f"{name} in body should be less than {_bound(high)}",
                        value,
                    )
                )
            elif value > high:
                errors.append(
                    FieldError(
                        name,
                        "Invalid value",
                        f"{name} in body should be less than or equal to {_bound(high)}",
                        value,
                    )
                )
        factor = raw.get("multipleOf")
        if factor and not float(value / factor).is_integer():
            errors.append(
                FieldError(
                    name,
                    "Invalid value",
                    f"{name} in body should be a multiple of {_bound(factor)}",
                    value,
                )
            )

    def _check_object(
        self,
        value: dict[str, Any],
        node: _Node,
        path: _PathT,
        old: Any,
        unchanged: bool,
        errors: list[FieldError],
    ) -> None:
        raw = node.raw
        name = _opath(path)
        for required in raw.get("required") or []:
            if required not in value:
                errors.append(FieldError(_opath((*path, required)), "Required value", "", OMIT))
        if "maxProperties" in raw and len(value) > raw["maxProperties"]:
            limit = int(raw["maxProperties"])
            errors.append(
                FieldError(
                    name,
                    "Too many",
                    f"must have at most {limit} {'item' if limit == 1 else 'items'}",
                    len(value),
                )
            )
        if "minProperties" in raw and len(value) < raw["minProperties"]:
            errors.append(
                FieldError(
                    name,
                    "Invalid value",
                    f"{name} in body should have at least {raw['minProperties']} properties",
                    len(value),
                )
            )
        old_map = old if isinstance(old, dict) else None
        for key in sorted(value):
            if not path and key == "metadata":
                self._walk_root_metadata(value[key], node.prop("metadata"), old_map)
                continue
            child, is_entry = node.child(key)
            if child is None:
                continue  # unknown fields are pruned, not validated
            child_old = old_map.get(key, _MISSING) if old_map is not None else _MISSING
            self.walk(
                value[key], child, (*path, _Key(key) if is_entry else key), child_old, unchanged
            )

    def _walk_root_metadata(
        self, meta: Any, node: _Node | None, old: dict[str, Any] | None
    ) -> None:
        # ObjectMeta is validated by the apiserver's own code; a CRD schema may only add
        # constraints on name and generateName, which are all we check against it.
        if node is None:
            return
        if not isinstance(meta, dict):
            self._type_error(node, ("metadata",), meta)
            return
        old_meta = old.get("metadata") if old is not None else None
        for key in _CEL_META_FIELDS:
            child = node.prop(key)
            if child is not None and key in meta:
                child_old = old_meta.get(key, _MISSING) if isinstance(old_meta, dict) else _MISSING
                self.walk(meta[key], child, ("metadata", key), child_old, False)

    def _check_array(
        self,
        value: list[Any],
        node: _Node,
        path: _PathT,
        old: Any,
        unchanged: bool,
        errors: list[FieldError],
    ) -> None:
        raw = node.raw
        name = _opath(path)
        if "maxItems" in raw and len(value) > raw["maxItems"]:
            limit = int(raw["maxItems"])
            errors.append(
                FieldError(
                    name,
                    "Too many",
                    f"must have at most {limit} {'item' if limit == 1 else 'items'}",
                    len(value),
                )
            )
        if "minItems" in raw and len(value) < raw["minItems"]:
            errors.append(
                FieldError(
                    name,
                    "Invalid value",
                    f"{name} in body should have at least {raw['minItems']} items",
                    len(value),
                )
            )
        if raw.get("uniqueItems") and len({_canonical(v) for v in value}) != len(value):
            errors.append(
                FieldError(
                    name, "Invalid value", f"{name} in body shouldn't contain duplicates", value
                )
            )
        self._check_list_type(value, node, path)
        items = node.items
        if items is None:
            return
        for index, item in enumerate(value):
            item_old = _correlate_item(item, old, node) if self.updating else _MISSING
            self.walk(item, items, (*path, index), item_old, unchanged)

    def _check_list_type(self, value: list[Any], node: _Node, path: _PathT) -> None:
        # structurallisttype.ValidateListSetsAndMaps: reported once per duplicated entry,
        # at its second occurrence; never ratcheted.
        if node.list_type == "set":
            seen: Counter[str] = Counter()
            for index, item in enumerate(value):
                key = _canonical(item)
                seen[key] += 1
                if seen[key] == 2:
                    self.list_errors.append(
                        FieldError(_fpath((*path, index)), "Duplicate value", "", item)
                    )
        elif node.list_type == "map" and node.map_keys:
            seen = Counter()
            for index, item in enumerate(value):
                if not isinstance(item, dict):
                    self.list_errors.append(
                        FieldError(
                            _fpath((*path, index)),
                            "Invalid value",
                            "must be an object for an array of list-type map",
                            item,
                        )
                    )
                    return
                if any(k not in item for k in node.map_keys):
                    continue  # missing keys are "Required value" schema errors
                key = _canonical([item[k] for k in node.map_keys])
                seen[key] += 1
                if seen[key] == 2:
                    keys = {k: item[k] for k in node.map_keys}
                    self.list_errors.append(
                        FieldError(_fpath((*path, index)), "Duplicate value", "", keys)
                    )

    def _check_combinator(
        self, combinator: str, value: Any, node: _Node, path: _PathT, errors: list[FieldError]
    ) -> None:
        # Structural schemas allow these only as value validations (no types or
        # properties of their own), so each branch is checked with a throw-away walk.
        name = _opath(path)

        def passes(raw: dict[str, Any]) -> bool:
            probe = _Validation(None, ratcheting=False)
            probe.walk(value, _Node(raw), path, _MISSING, False)
            return not (probe.schema_errors or probe.list_errors)

        if combinator == "not":
            if passes(node.raw["not"]):
                errors.append(
                    FieldError(
                        name,
                        "Invalid value",
                        f"{name} in body must not validate the schema (not)",
                        "",
                    )
                )
            return
        results = [passes(branch) for branch in node.raw[combinator]]
        if combinator == "allOf" and not all(results):
            errors.append(
                FieldError(
                    name,
                    "Invalid value",
                    f"{name} in body must validate all the schemas (allOf)",
                    "",
                )
            )
        elif combinator == "anyOf" and not any(results):
            errors.append(
                FieldError(
                    name,
                    "Invalid value",
                    f"{name} in body must validate at least one schema (anyOf)",
                    "",
                )
            )
        elif combinator == "oneOf" and results.count(True) != 1:
            errors.append(
                FieldError(
                    name,
                    "Invalid value",
                    f"{name} in body must validate one and only one schema (oneOf)",
                    "",
                )
            )

    # -- CEL -----------------------------------------------------------------------

    def run_rules(self) -> list[FieldError]:
        """Evaluate the collected rules, in schema pre-order as the apiserver does."""
        errors: list[FieldError] = []
        for job in self.jobs:
            self_value: Any = _MISSING
            old_value: Any = _MISSING
            for rule in job.node.rules:
                transition = rule.program.uses_old_self
                if transition and (job.old is _MISSING or job.old is None):
                    continue  # transition rules need a correlated old value
                if not transition and self.ratcheting and job.unchanged:
                    continue  # ratcheting: an unchanged value keeps passing
                failure: str | None
                if rule.program.runner is None:  # self == oldSelf, done natively
                    if _json_equal(job.value, job.old, job.node):
                        continue
                    failure = None
                elif transition:
                    if self_value is _MISSING:
                        self_value = _to_cel(job.value, job.node, job.is_root)
                    if old_value is _MISSING:
                        old_value = _to_cel(job.old, job.node, job.is_root)
                    passed, failure = _evaluate(rule, {"self": self_value, "oldSelf": old_value})
                    if passed:
                        continue
                else:
                    passed, failure = _evaluate_memoized(job, rule)
                    if passed:
                        continue
                errors.append(self._rule_error(job, rule, failure))
        return errors

    def _rule_error(self, job: _Job, rule: _Rule, failure: str | None) -> FieldError:
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
            return FieldError(_fpath(job.path), "Invalid value", detail, schema_type)
        detail = rule.default_message()
        if rule.message_expression is not None and rule.message_expression.runner is not None:
            expression = rule.message_expression
            activation = {"self": _to_cel(job.value, job.node, job.is_root)}
            if expression.uses_old_self and job.old is not _MISSING:
                activation["oldSelf"] = _to_cel(job.old, job.node, job.is_root)
            message, problem = _cel().run(expression, activation)
            # Like the apiserver: an empty, non-string or failing messageExpression falls
            # back to message (or the "failed rule" text).
            if problem is None and isinstance(message, str) and message.strip():
                detail = str(message).strip()
        path = _fpath((*job.path, *rule.field_path))
        if rule.reason == "FieldValueForbidden":
            return FieldError(path, "Forbidden", detail, OMIT)
        if rule.reason == "FieldValueRequired":
            return FieldError(path, "Required value", detail, OMIT)
        if rule.reason == "FieldValueDuplicate":
            return FieldError(path, "Duplicate value", "", schema_type)
        return FieldError(path, "Invalid value", detail, schema_type)


def _evaluate(rule: _Rule, activation: dict[str, Any]) -> tuple[bool, str | None]:
    """Run a rule: ``(True, None)`` passed, ``(False, None)`` false, else an error."""
    result, failure = _cel().run(rule.program, activation)
    if failure is not None:
        return False, failure
    if _cel_true(result):
        return True, None
    if _cel_false(result):
        return False, None
    return False, "rule did not evaluate to a boolean"


_MEMO_LIMIT: Final = 2048


def _evaluate_memoized(job: _Job, rule: _Rule) -> tuple[bool, str | None]:
    """Evaluate a rule without ``oldSelf``, remembering the outcome per input.

    CEL is deterministic, so the outcome is a function of the values the rule reads
    (:func:`_self_paths`). A test server validates the same few field values over and
    over (``managedBy``, a storage URI, ...), which makes most evaluations cache hits.
    The memo lives on the schema node because the same rule text can convert values
    differently at differently typed nodes.
    """
    value = _project(job.value, rule.program.self_paths)
    key = (rule.program.text, _canonical(value))
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
    compiled = _compile_rule(rule if isinstance(rule, dict) else {"rule": rule})
    node = _Node(schema or {})
    activation = {"self": _to_cel(value, node, root)} if compiled.program.runner else {}
    if compiled.program.uses_old_self:
        if old_value is OMIT:
            raise ValueError(f"rule {compiled.program.text!r} uses oldSelf: pass old_value")
        if compiled.program.runner is None:
            return _json_equal(value, old_value, node), None
        activation["oldSelf"] = _to_cel(old_value, node, root)
    return _evaluate(compiled, activation)


def _cel_true(value: Any) -> bool:
    return _is_cel_bool(value) and bool(value)


def _cel_false(value: Any) -> bool:
    return _is_cel_bool(value) and not bool(value)


def _is_cel_bool(value: Any) -> bool:
    return isinstance(value, (bool, _cel().types.BoolType))


def _to_cel(value: Any, node: _Node | None, is_root: bool = False) -> Any:
    """Convert decoded JSON to cel-python values, guided by the schema.

    As in Kubernetes: ``number`` fields are doubles even when written as ``1``; strings
    with format ``date-time``/``date`` are timestamps, ``duration`` durations and
    ``byte`` bytes; null object fields are absent (so ``has()`` is false); the root and
    embedded resources expose only ``metadata.name`` and ``metadata.generateName``; and
    ``set``/``map`` lists compare regardless of order.
    """
    rt = _cel()
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
            if fmt in ("date-time", "date") and _valid_format(fmt, value):
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
                item = {k: item[k] for k in _CEL_META_FIELDS if k in item}
            out[t.StringType(key)] = _to_cel(item, child)
        return t.MapType(out)
    if isinstance(value, list):
        items = node.items if node is not None else None
        converted = [_to_cel(item, items) for item in value]
        if node is not None and node.list_type in ("set", "map"):
            return rt.unordered_list(converted)
        return t.ListType(converted)
    raise TypeError(f"cannot convert {type(value).__name__} to CEL")


# --------------------------------------------------------------------------------------
# CRDSchema
# --------------------------------------------------------------------------------------


class CRDSchema:
    """One version of a CustomResourceDefinition, ready to default, prune and validate.

    Build it with :meth:`from_file` or :meth:`from_dict`. The instance is safe to share
    between threads; it caches compiled schema nodes and CEL programs.
    """

    group: str
    kind: str
    plural: str
    singular: str
    list_kind: str
    short_names: tuple[str, ...]
    categories: tuple[str, ...]
    namespaced: bool
    version: str
    served_versions: tuple[str, ...]
    storage_version: str
    has_status_subresource: bool
    scale_subresource: dict[str, Any] | None
    printer_columns: tuple[dict[str, Any], ...]
    schema: dict[str, Any]

    def __init__(self, crd: dict[str, Any], version: str | None = None) -> None:
        spec = crd.get("spec") or {}
        names = spec.get("names") or {}
        versions: list[dict[str, Any]] = spec.get("versions") or []
        if not versions:
            raise ValueError("CRD has no spec.versions")
        storage = [v for v in versions if v.get("storage")]
        self.storage_version = str((storage or versions)[0]["name"])
        if version is None:
            chosen = (storage or versions)[0]
        else:
            matches = [v for v in versions if v.get("name") == version]
            if not matches:
                raise ValueError(
                    f"CRD {crd.get('metadata', {}).get('name')} has no version {version!r}"
                )
            chosen = matches[0]
        schema = (chosen.get("schema") or {}).get("openAPIV3Schema")
        if not isinstance(schema, dict):
            raise ValueError(f"version {chosen.get('name')} has no openAPIV3Schema")
        self.group = str(spec.get("group", ""))
        self.kind = str(names.get("kind", ""))
        self.plural = str(names.get("plural", ""))
        self.singular = str(names.get("singular") or self.kind.lower())
        self.list_kind = str(names.get("listKind") or f"{self.kind}List")
        self.short_names = tuple(names.get("shortNames") or ())
        self.categories = tuple(names.get("categories") or ())
        self.namespaced = spec.get("scope", "Namespaced") == "Namespaced"
        self.version = str(chosen["name"])
        self.served_versions = tuple(str(v["name"]) for v in versions if v.get("served", True))
        subresources = chosen.get("subresources") or {}
        self.has_status_subresource = "status" in subresources
        self.scale_subresource = subresources.get("scale")
        self.printer_columns = tuple(chosen.get("additionalPrinterColumns") or ())
        self.schema = schema
        self._root = _Node(schema)

    @classmethod
    def from_file(cls, path: str | Path, version: str | None = None) -> CRDSchema:
        """Load the CRD in ``path`` (the first YAML document that is a CRD)."""
        return cls.from_dict(_read_crd(Path(path)), version)

    @classmethod
    def from_dict(cls, crd: dict[str, Any], version: str | None = None) -> CRDSchema:
        """Build from a decoded CRD; ``version`` defaults to the storage version."""
        return cls(crd, version)

    @property
    def name(self) -> str:
        """The CRD's name, ``<plural>.<group>``."""
        return f"{self.plural}.{self.group}"

    @property
    def api_version(self) -> str:
        """``<group>/<version>`` of the chosen version."""
        return f"{self.group}/{self.version}" if self.group else self.version

    def __repr__(self) -> str:
        return f"CRDSchema({self.name!r}, version={self.version!r})"

    # -- schema lookup -------------------------------------------------------------

    def schema_at(self, path: str) -> dict[str, Any] | None:
        """Raw schema of a field path (``spec.trainer.env[0].name``; ``[]`` = any item)."""
        node: _Node | None = self._root
        for token in re.findall(r"[^.\[\]]+|\[[^\]]*\]", path):
            if node is None:
                return None
            if token.startswith("["):
                if node.type == "array" or node.items is not None:
                    node = node.items
                else:
                    node = node.child(token[1:-1].strip("'\""))[0]
            else:
                node = node.child(token)[0]
        return node.raw if node is not None else None

    def iter_rules(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """Every ``x-kubernetes-validations`` entry as ``(schema path, rule)``."""

        def walk(raw: dict[str, Any], path: str) -> Iterator[tuple[str, dict[str, Any]]]:
            for rule in raw.get("x-kubernetes-validations") or []:
                yield path, rule
            for name, child in (raw.get("properties") or {}).items():
                yield from walk(child, f"{path}.{name}" if path else name)
            if isinstance(raw.get("items"), dict):
                yield from walk(raw["items"], f"{path}[]")
            if isinstance(raw.get("additionalProperties"), dict):
                yield from walk(raw["additionalProperties"], f"{path}[*]")

        return walk(self.schema, "")

    def compile_rules(self) -> int:
        """Compile every CEL rule (and message expression); return how many rules.

        Raises :class:`CELCompileError` naming the first rule that cannot run here.
        """
        count = 0
        for path, raw in self.iter_rules():
            try:
                _compile_rule(raw)
            except CELCompileError as exc:
                raise CELCompileError(f"{self.name} {path or '<root>'}: {exc}") from exc
            count += 1
        return count

    # -- defaulting and pruning ------------------------------------------------------

    def apply_defaults(self, obj: dict[str, Any]) -> dict[str, Any]:
        """A deep copy of ``obj`` with the schema's ``default`` values filled in.

        Structural defaulting as in the apiserver: a default applies where the parent
        object exists and the field is absent (or null and not nullable); defaulted
        values are themselves defaulted; list items and map values are defaulted;
        nothing is invented inside schemaless (preserve-unknown-fields) parts. ObjectMeta
        is left alone.
        """
        out = copy.deepcopy(obj)
        _default(out, self._root, is_root=True)
        return out

    def unknown_fields(self, obj: dict[str, Any]) -> list[str]:
        """Paths of fields the schema does not declare.

        These are what ``fieldValidation=Strict`` rejects (``unknown field "spec.foo"``)
        and what the apiserver silently drops otherwise. Honours
        ``x-kubernetes-preserve-unknown-fields``, ``additionalProperties`` and embedded
        resources; top-level ``metadata`` is checked against ObjectMeta's fields.
        """
        found: list[str] = []
        _prune(obj, self._root, (), found, remove=False, is_root=True)
        return found

    def prune(self, obj: dict[str, Any], *, drop_nulls: bool = True) -> dict[str, Any]:
        """A deep copy of ``obj`` without unknown fields, as the apiserver stores it.

        With ``drop_nulls`` (the apiserver's behaviour) null values of non-nullable
        fields that have no default are removed too.
        """
        out = copy.deepcopy(obj)
        _prune(out, self._root, (), [], remove=True, is_root=True, drop_nulls=drop_nulls)
        return out

    # -- validation ------------------------------------------------------------------

    def validate(
        self,
        obj: dict[str, Any],
        old: dict[str, Any] | None = None,
        *,
        subresource: str | None = None,
        ratcheting: bool = True,
    ) -> list[FieldError]:
        """Validate a (defaulted, pruned) object; return the errors, apiserver order.

        ``old`` makes this an update: transition rules (those using ``oldSelf``) run
        against the correlated old values, and with ``ratcheting`` errors in unchanged
        parts are ignored as Kubernetes >= 1.30 does. ``subresource=None`` validates a
        main-resource write, which ignores ``status``; ``subresource="status"``
        validates only ``status``.
        """
        if subresource not in (None, "status"):
            raise ValueError(f"unsupported subresource {subresource!r}")
        if not isinstance(obj, dict):
            raise TypeError("obj must be a decoded JSON object")
        run = _Validation(old, ratcheting)
        meta_errors: list[FieldError] = []
        if subresource == "status":
            status_node = self._root.prop("status")
            if status_node is not None and "status" in obj:
                old_status = old.get("status", _MISSING) if old is not None else _MISSING
                run.walk(obj["status"], status_node, ("status",), old_status, False)
        else:
            meta_errors = _validate_object_meta(obj.get("metadata"))
            main = {k: v for k, v in obj.items() if k != "status"}
            old_main = (
                {k: v for k, v in old.items() if k != "status"} if old is not None else _MISSING
            )
            run.walk(main, self._root, (), old_main, False)
        errors = meta_errors + run.schema_errors + run.list_errors
        if run.jobs:
            if any(e.blocking for e in errors):
                errors.append(FieldError("", "Invalid value", _NOT_CHECKED, None))
            else:
                errors.extend(run.run_rules())
        return errors

    def check(
        self,
        obj: dict[str, Any],
        old: dict[str, Any] | None = None,
        *,
        subresource: str | None = None,
    ) -> None:
        """Raise ``ValueError`` with the apiserver's 422 message if ``obj`` is invalid."""
        errors = self.validate(obj, old, subresource=subresource)
        if errors:
            name = str((obj.get("metadata") or {}).get("name", ""))
            raise ValueError(format_invalid(self.kind, self.group, name, errors))


def _default(value: Any, node: _Node | None, is_root: bool = False) -> None:
    """Apply defaults in place (structuraldefaulting.Default)."""
    if node is None:
        return
    if isinstance(value, dict):
        for name, raw in node.properties.items():
            if "default" not in raw or (is_root and name == "metadata"):
                continue
            current = value.get(name, _MISSING)
            if current is _MISSING or (current is None and not raw.get("nullable")):
                value[name] = copy.deepcopy(raw["default"])
        for key in list(value):
            if is_root and key == "metadata":
                continue
            child, is_entry = node.child(key)
            if child is None:
                continue
            if value[key] is None and is_entry and not child.nullable:
                if "default" in child.raw:
                    value[key] = copy.deepcopy(child.raw["default"])
                else:
                    continue
            _default(value[key], child)
    elif isinstance(value, list):
        items = node.items
        if items is None:
            return
        for index, item in enumerate(value):
            if item is None and not items.nullable:
                if "default" not in items.raw:
                    continue
                value[index] = copy.deepcopy(items.raw["default"])
            _default(value[index], items)


def _prune(
    value: Any,
    node: _Node | None,
    path: _PathT,
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
                found.append(_opath((*path, key)))
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
            _prune(item, child, (*path, key), found, remove=remove, drop_nulls=drop_nulls)
    elif isinstance(value, list):
        items = node.items
        for index, item in enumerate(value):
            _prune(item, items, (*path, index), found, remove=remove, drop_nulls=drop_nulls)


def _prune_object_meta(meta: Any, path: _PathT, found: list[str], *, remove: bool) -> None:
    if not isinstance(meta, dict):
        return
    for key in list(meta):
        if key not in _OBJECT_META_FIELDS:
            found.append(_opath((*path, key)))
            if remove:
                del meta[key]


# --------------------------------------------------------------------------------------
# Loading CRD files
# --------------------------------------------------------------------------------------

_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml is ~20x faster


def _read_crd(path: Path) -> dict[str, Any]:
    with path.open("rb") as handle:
        for document in yaml.load_all(handle, Loader=_Loader):
            if isinstance(document, dict) and document.get("kind") == "CustomResourceDefinition":
                return document
    raise ValueError(f"{path} holds no CustomResourceDefinition")


@lru_cache(maxsize=32)
def _load_cached(path: str, mtime_ns: int) -> CRDSchema:
    del mtime_ns  # part of the cache key only: a changed file is read again
    return CRDSchema.from_file(path)


def load_upstream_crds(
    upstream: Path | None = None, *, branch: str = "v2.3.0"
) -> dict[str, CRDSchema]:
    """The TrainJob, TrainingRuntime, ClusterTrainingRuntime and JobSet CRDs.

    Keyed by CRD name (``trainjobs.trainer.kubeflow.org``, ...). ``branch`` ``"v2.3.0"``
    reads ``kubeflow-trainer/crds``, ``"main"`` the ``kubeflow-trainer/main-*/crds``
    snapshot; JobSet comes from ``jobset/``. ``upstream`` defaults to
    :func:`find_upstream`; ``FileNotFoundError`` if there is none. Results are cached.
    """
    root = upstream if upstream is not None else find_upstream()
    if root is None or not root.is_dir():
        raise FileNotFoundError(
            f"upstream data folder not found (set ${UPSTREAM_ENV} or provide "
            "<repo>/../shared/upstream)"
        )
    trainer = root / "kubeflow-trainer"
    if branch == "v2.3.0":
        crd_dir = trainer / "crds"
    elif branch == "main":
        snapshots = sorted(trainer.glob("main-*/crds"))
        if not snapshots:
            raise FileNotFoundError(f"no main-branch CRD snapshot under {trainer}")
        crd_dir = snapshots[-1]
    else:
        raise ValueError(f"unknown branch {branch!r} (use 'v2.3.0' or 'main')")
    files = [
        crd_dir / f"trainer.kubeflow.org_{plural}.yaml"
        for plural in ("trainjobs", "trainingruntimes", "clustertrainingruntimes")
    ]
    files.append(root / "jobset" / "jobset.x-k8s.io_jobsets.yaml")
    schemas: dict[str, CRDSchema] = {}
    for file in files:
        schema = _load_cached(str(file.resolve()), file.stat().st_mtime_ns)
        schemas[schema.name] = schema
    return schemas
