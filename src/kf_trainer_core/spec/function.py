"""Training functions: capture a Python function as self-contained source, and turn it
into the program that a trainer node runs.

A ``CustomTrainer`` function is shipped to the cluster as source code, so it must be
self-contained: imports inside the body, no closures over local variables, inputs
through ``func_args``. This module checks that early, with a clear message, instead of
letting the pod fail with a ``NameError``.
"""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import json
import re
import textwrap
from collections.abc import Callable
from typing import Any

from kf_trainer_core.base import pysource
from kf_trainer_core.base.quoting import shown
from kf_trainer_core.fields import checks
from kf_trainer_core.fields._model import did_you_mean, fix

#: ``"package.module:function"`` references.
REF_PATTERN = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*\Z")

#: A dotted path such as ``os.path.join``: a reference missing its ``:``.
_DOTTED = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)+\Z")

#: Rank 0 of node 0 prints its return value on a line that starts with this marker, as
#: a fallback for the termination message (MPI launchers, local runs, logs-only access).
RESULT_MARKER = "##kf-trainer-result## "

#: Kubernetes keeps at most 4096 bytes of a container's termination message.
TERMINATION_MESSAGE_LIMIT = 4096

#: Where the kubelet reads the termination message from; an environment variable of
#: the same purpose overrides it for local runs and the test server's exec mode.
TERMINATION_LOG_PATH = "/dev/termination-log"
TERMINATION_LOG_ENV = "KF_TRAINER_TERMINATION_LOG"
#: Set to ``ignore`` in the trainer's env to let a function whose return value is not
#: JSON-serialisable succeed without a result (by default the job fails: a result that
#: silently became ``None`` downstream is lost data).
RESULT_NOT_JSON_ENV = "KF_TRAINER_RESULT_NOT_JSON"


def _function_node(source: str, name: str | None) -> ast.FunctionDef:
    """Find the top-level ``def`` called ``name`` (or the only one) in ``source``."""
    try:
        tree = pysource.parse(source)
    except SyntaxError as exc:
        raise ValueError(
            fix(
                f"the function source does not parse: {exc.msg} (line {exc.lineno}).",
                "pass the complete source of a top-level `def`.",
            )
        ) from None
    funcs = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    if name is not None:
        funcs = [f for f in funcs if f.name == name]
    if not funcs:
        where = f"named `{name}` " if name else ""
        raise ValueError(
            fix(f"the source defines no top-level function {where}.", "pass a `def` function.")
        )
    if len(funcs) > 1:
        names = ", ".join(f.name for f in funcs)
        raise ValueError(
            fix(
                f"the source defines several functions ({names}).",
                'say which one trains: {"source": ..., "name": "<function>"}.',
            )
        )
    node = funcs[0]
    if isinstance(node, ast.AsyncFunctionDef):
        raise ValueError(
            fix(
                f"`{node.name}` is an async function.",
                "make the training function a plain `def`; run asyncio inside it if needed.",
            )
        )
    return node


def _strip_decorators(source: str, node: ast.FunctionDef) -> str:
    """Drop decorator lines (``@task.kubeflow_trainer(...)``): they belong to the
    orchestrator, not to the pod."""
    if not node.decorator_list:
        return source
    lines = source.splitlines(keepends=True)
    return "".join(lines[node.lineno - 1 :])


def capture_source(func: Callable[..., Any]) -> tuple[str, str]:
    """Return ``(name, source)`` of a plain Python function, decorators removed.

    Works for functions defined in modules, DAG files, flow files and notebooks (IPython
    registers cell sources with :mod:`linecache`, which :func:`inspect.getsource` reads).
    """
    func = inspect.unwrap(func)
    if not inspect.isfunction(func):
        raise ValueError(
            fix(
                f"expected a Python function, got {type(func).__name__}.",
                "pass a `def` function, its source, or a 'package.module:function' reference.",
            )
        )
    if func.__name__ == "<lambda>":
        raise ValueError(
            fix("a lambda cannot be shipped as a training function.", "define it with `def`.")
        )
    if func.__code__.co_freevars:
        names = ", ".join(func.__code__.co_freevars)
        raise ValueError(
            fix(
                f"`{func.__name__}` uses variables of an enclosing function ({names}); "
                "only its own source reaches the pod.",
                "pass those values through `func_args`.",
            )
        )
    try:
        source = inspect.getsource(func)
    except (OSError, TypeError) as exc:
        raise ValueError(
            fix(
                f"cannot read the source of `{func.__name__}` ({exc}).",
                "define it in a file or notebook cell, or pass its source as a string.",
            )
        ) from None
    source = textwrap.dedent(source)
    node = _function_node(source, func.__name__)
    return func.__name__, _strip_decorators(source, node)


