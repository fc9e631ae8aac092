"""The credentials a connection holds, found before anything parses it, and error text
with them taken out.

A connection's secrets must be registered with Airflow's masker *before* its fields are
parsed: a malformed inline kubeconfig makes the YAML parser quote the offending line,
token included, and that error can be of any type. So the raw fields are read as text
first — the password, the inline kubeconfig and CA data, and every value under a
credential key inside the kubeconfig, found line by line when the YAML cannot be read —
and every error leaving the hook is scrubbed of them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

#: Keys of a kubeconfig whose values are credentials.
KUBECONFIG_SECRETS = frozenset(
    {
        "token",
        "password",
        "client-key-data",
        "access-token",
        "refresh-token",
        "id-token",
        "client-secret",
    }
)
#: Extra fields (both providers' names, with or without the legacy prefix) that are secrets.
_SECRET_FIELDS = ("kubeconfig", "kube_config", "ca_cert_data")
# `token: abc`, `"token": "abc"`, `token=abc` — in YAML, JSON or broken text alike.
_KEYED = re.compile(
    r"""(?<![A-Za-z-])(?P<key>"""
    + "|".join(sorted((re.escape(k) for k in KUBECONFIG_SECRETS), key=len, reverse=True))
    + r""")["']?[ \t]*[:=][ \t]*["']?(?P<value>[^\s"',}\]]+)""",
)
# Anything shorter is no credential, and masking it would blank common words.
_MIN_SECRET = 4


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)


def credential_values(text: str) -> list[str]:
    """Values under credential keys in ``text``, however malformed it is."""
    return [match.group("value") for match in _KEYED.finditer(text)]


def raw_secrets(password: str | None, extra: Mapping[str, Any] | None) -> list[str]:
    """Every credential of a connection's raw fields (nothing parsed yet)."""
    found: list[str] = []
    if password:
        found.append(password)
    for key, value in (extra or {}).items():
        name = key.rsplit("__", 1)[-1]
        if name in _SECRET_FIELDS and value not in (None, ""):
            text = _text(value)
            found.append(text)
            found.extend(credential_values(text))
    return distinct(found)


def distinct(values: Iterable[str]) -> list[str]:
    """The usable secrets, longest first (so that a secret inside another is replaced
    after it)."""
    kept = {v for v in values if isinstance(v, str) and len(v.strip()) >= _MIN_SECRET}
    return sorted(kept, key=len, reverse=True)


def scrub(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every secret replaced by ``***``."""
    for secret in secrets:
        if secret and secret in text:
            text = text.replace(secret, "***")
    return text
