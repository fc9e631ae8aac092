"""How an error quotes a value it is about: cut, credentials masked (``shown``).

Every ``raise`` of the suite quotes values through :func:`shown`, never a raw ``repr``
(``tests/core/test_error_reprs.py`` holds the source to that): a wrong argument may be
any object, and an error names it, it does not print it.
"""

from __future__ import annotations

import re

from kf_trainer_core.base.secrets import TOKEN_SHAPES

#: At most this many characters of a value's ``repr`` go into an error message.
SHOWN_LIMIT = 200

#: ``user:password@`` with or without a scheme before it (a malformed URL included).
_USER_PASSWORD = re.compile(r"[^\s/@:]*:[^\s/@]+@")


def shown(value: object, limit: int = SHOWN_LIMIT) -> str:
    """``value`` as an error message may quote it: its ``repr``, with everything shaped
    like a credential masked (a URL's ``user:password@``, every token shape), cut to
    ``limit`` characters. A wrong argument may be any object (a ``Submitted`` carries
    its whole generated program): an error quotes it to name it, not to print it. A
    ``repr`` that raises is replaced by the type's name. Every ``raise`` of the suite
    quotes values through it."""
    try:
        text = repr(value)
    except Exception:
        return f"<{type(value).__name__} object>"
    whole = len(text)
    # Masked before the cut, on a bounded prefix: a token split by the cut stays masked.
    text = _USER_PASSWORD.sub("***@", text[: limit * 4])
    for _, shape in TOKEN_SHAPES:
        text = shape.sub("***", text)
    if len(text) <= limit:
        return text
    return f"{text[: max(limit - 40, 20)]}… [{type(value).__name__}, {whole:,} characters]"