def parse_source(source: str, name: str | None = None) -> tuple[str, str]:
    """Validate function source text and return ``(name, source)``."""
    source = textwrap.dedent(source).strip("\n") + "\n"
    node = _function_node(source, name)
    return node.name, source if name is not None else _strip_decorators(source, node)


def refuse_dotted_path(text: str) -> None:
    """``"os.path.join"`` is neither source nor a reference: say how to write it."""
    if _DOTTED.match(text):
        module, _, attr = text.rpartition(".")
        raise ValueError(
            fix(
                f"{shown(text)} is neither function source nor a reference.",
                f"write a reference as 'module:function', e.g. '{module}:{attr}'.",
            )
        )


def call_problem(source: str, name: str, func_args: dict[str, Any] | None) -> str | None:
    """Why ``name(**func_args)`` would fail with a ``TypeError`` in the pod because of
    an argument the function does not take, or ``None``. (Required parameters missing
    from func_args are not refused: orchestrators fill them in at run time.)"""
    try:
        node = _function_node(source, name)
    except ValueError:
        return None
    args = node.args
    given = set(func_args or {})
    # Positional-only parameters cannot be given by keyword, as func_args are.
    named = [a.arg for a in (*args.args, *args.kwonlyargs)]
    unknown = sorted(given - set(named)) if args.kwarg is None else []
    if unknown:
        takes = ", ".join(named) or "no arguments"
        hints = "".join(did_you_mean(u, named) for u in unknown)
        return fix(
            f"`{name}` takes no argument {', '.join(map(repr, unknown))} (it takes {takes}).",
            f"drop it from func_args or add it to the function's parameters.{hints}",
        )
    return None


