"""The pydantic base class of every spec model, and the translation of pydantic's
validation errors into :class:`~kf_trainer_core.errors.SpecError` (field + fix)."""

from __future__ import annotations

import difflib
import functools
import inspect
import re
from collections.abc import Callable, Iterable
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic_core import ErrorDetails
from typing_extensions import Self

from kf_trainer_core.base.errors import FieldProblem, SpecError
from kf_trainer_core.base.quoting import shown
from kf_trainer_core.base.secrets import token_kind

# Validators phrase their messages as "<problem> Fix: <fix>", so one string carries both.
FIX_MARK = " Fix: "

#: Fields whose values are never echoed in an error message.
_SECRET_WORDS = ("token", "secret", "password", "key", "kubeconfig_content", "cert_data")

#: Every field name of every spec model, used to suggest the intended name for a typo.
_KNOWN_FIELDS: set[str] = set()
#: The public models that declare each field name: a field given to the wrong model is
#: named with the model it belongs to, not "suggested" as a spelling of itself.
_FIELD_OWNERS: dict[str, set[str]] = {}
#: The class names of spec models: pydantic puts them in error locations as the tag of
#: a union member, where they are no field of the user's.
_MODEL_NAMES: set[str] = set()
#: Labels pydantic gives the members of unions of plain types.
_TYPE_LABELS = {"str", "int", "float", "bool", "bytes", "none", "list", "dict"}


def did_you_mean(word: str, known: Iterable[str]) -> str:
    """`` Did you mean `x`?`` for the known name closest to a misspelled ``word``, or
    ``""`` when none is close: the suggestion of every "unknown field/argument" error."""
    # The word itself is no suggestion: a name that is known is not misspelled.
    close = difflib.get_close_matches(word, sorted(set(known) - {word}), n=1, cutoff=0.75)
    return f" Did you mean `{close[0]}`?" if close else ""


def unknown_arguments_error(
    bad: Iterable[str], known: Iterable[str], *, where: str, title: str = ""
) -> SpecError:
    """The error for keyword arguments a function does not take (a decorator's or a
    component factory's), each with the spec's "did you mean" suggestion."""
    names = sorted(set(known))
    problems = [
        FieldProblem(
            name,
            "unknown argument.",
            f"remove `{name}` or correct its spelling.{did_you_mean(name, names)}",
        )
        for name in bad
    ]
    return SpecError(problems, title=title or f"Invalid arguments of {where}")


class SpecModel(BaseModel):
    """Base of all spec models: strict about unknown fields, JSON round-trippable, and
    raising :class:`SpecError` (a ``ValueError``) that names the field and the fix."""

    model_config = ConfigDict(
        extra="forbid",
        validate_assignment=True,
        validate_default=False,
        use_enum_values=False,
        ser_json_inf_nan="strings",
    )

    #: The name used in error messages for this model's own fields ("trainer", ...).
    _error_root: ClassVar[str] = ""
    #: What an error of this model is about (default: "Invalid training spec").
    _error_title: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        fields = [f for f in getattr(cls, "__annotations__", {}) if not f.startswith("_")]
        _KNOWN_FIELDS.update(fields)
        _MODEL_NAMES.add(cls.__name__)
        if not cls.__name__.startswith("_"):
            for field in fields:
                _FIELD_OWNERS.setdefault(field, set()).add(cls.__name__)
        if "_error_root" not in cls.__dict__:
            # Errors of a model built on its own read "CustomTrainer.num_nodes: ...".
            cls._error_root = cls.__name__.lstrip("_")

    def __init__(self, /, **data: Any) -> None:
        error: SpecError | None = None
        try:
            super().__init__(**data)
        except ValidationError as exc:
            error = spec_error_from(
                exc, root=self._error_root, title=self._error_title, own=type(self).model_fields
            )
        if error is not None:
            # Raised outside the handler: pydantic's error, which quotes the input
            # (perhaps a credential), is not even kept as the context.
            raise error

    @classmethod
    def parse(cls, data: Any) -> Self:
        """Validate ``data`` (a dict, a JSON object text or an instance) into this
        model, raising :class:`SpecError` on bad input. Other strings go to the model's
        own validators (a function's source, a runtime's name)."""
        error: SpecError | None = None
        try:
            if isinstance(data, (str, bytes)) and data.lstrip()[:1] in ("{", b"{"):
                return cls.model_validate_json(data)
            return cls.model_validate(data)
        except ValidationError as exc:
            error = spec_error_from(
                exc, root=cls._error_root, title=cls._error_title, own=cls.model_fields
            )
        assert error is not None
        raise error

    def to_json_dict(self) -> dict[str, Any]:
        """The JSON-compatible dict form, without fields left at ``None``."""
        return self.model_dump(mode="json", exclude_none=True)


def _loc_to_path(loc: Iterable[int | str]) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif part in _MODEL_NAMES or part in _TYPE_LABELS or _is_schema_label(part):
            # Tags of union members ("CustomTrainer", "str") and validator names are not
            # fields: leave them out of the path the user reads. Dict keys ("HF_HOME")
            # stay, whatever their case.
            continue
        else:
            path = f"{path}.{part}" if path else part
    return path


def _is_schema_label(part: str) -> bool:
    return "[" in part or part.startswith(
        ("function-", "lax-or-strict", "json-or-python", "is-instance", "chain", "constrained-")
    )


