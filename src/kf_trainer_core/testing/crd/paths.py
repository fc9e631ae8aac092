"""Field paths: ``field.Path`` strings, kube-openapi's variant, and rule ``fieldPath`` parsing."""

from __future__ import annotations

import re
from typing import Any, Final


class Key(str):
    """A map key (``additionalProperties``) in a path: ``[key]`` in field paths."""

    __slots__ = ()


PathT = tuple[Any, ...]  # elements: str (field), Key (map key), int (list index)


def fpath(path: PathT) -> str:
    """Render like ``field.Path.String()``: ``a.b[0][key].c``."""
    out = ""
    for part in path:
        if isinstance(part, (int, Key)):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out


def opath(path: PathT) -> str:
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


def parse_field_path(text: str) -> PathT:
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
            parts.append(Key(re.sub(r"\\(.)", r"\1", match.group("key"))))
        else:
            parts.append(int(match.group("index")))
        pos = match.end()
    return tuple(parts)
