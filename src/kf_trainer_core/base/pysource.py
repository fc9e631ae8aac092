"""Parsing Python source from several threads at once.

CPython 3.11 keeps the depth counter that ``ast.parse`` checks while it turns the parsed
tree into Python objects per interpreter, not per thread. When a thread switch falls in
the middle of that (a garbage collection running a finaliser is enough) and another
thread parses meanwhile, one of them raises ``SystemError: AST constructor recursion
depth mismatch`` (python/cpython#106905 and its neighbours; seen here with twelve
threads submitting the same job). Submitting from threads is what a Prefect thread pool
or a DAG that builds its specs in parallel does, so every parse of the suite goes
through :func:`parse` or :func:`parse_expression`: one lock keeps the suite's own
parses apart, and a parse disturbed by another library's thread is tried once more.
"""

from __future__ import annotations

import ast
import threading
from typing import Literal, TypeVar

_LOCK = threading.Lock()
_MISMATCH = "AST constructor recursion depth mismatch"

T = TypeVar("T", ast.Module, ast.Expression)


def _parse(source: str, mode: Literal["exec", "eval"], kind: type[T]) -> T:
    for last in (False, True):
        try:
            with _LOCK:
                tree = ast.parse(source, mode=mode)
            assert isinstance(tree, kind)
            return tree
        except SystemError as exc:
            if last or _MISMATCH not in str(exc):
                raise
    raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises


def parse(source: str) -> ast.Module:
    """``ast.parse(source)``, safe to call from several threads (see the module)."""
    return _parse(source, "exec", ast.Module)


def parse_expression(source: str) -> ast.Expression:
    """``ast.parse(source, mode="eval")``, safe to call from several threads; pass the
    result to ``ast.literal_eval`` in place of the text."""
    return _parse(source, "eval", ast.Expression)


__all__ = ["parse", "parse_expression"]