def _fix_for(err: ErrorDetails, field: str, own: Iterable[str] = ()) -> str:
    kind = err["type"]
    leaf = field.rsplit(".", 1)[-1].split("[")[0]
    ctx = err.get("ctx") or {}
    if kind == "missing":
        return f"set `{leaf}`."
    if kind == "extra_forbidden":
        # A field of the model itself is suggested from that model's fields only: the
        # spelling of another model's field would lead nowhere.
        known = set(own) if own and len(err["loc"]) == 1 else _KNOWN_FIELDS
        hint = did_you_mean(leaf, known)
        owners = sorted(_FIELD_OWNERS.get(leaf, ()))
        if owners and not hint:
            # A real field of another model (CustomTrainerContainer(command=...)): no
            # spelling to correct, so say where it belongs.
            where = " or ".join(f"`{o}`" for o in owners[:3])
            return f"remove `{leaf}`: it is a field of {where}, not of this model."
        return f"remove `{leaf}` or correct its spelling.{hint}"
    if kind in {"greater_than", "greater_than_equal", "less_than", "less_than_equal"}:
        return "use a value in the allowed range."
    if kind.startswith(("int_", "float_")):
        return "give a number."
    if kind.startswith("bool"):
        return "give true or false."
    if kind.startswith(("string_", "str")) and "pattern" not in kind:
        return "give a string."
    if kind in {"literal_error", "enum"}:
        expected = str(ctx.get("expected", "the allowed values"))
        given = err.get("input")
        hint = ""
        if isinstance(given, str) and _quotable(given):
            hint = did_you_mean(given, re.findall(r"'([^']*)'", expected))
        return f"use one of {expected}.{hint}"
    if kind in {"union_tag_invalid", "union_tag_not_found"}:
        return f"set `type` to one of {ctx.get('expected_tags', 'the known types')}."
    if kind in {"dict_type", "model_type", "model_attributes_type"}:
        return "give a mapping (dict) of fields."
    if kind.startswith("list"):
        return "give a list."
    return ""


def _quotable(value: Any) -> bool:
    """Whether an input may be quoted in an error: never one shaped like a token."""
    return not (isinstance(value, str) and token_kind(value))


def spec_error_from(
    exc: ValidationError, *, root: str = "", title: str = "", own: Iterable[str] = ()
) -> SpecError:
    """Turn a pydantic ``ValidationError`` into a :class:`SpecError` whose every line
    names the field and says how to fix it.

    Models with their own ``__init__`` (all of ours) are built through it even when
    nested, so an inner model's ``SpecError`` arrives here wrapped: its problems are
    re-rooted at the outer field rather than reported as one opaque message. ``own``:
    the failing model's field names, which a misspelled field of its own is matched to."""
    problems: list[FieldProblem] = []
    for err in exc.errors(include_url=False):
        field = _loc_to_path(err["loc"])
        message = err["msg"]
        if err["type"] == "value_error":
            message = message.removeprefix("Value error, ")
        elif err["type"] == "extra_forbidden":
            message = "unknown field"
        if isinstance(err.get("ctx", {}).get("error"), SpecError):
            # A nested validator already produced field-level problems: keep them.
            nested: SpecError = err["ctx"]["error"]
            for p in nested.problems:
                sub = p.field
                sep = "" if sub.startswith("[") else "."
                full = f"{field}{sep}{sub}" if field and sub else (field or sub)
                problems.append(FieldProblem(full, p.problem, p.fix))
            continue
        if FIX_MARK in message:
            problem, fix = message.split(FIX_MARK, 1)
        else:
            problem, fix = message, _fix_for(err, field, own)
        if not problem.endswith((".", "?", ")")):
            problem += "."
        secret = any(w in field.lower() for w in _SECRET_WORDS)
        if err["type"] not in {"value_error", "missing", "extra_forbidden"} and not secret:
            value = err.get("input")
            if not isinstance(value, (dict, list)) and value is not None and _quotable(value):
                problem = f"{problem[:-1]} (got {shown(value)})."
        problems.append(FieldProblem(field, problem, fix))
    return SpecError(problems, root=root, title=title)


_F = TypeVar("_F", bound=Callable[..., Any])


def suggest_keywords(func: _F) -> _F:
    """Make a misspelt keyword argument of ``func`` (``num_node=2``) a
    :class:`SpecError` with the spec's "did you mean" suggestion instead of Python's
    bare ``TypeError``. The signature stays as it is for type checkers."""
    known = [
        p.name
        for p in inspect.signature(func).parameters.values()
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    ]

    @functools.wraps(func)
    def checked(*args: Any, **kwargs: Any) -> Any:
        unknown = [k for k in kwargs if k not in known]
        if unknown:
            raise unknown_arguments_error(unknown, known, where=f"{func.__name__}()")
        return func(*args, **kwargs)

    return checked  # type: ignore[return-value]


def fix(problem: str, how: str) -> str:
    """Compose a validator message carrying both the problem and its fix."""
    return f"{problem}{FIX_MARK}{how}"


def field_problem(field: str, message: str) -> FieldProblem:
    """A ``"<problem> Fix: <fix>"`` message (what :func:`fix` composes) as the problem of
    ``field``."""
    problem, _, how = message.partition(FIX_MARK)
    return FieldProblem(field, problem, how)
