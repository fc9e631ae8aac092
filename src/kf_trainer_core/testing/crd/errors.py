"""Field errors and the apiserver's messages, formatted like
``k8s.io/apimachinery/pkg/util/validation/field`` of Kubernetes 1.36 (a scalar bad value
with Go's ``fmt`` verbs, anything else as ``encoding/json`` writes it)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Final

from kf_trainer_core.k8s.errors import status_body
from kf_trainer_core.k8s.resources import Resource


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
        """True for errors that make the apiserver skip CEL rules (wrong type, bad enum,
        a required field missing: kube-apiserver 1.36 says the rules were not checked
        after a ``Required value`` too)."""
        return self.cause_reason in (TYPE_INVALID, "FieldValueNotSupported", "FieldValueRequired")

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
        """This error as a ``metav1.StatusCause`` (what a 422 Status lists); an error of
        the object itself names its field ``<nil>``, as its message does (the nil
        ``*field.Path`` printed)."""
        return {"reason": self.cause_reason, "message": self.body(), "field": self.path or "<nil>"}

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


def _strict_decoding_error(paths: list[str]) -> str:
    # ObjectMeta's unknown fields come first (decoded on their own), then the others;
    # each part sorted, whatever the order of the body.
    meta = sorted(p for p in paths if p.startswith("metadata."))
    rest = sorted(p for p in paths if not p.startswith("metadata."))
    return "strict decoding error: " + ", ".join(
        f"unknown field {go_quote(p)}" for p in (*meta, *rest)
    )


def format_unknown_fields(paths: list[str], res: Resource) -> str:
    """The 400 message for a ``fieldValidation=Strict`` create or update of ``res``
    with undeclared fields."""
    kind, version = res.kind, res.version
    return (
        f"{kind} in version {go_quote(version)} cannot be handled as a {kind}: "
        + _strict_decoding_error(paths)
    )


def unknown_fields_in_patch(patched: Any, paths: list[str]) -> dict[str, Any]:
    """The 422 Status of a ``fieldValidation=Strict`` patch that leaves undeclared
    fields: the patched object is invalid, the field named ``patch``, its value the
    patched object as JSON (no kind, group nor name in the details)."""
    error = FieldError("patch", "Invalid value", _strict_decoding_error(paths), go_json(patched))
    return status_body(
        422, "Invalid", format_invalid("", "", "", [error]), {"causes": [error.cause()]}
    )


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


def go_json(value: Any) -> str:
    """A decoded JSON value as Go's ``json.Marshal`` writes it: keys sorted, no spaces,
    ``<``, ``>`` and ``&`` (and U+2028, U+2029) escaped, numbers as Go writes floats."""
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _json_float(value)
    if isinstance(value, str):
        text = json.dumps(value, ensure_ascii=False)
        for raw, escaped in _JSON_ESCAPES:
            text = text.replace(raw, escaped)
        return text
    if isinstance(value, dict):
        items = (f"{go_json(str(k))}:{go_json(value[k])}" for k in sorted(value, key=str))
        return "{" + ",".join(items) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(go_json(v) for v in value) + "]"
    return go_json(str(value))


_JSON_ESCAPES: Final = (
    ("<", "\\u003c"),
    (">", "\\u003e"),
    ("&", "\\u0026"),
    ("\u2028", "\\u2028"),
    ("\u2029", "\\u2029"),
)


def _json_float(number: float) -> str:
    """``encoding/json``'s float64: shortest digits, plain from 1e-6 up to 1e21, else
    with an exponent whose ``e-0N`` is written ``e-N`` (``1e-7``, ``1e+21``)."""
    if math.isnan(number) or math.isinf(number):
        return "null"  # json.Marshal refuses these; a decoded JSON body never has them
    if number == 0 or 1e-6 <= abs(number) < 1e21:
        text = format(Decimal(repr(number)), "f")
        return text.rstrip("0").rstrip(".") if "." in text else text
    text = go_float(number)  # %v: exponent form here, two digits at least
    return text.replace("e-0", "e-") if text[-3:-1] == "-0" else text


def _go_value(value: Any) -> str:
    """The bad value as ``field.Error.ErrorBody`` prints it: a boolean or number with
    ``%v``, a string with ``%q``, anything else (null, an object, a list) as JSON."""
    scalar = _go_scalar(value)
    return scalar if scalar is not None else go_json(value)
