"""What a credential looks like: the shapes of well-known tokens, refused in a spec
whatever variable holds them and masked wherever an input is quoted. Pure (``re``
only): the model base and the field checks share it.
"""

from __future__ import annotations

import re

#: Shapes of well-known tokens: refused whatever variable holds them.
TOKEN_SHAPES = (
    ("a HuggingFace token", re.compile(r"\bhf_[A-Za-z0-9]{20,}")),
    ("a GitHub token", re.compile(r"\b(gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{40,})")),
    ("a GitLab token", re.compile(r"\bglpat-[A-Za-z0-9_-]{20,}")),
    ("an AWS access key id", re.compile(r"\b(AKIA|ASIA)[A-Z0-9]{16}\b")),
    ("an API key", re.compile(r"\bsk-[A-Za-z0-9_-]{20,}")),
    ("a Slack token", re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}")),
    ("a private key", re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----")),
    ("a JSON web token", re.compile(r"\beyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.")),
    # scheme://user:password@host anywhere in a value (a database URL in an env value, a
    # requirement's direct URL, an argument): the rule a storage_uri of that shape meets.
    ("a password inside a URL", re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*:[^/\s@]+@")),
)


def token_kind(value: str) -> str | None:
    """What kind of credential ``value`` looks like (``"a GitHub token"``), or ``None``."""
    return next((kind for kind, shape in TOKEN_SHAPES if shape.search(value)), None)
