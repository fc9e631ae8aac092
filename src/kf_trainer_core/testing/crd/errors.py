"""Field errors and the apiserver's messages, formatted like
``k8s.io/apimachinery/pkg/util/validation/field`` (with Go's ``fmt`` verbs for bad values)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Final

from kf_trainer_core.k8s.errors import status_body


class _Omit:
    """Marker for "no bad value to print" (``field.OmitValueType`` in Go)."""

    _instance: _Omit | None = None

    def __new__(cls) -> _Omit:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "OMIT"


#: Use as :attr:`FieldError.value` when the error should not print a value.
OMIT: Final = _Omit()

# ErrorType.String() -> the StatusCause "reason" the apiserver reports for it.
_CAUSES: Final = {
    "Not found": "FieldValueNotFound",
    "Required value": "FieldValueRequired",
    "Duplicate value": "FieldValueDuplicate",
    "Invalid value": "FieldValueInvalid",
    "Unsupported value": "FieldValueNotSupported",
    "Forbidden": "FieldValueForbidden",
    "Too long": "FieldValueTooLong",
    "Too many": "FieldValueTooMany",
    "Internal error": "InternalError",
}
# These error types never print the bad value (see field.Error.ErrorBody).
_VALUELESS: Final = frozenset({"Required value", "Forbidden", "Too long", "Internal error"})
TYPE_INVALID: Final = "FieldValueTypeInvalid"


@dataclass(frozen=True)
class FieldError:
    """One validation failure, as ``field.Error`` in the Kubernetes apimachinery.

    ``path`` is the field path (``spec.trainer.env[2].name``; empty for the object root,
    printed ``<nil>``), ``type`` the error type as printed (``Invalid value``, ``Required
    value``, ...), ``detail`` the human message and ``value`` the bad value (:data:`OMIT`
    to print none). ``reason`` overrides the StatusCause reason derived from ``type``
    (the apiserver reports wrong types as ``FieldValueTypeInvalid``).
    """

    path: str
    type: str
    detail: str
    value: Any = None
    reason: str | None = None

    @property
    def cause_reason(self) -> str:
        """The ``reason`` of the StatusCause the apiserver returns for this error."""
        return self.reason or _CAUSES.get(self.type, "FieldValueInvalid")

    @property
    def blocking(self) -> bool:
        """True for errors that make the apiserver skip CEL rules (wrong type, bad enum)."""
        return self.cause_reason in (TYPE_INVALID, "FieldValueNotSupported")

    def body(self) -> str:
        """The message without the path (``field.Error.ErrorBody``)."""
        if self.type in _VALUELESS or self.value is OMIT:
            text = self.type
        else:
            text = f"{self.type}: {_go_value(self.value)}"
        if self.detail:
            text += f": {self.detail}"
        return text

    def cause(self) -> dict[str, str]:
        """This error as a ``metav1.StatusCause`` (what a 422 Status lists)."""
        return {"reason": self.cause_reason, "message": self.body(), "field": self.path}

    def __str__(self) -> str:
        return f"{self.path or '<nil>'}: {self.body()}"


def _qualified_kind(kind: str, group: str) -> str:
    return f"{kind}.{group}" if group else kind


def _aggregate(errors: list[FieldError]) -> str:
    # utilerrors.Aggregate prints one error bare and several in brackets, each message once.
    messages = list(dict.fromkeys(str(e) for e in errors))
    if len(messages) == 1:
        return messages[0]
    return "[" + ", ".join(messages) + "]"


def format_invalid(kind: str, group: str, name: str, errors: list[FieldError]) -> str:
    """The apiserver's message for a 422 Invalid answer (``apierrors.NewInvalid``).

    ``TrainJob.trainer.kubeflow.org "my-job" is invalid: [spec.a: ..., spec.b: ...]``;
    a single error is printed without brackets.
    """
    head = f"{_qualified_kind(kind, group)} {go_quote(name)} is invalid"
    return f"{head}: {_aggregate(errors)}" if errors else head


def invalid_status(kind: str, group: str, name: str, errors: list[FieldError]) -> dict[str, Any]:
    """The full ``metav1.Status`` body of a 422 Invalid answer, causes included."""
    causes = [e.cause() for e in errors]
    details = {"name": name, "group": group, "kind": kind, "causes": causes}
    return status_body(422, "Invalid", format_invalid(kind, group, name, errors), details)


def format_unknown_fields(paths: list[str]) -> str:
    """The 400 message for ``fieldValidation=Strict`` writes with undeclared fields."""
    return "strict decoding error: " + ", ".join(f"unknown field {go_quote(p)}" for p in paths)


# Go's fmt verbs, enough of them to print bad values as the apiserver does.


def go_quote(text: str) -> str:
    """``strconv.Quote``: printable runes kept, everything else escaped."""
    out = ['"']
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch in _GO_ESCAPES:
            out.append(_GO_ESCAPES[ch])
        elif ch.isprintable():
            out.append(ch)
        else:
            code = ord(ch)
            if code < 0x80:
                out.append(f"\\x{code:02x}")
            elif code < 0x10000:
                out.append(f"\\u{code:04x}")
            else:
                out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


_GO_ESCAPES: Final = {
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\v": "\\v",
}


def go_float(number: float) -> str:
    """``%v`` of a float64: shortest digits, exponent form below 1e-4 or from 1e+06."""
    if math.isnan(number):
        return "NaN"
    if math.isinf(number):
        return "+Inf" if number > 0 else "-Inf"
    if number == 0:
        return "-0" if math.copysign(1.0, number) < 0 else "0"
    sign, digits, exponent = Decimal(repr(number)).normalize().as_tuple()
    assert isinstance(exponent, int)
    text = "".join(map(str, digits))
    point = len(text) + exponent  # position of the decimal point in the digit string
    minus = "-" if sign else ""
    exp = point - 1
    if exp < -4 or exp >= 6:  # strconv 'g' with shortest precision uses eprec = 6
        mantissa = text[0] + ("." + text[1:] if len(text) > 1 else "")
        return f"{minus}{mantissa}e{'+' if exp >= 0 else '-'}{abs(exp):02d}"
    if point <= 0:
        return f"{minus}0.{'0' * -point}{text}"
    if point >= len(text):
        return minus + text + "0" * (point - len(text))
    return f"{minus}{text[:point]}.{text[point:]}"


def _go_scalar(value: Any) -> str | None:
    """A boolean, number or string as both ``%v`` and ``%#v`` print it (else None)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return go_float(value)
    if isinstance(value, str):
        return go_quote(value)
    return None


def _go_sharp(value: Any) -> str:
    """``%#v`` of a decoded JSON value (how Duplicate errors print map keys)."""
    if value is None:
        return "interface {}(nil)"
    scalar = _go_scalar(value)
    if scalar is not None:
        return scalar
    if isinstance(value, dict):
        inner = ", ".join(f"{go_quote(str(k))}:{_go_sharp(value[k])}" for k in sorted(value))
        return "map[string]interface {}{" + inner + "}"
    if isinstance(value, list):
        return "[]interface {}{" + ", ".join(_go_sharp(v) for v in value) + "}"
    return str(value)


def _go_value(value: Any) -> str:
    """The bad value as ``field.Error.ErrorBody`` prints it."""
    if value is None:
        return '"null"'
    scalar = _go_scalar(value)
    return scalar if scalar is not None else _go_sharp(value)
