"""Parsing Python source from many threads at once (``base/pysource.py``): CPython 3.11's
``ast.parse`` can raise ``SystemError: AST constructor recursion depth mismatch`` when
two threads parse at once; twelve threads submitting one job met it in CI."""

from __future__ import annotations

import ast
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kf_trainer_core.base import pysource
from kf_trainer_core.cluster import status

# A large module: the longer the tree takes to build, the likelier a switch inside it
# (plain ast.parse fails this test about once a run here).
SOURCE = Path(status.__file__).read_text()


class _Finalised:
    """Cyclic garbage whose finaliser gives the GIL away: a collection during a parse
    then switches threads in the middle of it, as a busy process does."""

    def __init__(self) -> None:
        self.cycle = self

    def __del__(self) -> None:
        time.sleep(0)


@pytest.fixture
def fast_switching() -> Iterator[None]:
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(before)


def test_many_threads_parse_without_a_depth_mismatch(fast_switching: None) -> None:
    errors: list[BaseException] = []

    def work() -> None:
        for _ in range(25):
            garbage = [_Finalised() for _ in range(150)]
            del garbage
            try:
                pysource.parse(SOURCE)
                pysource.parse_expression("{'a': [1, 2.5, None]}")
            except BaseException as exc:  # reported below
                errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_parses_wait_for_each_other() -> None:
    done = threading.Event()
    with pysource._LOCK:
        worker = threading.Thread(target=lambda: (pysource.parse("x = 1"), done.set()))
        worker.start()
        # Cannot finish while another parse holds the lock.
        assert not done.wait(0.2)
    worker.join()
    assert done.is_set()


def test_a_parse_disturbed_by_another_library_is_tried_once_more(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = ast.parse
    calls: list[str] = []

    def disturbed(source: str, *args: object, **kwargs: object) -> ast.AST:
        calls.append(source)
        if len(calls) == 1:
            raise SystemError("AST constructor recursion depth mismatch (before=4, after=2)")
        return real(source, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(ast, "parse", disturbed)
    assert isinstance(pysource.parse("x = 1"), ast.Module)
    assert len(calls) == 2
    assert ast.literal_eval(pysource.parse_expression("[1, 2]")) == [1, 2]


def test_other_system_errors_and_syntax_errors_are_not_hidden(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(SyntaxError):
        pysource.parse("def (")

    def broken(source: str, *args: object, **kwargs: object) -> ast.AST:
        raise SystemError("something else")

    monkeypatch.setattr(ast, "parse", broken)
    with pytest.raises(SystemError, match="something else"):
        pysource.parse("x = 1")
