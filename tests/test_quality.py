"""The code base stays ruff- and mypy-clean: checked here so that CI's one test command
covers it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)


def _tool(name: str) -> str:
    found = shutil.which(name, path=str(Path(sys.executable).parent))
    if found is None:
        pytest.skip(f"{name} is not installed in this environment")
    return found


def test_ruff_lint() -> None:
    proc = _run(_tool("ruff"), "check", "src", "tests", "bench", "examples")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_ruff_format() -> None:
    proc = _run(_tool("ruff"), "format", "--check", "src")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_mypy() -> None:
    proc = _run(_tool("mypy"))
    assert proc.returncode == 0, proc.stdout + proc.stderr


#: The house's room sizes (docs/architecture.md): a file a newcomer can read in one
#: sitting, a class that does one job.
MAX_FILE_LINES = 800
MAX_CLASS_LINES = 520


def _sources() -> list[Path]:
    return sorted((ROOT / "src").rglob("*.py"))


def test_no_source_file_is_over_the_house_limit() -> None:
    too_long = {
        str(path.relative_to(ROOT)): lines
        for path in _sources()
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_FILE_LINES
    }
    assert not too_long, f"split these along their seams: {too_long}"


def test_no_class_is_over_the_house_limit() -> None:
    import ast

    too_long = {}
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
                size = node.end_lineno - node.lineno + 1
                if size > MAX_CLASS_LINES:
                    too_long[f"{path.relative_to(ROOT)}:{node.name}"] = size
    assert not too_long, f"split these classes into collaborators: {too_long}"