def resolve_ref(ref: str) -> Callable[..., Any]:
    """Import the function named by ``"package.module:function"``."""
    module_name, _, attr = ref.partition(":")
    if module_name.endswith(".py") or "/" in module_name or "\\" in module_name:
        # A file's path is a natural first guess; the reference is an import name.
        stem = module_name.removesuffix(".py").replace("\\", "/").rsplit("/", 1)[-1]
        raise ValueError(
            fix(
                f"`{module_name}` in `{ref}` is a file's path, not a module name.",
                f"write the module's import name, e.g. `{stem}:{attr}`, and run from "
                "the folder holding it (the kf-trainer command also looks beside the "
                "spec file).",
            )
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(
            fix(
                f"cannot import module `{module_name}` of `{ref}` ({exc}).",
                "install the package or fix the reference; it is imported where the spec is built.",
            )
        ) from None
    func = getattr(module, attr, None)
    if not callable(func):
        raise ValueError(
            fix(f"module `{module_name}` has no function `{attr}`.", "fix the reference.")
        )
    return func  # type: ignore[no-any-return]


def program_for(
    name: str,
    source: str | None,
    func_args: dict[str, Any] | None,
    *,
    import_ref: str | None = None,
) -> str:
    """The Python program a trainer node runs: the function, its call with
    ``func_args``, and the hand-off of rank 0's return value.

    The arguments travel as a JSON literal decoded at run time, so values are never
    re-interpreted as code, and the program is the same bytes for the same inputs.
    """
    # Every name pasted into the program is checked to be an identifier: nothing else
    # of the caller's can become code here.
    problem = checks.identifier_problem(name, "the function name")
    if import_ref is not None:
        module, _, attr = import_ref.partition(":")
        problem = (
            problem
            or checks.module_path_problem(module, "the module of the reference")
            or checks.identifier_problem(attr, "the function of the reference")
        )
        body = f"from {module} import {attr} as {name}\n"
    else:
        # The source goes in byte for byte. Its own ``from __future__`` imports stay
        # legal: only comments and the template's __future__ import come before it.
        body = source or ""
    if not problem and name.startswith("__") and name.endswith("__"):
        # A dunder at the program's top level would replace the interpreter's own
        # (__name__, __builtins__...): the program would silently not run.
        problem = fix(
            f"the function name {shown(name)} is one of Python's special names.",
            "rename the function, e.g. 'train'.",
        )
    if problem:
        raise ValueError(problem)
    args_json = json.dumps(func_args or {}, sort_keys=True, separators=(",", ":"))
    program = _PROGRAM_TEMPLATE.format(
        function=body,
        reporter=_reporter_prelude(body if import_ref is None else None)
        + _checkpoints_prelude(body if import_ref is None else ""),
        name=name,
        args=repr(args_json),
        marker=repr(RESULT_MARKER),
        limit=TERMINATION_MESSAGE_LIMIT,
        log_env=repr(TERMINATION_LOG_ENV),
        log_path=repr(TERMINATION_LOG_PATH),
        not_json_env=repr(RESULT_NOT_JSON_ENV),
    )
    try:
        _compiles(program, name)
    except SyntaxError as exc:
        raise ValueError(
            fix(
                f"the training program does not compile: {exc.msg} (line {exc.lineno}).",
                "put `from __future__` imports first in the function's source, before any "
                "docstring or code, and pass a complete `def`.",
            )
        ) from None
    return program


@functools.lru_cache(maxsize=32)
def _compiles(program: str, name: str) -> None:
    """Raise :class:`SyntaxError` unless ``program`` compiles. Remembered per program:
    compiling was two thirds of building a job, and a DAG or a loop submits the same
    function again and again (only programs that compile are remembered)."""
    compile(program, f"kf_trainer_{name}.py", "exec", dont_inherit=True)


def uses_reporter(source: str | None, import_ref: str | None = None) -> bool:
    """Whether the program of this function carries the reporting module: its source
    names ``kf_trainer_core.report``, or it is imported (its source is not seen)."""
    return import_ref is not None or REPORT_MODULE in (source or "")


def progress_from_log(lines: list[str], subject: str = "a TrainJob") -> dict[str, Any] | None:
    """The latest ``trainerStatus`` that rank 0 printed in these log lines, validated
    (:func:`kf_trainer_core.base.untrusted.trainer_status`: malformed fields are dropped with
    one warning about ``subject``; never raises)."""
    from kf_trainer_core.base.untrusted import trainer_status
    from kf_trainer_core.report import parse_line

    for line in reversed(lines):
        status = parse_line(line)
        if status is not None:
            return trainer_status(status, subject)
    return None


def _reporter_prelude(body: str | None) -> str:
    """The code that makes :mod:`kf_trainer_core.report` importable in the pod.

    Only functions that use it pay for it: a function whose source names
    ``kf_trainer_core.report`` (or an imported function, whose source is not seen). The
    installed package wins where the image has it; otherwise the module's own source,
    carried in the program, is registered under its name, so
    ``from kf_trainer_core.report import report`` works either way."""
    if body is not None and not uses_reporter(body):
        return "def _kf_trainer_reporter():\n    return None\n"
    tail = "    module._enable()\n    return module\n"
    return _carried_module("report", "_kf_trainer_reporter", tail)


def _checkpoints_prelude(body: str) -> str:
    """The code that makes :mod:`kf_trainer_core.checkpoints` importable in the pod,
    for functions whose source names it (the program of any other function is the same
    bytes as before). Like the reporter, the installed package wins."""
    if CHECKPOINTS_MODULE not in body:
        return ""
    tail = "    return module\n\n\n_kf_trainer_checkpoints()\n"
    return "\n\n" + _carried_module("checkpoints", "_kf_trainer_checkpoints", tail)


def _carried_module(attr: str, func: str, tail: str) -> str:
    """A function ``func`` that imports ``kf_trainer_core.<attr>``, or registers the
    copy of its source the program carries, then runs ``tail``."""
    name = f"kf_trainer_core.{attr}"
    module = importlib.import_module(name)
    return _CARRIED_TEMPLATE.format(
        func=func,
        attr=attr,
        module=repr(name),
        source=repr(inspect.getsource(module)),
        tail=tail,
    )


#: The in-function reporting module (:mod:`kf_trainer_core.report`).
REPORT_MODULE = "kf_trainer_core.report"
#: The in-function checkpoint helper (:mod:`kf_trainer_core.checkpoints`).
CHECKPOINTS_MODULE = "kf_trainer_core.checkpoints"

_CARRIED_TEMPLATE = """\
def {func}():
    import sys
    import types

    try:
        import kf_trainer_core.{attr} as module
    except ImportError:  # the image does not have kf-trainer-suite: use the copy below
        package = sys.modules.get("kf_trainer_core")
        if package is None:
            package = types.ModuleType("kf_trainer_core")
            package.__path__ = []
            sys.modules["kf_trainer_core"] = package
        module = types.ModuleType({module})
        module.__file__ = "<kf-trainer program>"
        sys.modules[{module}] = module
        exec(compile({source}, "<kf_trainer_core.{attr}>", "exec"), module.__dict__)
        package.{attr} = module
{tail}"""


# The epilogue is generated code: it must run on any Python the image has (3.8+) and use
# only the standard library. It never fails a job whose result was reported; a result
# that cannot be reported at all (not JSON) fails the job with the type and the fix,
# unless the user opted out, because every adapter would otherwise hand `None` on as if
# the function had returned it.
_PROGRAM_TEMPLATE = """\
# Generated by kf-trainer-suite: the training function, then its call.
# Annotations stay unevaluated: they may name types only the caller's module had.
from __future__ import annotations

{function}

# Bound at once, before the program defines names of its own: the function may be named
# like anything below (json, os, result, reporter, _kf_trainer_main...) and is still the
# one called.
_kf_trainer_function = {name}

{reporter}

def _kf_trainer_main():
    import json
    import os
    import sys

    try:
        reporter = _kf_trainer_reporter()
    except Exception as exc:  # reporting must never stop the training
        reporter = None
        print("kf-trainer: progress reporting is off (%s)." % exc, file=sys.stderr)
    try:
        result = _kf_trainer_function(**json.loads({args}))
    finally:
        if reporter is not None:
            reporter.flush()  # the last report must not wait for the next interval
    rank = os.environ.get("RANK") or os.environ.get("OMPI_COMM_WORLD_RANK") or "0"
    node = os.environ.get("PET_NODE_RANK") or os.environ.get("JOB_COMPLETION_INDEX") or "0"
    if rank != "0" or node != "0":
        return
    try:
        text = json.dumps(result, sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        kind = type(result)
        what = kind.__qualname__
        if kind.__module__ != "builtins":
            what = kind.__module__ + "." + what
        if os.environ.get({not_json_env}, "").strip().lower() == "ignore":
            print("kf-trainer: the return value (%s) is not JSON-serialisable (%s); "
                  "it is not reported (%s=ignore)." % (what, exc, {not_json_env}),
                  file=sys.stderr, flush=True)
            return
        message = ("kf-trainer: the training function returned a %s that is not "
                   "JSON-serialisable (%s), so it cannot be its result. Fix: return plain "
                   "data (dict, list, str, int, float, bool, None), or write large or binary "
                   "outputs to storage and return their URI; or set %s=ignore in the "
                   "trainer's env to succeed without a result." % (what, exc, {not_json_env}))
        print(message, file=sys.stderr, flush=True)
        try:
            with open(os.environ.get({log_env}) or {log_path}, "w") as fh:
                fh.write(message[:{limit}])
        except OSError:
            pass
        sys.exit(1)
    print({marker} + text, flush=True)
    if len(text.encode()) > {limit}:
        print("kf-trainer: the return value is %d bytes; the termination message keeps "
              "%d, so only the log carries it." % (len(text.encode()), {limit}),
              file=sys.stderr)
        return
    try:
        with open(os.environ.get({log_env}) or {log_path}, "w") as fh:
            fh.write(text)
    except OSError as exc:
        print("kf-trainer: cannot write the termination message (%s)." % exc, file=sys.stderr)


if __name__ == "__main__":
    _kf_trainer_main()
"""


def parse_result(text: str | None) -> Any:
    """Parse a return value written by the generated program (termination message or
    log line). Returns ``None`` when there is none."""
    if not text:
        return None
    text = text.strip().removeprefix(RESULT_MARKER.strip()).strip()
    try:
        return json.loads(text)
    except (ValueError, RecursionError):  # a job's text: never raise for it
        return None


def result_from_log(lines: list[str]) -> tuple[bool, Any]:
    """Find the last result marker in log lines: ``(found, value)``."""
    for line in reversed(lines):
        idx = line.find(RESULT_MARKER)
        if idx >= 0:
            try:
                return True, json.loads(line[idx + len(RESULT_MARKER) :])
            except (ValueError, RecursionError):  # a job's text: never raise for it
                return False, None
    return False, None
