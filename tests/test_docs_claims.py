"""Claims the docs must not make, and exposures they must state (issue 24, defects 14
and 18): host networking isolates nothing; the container backend's secrets are visible
to `docker inspect`."""

from __future__ import annotations

import re
from pathlib import Path

DOCS = Path(__file__).resolve().parents[1] / "docs"


def _text() -> str:
    return re.sub(r"\s+", " ", (DOCS / "backends.md").read_text())


def test_host_networking_is_not_called_isolated() -> None:
    text = _text()
    assert "no traffic leaves the machine" not in text
    assert "shares the machine's network" in text


def test_the_container_backend_states_where_secrets_are_visible() -> None:
    text = _text()
    assert "docker inspect" in text
    assert "Config.Env" in text
    assert "auto_remove=false" in text
