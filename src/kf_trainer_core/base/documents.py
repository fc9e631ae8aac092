"""Reading YAML and JSON documents that come from outside the suite: spec files and
spec texts, backend configurations, kubeconfigs, Airflow connection extras.

Each is capped in size before it is parsed, YAML aliases are refused (a few hundred
bytes of nested aliases expand to gigabytes when the document is walked), and a JSON
nesting too deep for the parser is a clear error instead of a ``RecursionError``. Every
failure is :class:`DocumentError` (a ``ValueError``) whose message names the document
and the fix, never its text (which may hold a credential).
"""

from __future__ import annotations

import json
from typing import Any

import yaml

__all__ = ["MAX_CONFIG_BYTES", "MAX_SPEC_BYTES", "DocumentError", "load_document", "load_json"]

#: A spec (YAML or JSON): far above any real one (the program a spec becomes must fit a
#: container argument of 128 KiB anyway).
MAX_SPEC_BYTES = 1 << 20
#: A kubeconfig or backend configuration (certificates and tokens inline).
MAX_CONFIG_BYTES = 4 << 20


class DocumentError(ValueError):
    """A document that cannot be read safely; the message says why and the fix."""


class _NoAliasLoader(yaml.SafeLoader):
    """The safe loader, refusing aliases (``*name``): anchors alone do no harm."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]
            mark = event.start_mark
            raise yaml.composer.ComposerError(
                None,
                None,
                "uses a YAML alias (*" + str(event.anchor) + "); aliases are not accepted",
                mark,
            )
        return super().compose_node(parent, index)


def _check_size(text: str | bytes, what: str, limit: int) -> None:
    size = len(text.encode() if isinstance(text, str) else text)
    if size > limit:
        raise DocumentError(
            f"{what}: {size} bytes; at most {limit} are read. Fix: pass a smaller "
            "document (large data goes to storage, by URI)."
        )


def load_json(text: str | bytes, what: str, *, limit: int = MAX_CONFIG_BYTES) -> Any:
    """Parse JSON ``text`` (at most ``limit`` bytes)."""
    _check_size(text, what, limit)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DocumentError(
            f"{what} is not JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})."
        ) from None
    except RecursionError:
        raise DocumentError(f"{what}: nests too deeply to be read. Fix: flatten it.") from None


def load_document(text: str | bytes, what: str, *, limit: int = MAX_SPEC_BYTES) -> Any:
    """Parse a YAML or JSON document (JSON when it starts with ``{``), at most ``limit``
    bytes, YAML aliases refused. Errors name the position, never the text."""
    _check_size(text, what, limit)
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    if text.lstrip().startswith("{"):
        return load_json(text, what, limit=limit)
    try:
        return yaml.load(text, Loader=_NoAliasLoader)  # a SafeLoader that refuses aliases
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or type(exc).__name__
        fix = (
            " Fix: write the values out instead of referring to an anchor."
            if "alias" in str(problem)
            else ""
        )
        raise DocumentError(f"{what}: not valid YAML: {problem}{where}.{fix}") from None
    except RecursionError:
        raise DocumentError(f"{what}: nests too deeply to be read. Fix: flatten it.") from None
