"""Errors raised by kf-trainer-suite.

Every error a user can cause carries the field it is about and the fix, so that a bad
DAG or flow fails at parse or submit time with a message that says what to change.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any


class KFTrainerError(Exception):
    """Base class of every error raised by kf-trainer-suite."""


@dataclass(frozen=True)
class FieldProblem:
    """One problem with one field of a spec: where, what, and how to fix it."""

    field: str
    problem: str
    fix: str = ""

    def __str__(self) -> str:
        text = f"{self.field or '<spec>'}: {self.problem}"
        if self.fix:
            text += f" Fix: {self.fix}"
        return text


class SpecError(KFTrainerError, ValueError):
    """A training spec that cannot become a valid TrainJob.

    Raised before anything is submitted. ``problems`` lists every field at fault; the
    message names each field and the fix.
    """

    def __init__(
        self, problems: Sequence[FieldProblem] | FieldProblem, *, title: str = "", root: str = ""
    ) -> None:
        if isinstance(problems, FieldProblem):
            problems = [problems]
        #: Problems with field paths relative to the object that was validated.
        self.problems: tuple[FieldProblem, ...] = tuple(problems)
        self.title = title or "Invalid training spec"
        #: What was validated when it was not a whole spec, e.g. "CustomTrainer".
        self.root = root
        super().__init__(self._render())

    @classmethod
    def single(cls, field: str, problem: str, fix: str = "", *, title: str = "") -> SpecError:
        """An error about one field."""
        return cls(FieldProblem(field, problem, fix), title=title)

    @property
    def fields(self) -> list[str]:
        """The fields at fault, in order, as the message names them."""
        return [self._full(p.field) for p in self.problems]

    def _full(self, field: str) -> str:
        if not self.root:
            return field
        return f"{self.root}{'' if field.startswith('[') else '.'}{field}" if field else self.root

    def _render(self) -> str:
        shown = [FieldProblem(self._full(p.field), p.problem, p.fix) for p in self.problems]
        if len(shown) == 1:
            return f"{self.title}: {shown[0]}"
        lines = "\n".join(f"  - {p}" for p in shown)
        return f"{self.title} ({len(shown)} problems):\n{lines}"

    def __reduce__(self) -> tuple[Any, ...]:
        # Keep the error picklable (Airflow and Prefect ship exceptions across processes).
        return (type(self), (list(self.problems),), {"title": self.title, "root": self.root})

    def __setstate__(self, state: dict[str, Any] | None) -> None:
        state = state or {}
        self.title = state.get("title", self.title)
        self.root = state.get("root", "")
        self.args = (self._render(),)


class ClusterConfigError(SpecError):
    """The cluster credentials of a configuration could not be loaded (a context,
    cluster or user the kubeconfig lacks, a failing exec plugin). The message has every
    secret of the configuration cut out."""


def join_problems(groups: Iterable[Sequence[FieldProblem]]) -> list[FieldProblem]:
    """Flatten groups of problems, dropping exact duplicates but keeping order."""
    seen: set[FieldProblem] = set()
    out: list[FieldProblem] = []
    for group in groups:
        for p in group:
            if p not in seen:
                seen.add(p)
                out.append(p)
    return out
