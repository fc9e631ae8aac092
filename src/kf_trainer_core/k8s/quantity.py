"""Kubernetes resource quantities (``"4"``, ``"500m"``, ``"16Gi"``, ``"1e3"``) as numbers.

Written here rather than taken from ``kubernetes.utils``: importing that package loads
the whole synchronous client (~900 modules, most of a second where no bytecode cache is
written), and the simulated kubelet, which parses a pod's requests, paid it on the first
pod it admitted — inside whatever a caller was measuring.
"""

from __future__ import annotations

import re
from decimal import Decimal, DecimalException
from typing import Any

from kf_trainer_core.base.quoting import shown

__all__ = ["parse_quantity"]

_BINARY = {f"{p}i": Decimal(1024) ** (i + 1) for i, p in enumerate("KMGTPE")}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}
_QUANTITY = re.compile(
    r"(?P<number>[+-]?(?:\d+(?:\.\d*)?|\.\d+))"
    r"(?P<suffix>[KMGTPE]i|[eE][+-]?\d+|[numkMGTPE]?)"
)


def parse_quantity(value: Any) -> Decimal:
    """``value`` (a quantity string or a number) as an exact number; ``ValueError`` for
    anything that is not a Kubernetes quantity."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return Decimal(str(value))
    text = str(value).strip()
    match = _QUANTITY.fullmatch(text)
    if match is None:
        raise ValueError(f"{shown(text)} is not a Kubernetes quantity (e.g. 4, 500m, 16Gi)")
    number, suffix = Decimal(match["number"]), match["suffix"]
    try:
        if suffix in _BINARY:
            return number * _BINARY[suffix]
        if suffix in _DECIMAL:  # "E" alone is exa, not an exponent
            return number * _DECIMAL[suffix]
        return number.scaleb(int(suffix[1:]))  # an exponent
    except DecimalException as exc:
        # Too large for Decimal's context: an exponent past its limits raises
        # InvalidOperation, a result past them Overflow, which is no ValueError.
        raise ValueError(f"{shown(text)} is out of range") from exc
