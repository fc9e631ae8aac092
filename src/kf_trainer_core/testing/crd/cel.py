"""CEL (cel-python) with the Kubernetes additions: the runtime, its function library,
compiled programs and compiled ``x-kubernetes-validations`` rules."""

from __future__ import annotations

import itertools
import math
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Any, Final

from kf_trainer_core.testing.crd.paths import PathT, parse_field_path


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
class Program:
    text: str
    runner: Any  # celpy Runner, None for natively evaluated rules
    uses_old_self: bool
    # The field paths under `self` the result depends on (() = all of self); see
    # _self_paths. Used to evaluate on, and memoize by, just those values.
    self_paths: tuple[tuple[str, ...], ...]


class CelRuntime:
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
        self._programs: dict[str, Program] = {}

    def compile(self, text: str) -> Program:
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
            program = Program(text, runner, "oldSelf" in idents, _self_paths(ast))
            self._programs[text] = program
            return program

    def run(self, program: Program, activation: dict[str, Any]) -> tuple[Any, str | None]:
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


def project(value: Any, paths: tuple[tuple[str, ...], ...]) -> Any:
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
    missing = re.match(r"no such member in mapping: '(.*)'\Z", text)
    if missing:
        return f"no such key: {missing.group(1)}"
    if "no matching overload" in text or "no such overload" in text:
        return "no such overload"
    return text


_cel_runtime: CelRuntime | None = None
_cel_runtime_lock = threading.Lock()


def cel_runtime() -> CelRuntime:
    global _cel_runtime
    if _cel_runtime is None:
        with _cel_runtime_lock:
            if _cel_runtime is None:
                _cel_runtime = CelRuntime()
    return _cel_runtime


def _kubernetes_cel_library(rt: CelRuntime) -> dict[str, Callable[..., Any]]:
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
        match = go_regex(str(pattern)).search(str(text))
        return t.StringType(match.group(0) if match else "")

    def find_all(text: Any, pattern: Any, limit: Any = -1) -> Any:
        found = [m.group(0) for m in go_regex(str(pattern)).finditer(str(text))]
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
def go_regex(pattern: str) -> re.Pattern[str]:
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


@dataclass(frozen=True)
class Rule:
    program: Program
    message: str | None
    message_expression: Program | None
    reason: str | None
    field_path: PathT

    def default_message(self) -> str:
        # ruleMessageOrDefault() in apiextensions-apiserver
        return (self.message or "").strip() or f"failed rule: {self.program.text.strip()}"

    def error_string(self) -> str:
        # ruleErrorString()
        return (self.message or "").strip() or self.program.text.strip()


def compile_rule(raw: dict[str, Any]) -> Rule:
    rt = cel_runtime()
    text = raw.get("rule")
    if not isinstance(text, str) or not text.strip():
        raise CELCompileError(f"x-kubernetes-validations entry without a rule: {raw!r}")
    program = rt.compile(text)
    expression = raw.get("messageExpression")
    return Rule(
        program=program,
        message=raw.get("message"),
        message_expression=rt.compile(expression) if expression else None,
        reason=raw.get("reason"),
        field_path=parse_field_path(raw["fieldPath"]) if raw.get("fieldPath") else (),
    )
