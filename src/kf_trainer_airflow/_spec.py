"""The operator's spec arguments in a form Airflow can template, and back.

Airflow renders template fields recursively through strings, lists and dicts, and leaves
other objects alone. So the operator keeps the spec in its JSON form — every string in
``func_args``, initializer URIs, labels... can then hold ``{{ ds }}`` or an XCom — except
the training function's source: Jinja would read ``{{``, ``{%`` or ``{#`` in Python code
as template syntax. The function travels wrapped in :class:`Verbatim`, which the
renderer does not enter.

Nothing here imports Airflow.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from kf_trainer_core.errors import SpecError
from kf_trainer_core.tasks import checks, shown

if TYPE_CHECKING:
    from kf_trainer_core.spec import TrainJobSpec

# kf_trainer_core.spec (the pydantic models) is imported where a spec is built, not
# here: operator modules must stay cheap to import for the DAG processor.

_JINJA = ("{{", "{%")
#: The operator's spec arguments that are templated (also its first template fields).
TEMPLATED_SPEC_ARGUMENTS = ("spec", "runtime", "trainer", "initializer", "options", "func_args")
#: The operator's arguments that :func:`assemble` turns into a spec.
SPEC_ARGUMENTS = (*TEMPLATED_SPEC_ARGUMENTS, "job_name", "job_timeout")


class Verbatim:
    """A value that template rendering must leave as it is (a function's source)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Verbatim) and other.value == self.value

    def __hash__(self) -> int:
        return hash(json.dumps(self.value, sort_keys=True, default=str))

    def __repr__(self) -> str:
        name = None
        if isinstance(self.value, dict):
            name = self.value.get("name") or self.value.get("ref")
        return f"<function {name}>" if name else "<function>"

    def __reduce__(self) -> tuple[Any, ...]:
        return (Verbatim, (self.value,))


def _json(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", exclude_none=True)
    return value


def _protect_trainer(trainer: Any) -> Any:
    """The trainer's JSON form with its function wrapped (captured now if it is a
    Python function, so a closure or lambda fails when the DAG is parsed)."""
    trainer = _json(trainer)
    if not isinstance(trainer, Mapping):
        return trainer
    out = dict(trainer)
    func = out.get("func")
    if func is not None and not isinstance(func, Verbatim):
        if callable(func) or isinstance(func, BaseModel):
            from kf_trainer_core.spec import TrainFunction

            func = TrainFunction.parse(func).model_dump(mode="json", exclude_none=True)
        out["func"] = Verbatim(func)
    return out


def template_form(value: Any, *, part: str) -> Any:
    """``value`` (a model, a dict, a JSON or YAML text for ``spec``) as templatable
    JSON, the function protected. ``part`` is the argument's name."""
    if value is None:
        return None
    if part == "spec":
        if isinstance(value, str):
            value = checks.spec_mapping(value.strip(), "spec")
        value = _json(value)
        if isinstance(value, Mapping):
            value = dict(value)
            if value.get("trainer") is not None:
                value["trainer"] = _protect_trainer(value["trainer"])
        return value
    if part == "trainer":
        return _protect_trainer(value)
    if part == "options":
        return [_json(o) for o in value] if isinstance(value, (list, tuple)) else value
    return _json(value)


def plain(value: Any) -> Any:
    """The value with every :class:`Verbatim` unwrapped (the spec's JSON form)."""
    if isinstance(value, Verbatim):
        return value.value
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def looks_templated(value: Any) -> bool:
    """Whether rendering could still change ``value``: a Jinja string or an object
    (an XComArg...) that Airflow resolves at run time."""
    if isinstance(value, Verbatim) or value is None or isinstance(value, (bool, int, float)):
        return False
    if isinstance(value, str):
        return any(mark in value for mark in _JINJA)
    if isinstance(value, Mapping):
        return any(looks_templated(k) or looks_templated(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return any(looks_templated(v) for v in value)
    return True


def deadline_seconds(timeout: float | timedelta | None) -> int | None:
    """A job timeout as whole seconds for ``activeDeadlineSeconds`` (rounded up)."""
    if timeout is None:
        return None
    seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else float(timeout)
    if seconds <= 0:
        raise SpecError.single(
            "job_timeout",
            f"must be positive (got {shown(timeout)}).",
            "give seconds or a timedelta.",
        )
    return max(1, math.ceil(seconds))


def assemble(arguments: Mapping[str, Any]) -> TrainJobSpec:
    """The :class:`TrainJobSpec` the operator's (rendered) arguments describe:
    ``arguments`` holds the values of :data:`SPEC_ARGUMENTS` by name (one left out is
    ``None``), as the operator's parameters of those names document them.

    ``spec`` and the parts (``runtime``, ``trainer``, ``initializer``, ``options``) are
    alternatives; ``func_args`` is merged into a ``CustomTrainer``'s arguments,
    ``job_name`` becomes the ``Name`` option and ``job_timeout`` the
    ``ActiveDeadlineSeconds`` option. Raises :class:`SpecError` naming the argument.
    """
    from kf_trainer_core.spec import TrainJobSpec, trainer_type

    spec, options = arguments.get("spec"), arguments.get("options")
    func_args, job_name = arguments.get("func_args"), arguments.get("job_name")
    parts = {k: arguments.get(k) for k in ("runtime", "trainer", "initializer")}
    if spec is not None:
        given = [k for k, v in {**parts, "options": options}.items() if v is not None]
        if given:
            raise SpecError.single(
                given[0],
                "is given together with `spec`.",
                "put it inside `spec`, or pass the parts without `spec`.",
            )
        data = plain(template_form(spec, part="spec"))
        if not isinstance(data, Mapping):
            raise SpecError.single("spec", "is not a mapping.", "pass a dict or TrainJobSpec.")
        data = dict(data)
    else:
        data = {k: plain(template_form(v, part=k)) for k, v in parts.items() if v is not None}
        if options is not None:
            data["options"] = plain(template_form(options, part="options"))
    if func_args:
        trainer_data = data.get("trainer")
        # A hand-written trainer may leave out its tag: the spec's rule tells its kind.
        if not isinstance(trainer_data, Mapping) or trainer_type(trainer_data) != "CustomTrainer":
            raise SpecError.single(
                "func_args",
                "applies to a CustomTrainer only.",
                "drop func_args, or use CustomTrainer(func, ...).",
            )
        merged = dict(trainer_data)
        merged["func_args"] = {**(trainer_data.get("func_args") or {}), **dict(func_args)}
        data["trainer"] = merged
    extra: list[dict[str, Any]] = []
    if job_name:
        extra.append({"type": "Name", "name": job_name})
    seconds = deadline_seconds(arguments.get("job_timeout"))
    if seconds is not None:
        extra.append({"type": "ActiveDeadlineSeconds", "seconds": seconds})
    if extra:
        replaced = {o["type"] for o in extra}
        kept = [
            o
            for o in (data.get("options") or [])
            if not (isinstance(o, Mapping) and o.get("type") in replaced)
        ]
        data["options"] = [*kept, *extra]
    return TrainJobSpec.parse(data)
