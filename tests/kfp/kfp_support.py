"""Helpers shared by these tests (a module of its own: test files cannot import
conftest reliably when several test folders have one)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def scenario(preset: str, **fields: Any) -> str:
    """A test-server scenario annotation value."""
    return json.dumps({"preset": preset, **fields}) if fields else preset


def files_text(root: Path) -> str:
    """Everything written under ``root`` (outputs, executor files), as one text."""
    return "\n".join(p.read_text(errors="replace") for p in sorted(root.rglob("*")) if p.is_file())
