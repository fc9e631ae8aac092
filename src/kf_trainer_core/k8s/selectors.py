"""Label and field selectors: the apiserver's grammar, parsed and matched once for the
whole suite (the test server, the local backend and the informer's predicate).

Labels: ``a=b,c==d,e!=f,g in (h,i),j notin (k),l,!m``. Fields:
``metadata.name=x,status.phase!=Running``, limited per resource to what its registry
supports when a resource is given. Malformed selectors raise
:class:`~kf_trainer_core.k8s.status.StatusError` 400 in the apiserver's words.

Standard library only (the local backend's supervisor imports it).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from kf_trainer_core.base.quoting import shown
from kf_trainer_core.k8s.resources import EVENTS, NAMESPACES, PODS, SECRETS, Resource
from kf_trainer_core.k8s.status import StatusError

__all__ = ["FIELD_SELECTORS", "FieldSelector", "LabelSelector", "field_value", "valid_label_value"]

_LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?\Z"
)
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?\Z")
_SET_TERM = re.compile(r"^(\S+)\s+(in|notin)\s*\((.*)\)\Z")


def valid_label_value(value: str) -> bool:
    """Whether ``value`` may be a label value (empty, or ≤ 63 alphanumerics with
    ``-_.`` inside)."""
    return len(value) <= 63 and _LABEL_VALUE.match(value) is not None


@dataclass(frozen=True)
class Requirement:
    """One term of a label selector."""

    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!"
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether labels satisfy this term."""
        present = self.key in labels
        if self.op == "exists":
            return present
        if self.op == "!":
            return not present
        if self.op in ("=", "in"):
            return present and labels[self.key] in self.values
        # "!=" and "notin" match objects without the label, as Kubernetes does.
        return not present or labels[self.key] not in self.values


def _split_terms(text: str) -> Iterator[str]:
    # Commas separate requirements except inside the parentheses of in/notin sets.
    depth, start = 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            yield text[start:i].strip()
            start = i + 1
    yield text[start:].strip()


def _bad(why: str) -> StatusError:
    return StatusError.bad_request(f"unable to parse requirement: {why}")


@dataclass(frozen=True)
class LabelSelector:
    """A parsed label selector (``a=b,c!=d,e in (f,g),h notin (i),j,!k``)."""

    requirements: tuple[Requirement, ...] = ()

    @classmethod
    def parse(cls, text: str | None) -> LabelSelector:
        """Parse; :class:`StatusError` 400 on bad syntax, as the apiserver answers."""
        if not text or not text.strip():
            return cls()
        return cls(tuple(cls._parse_term(term, text) for term in _split_terms(text)))

    @staticmethod
    def _parse_term(term: str, whole: str) -> Requirement:
        if not term:
            raise _bad(f"found '', expected: identifier in {shown(whole)}")
        key: str
        op: str
        values: list[str]
        if term.startswith("!"):
            key, op, values = term[1:].strip(), "!", []
        elif m := _SET_TERM.match(term):
            key, op = m.group(1), m.group(2)
            values = [v.strip() for v in m.group(3).split(",")]
        elif "!=" in term:
            key, _, v = term.partition("!=")
            op, values = "!=", [v.strip()]
        elif "=" in term:
            key, _, v = term.replace("==", "=", 1).partition("=")
            op, values = "=", [v.strip()]
        else:
            key, op, values = term, "exists", []
        key = key.strip()
        if not _LABEL_KEY.match(key) or len(key.rpartition("/")[2]) > 63:
            raise _bad(
                f'key: Invalid value: "{key}": name part must consist of alphanumeric '
                "characters, '-', '_' or '.', and must start and end with an "
                "alphanumeric character"
            )
        for v in values:
            if not valid_label_value(v):
                raise _bad(
                    f'values[0][{key}]: Invalid value: "{v}": a valid label must be an '
                    "empty string or consist of alphanumeric characters, '-', '_' or "
                    "'.', and must start and end with an alphanumeric character"
                )
        return Requirement(key, op, frozenset(values))

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        """Whether an object with these labels is selected."""
        labels = labels or {}
        return all(r.matches(labels) for r in self.requirements)

    @property
    def empty(self) -> bool:
        """True when it selects everything."""
        return not self.requirements


def field_value(obj: Mapping[str, Any], path: str) -> str:
    """The value at a field selector's dotted ``path`` in ``obj``, as text ("" when
    absent; booleans as ``true``/``false``)."""
    cur: Any = obj
    for part in path.split("."):
        if not isinstance(cur, dict):
            return ""
        cur = cur.get(part)
    if cur is None:
        return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return str(cur)


#: Field selectors each registry supports beyond metadata.name / metadata.namespace.
FIELD_SELECTORS: dict[Resource, frozenset[str]] = {
    PODS: frozenset(
        {
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        }
    ),
    EVENTS: frozenset(
        {
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        }
    ),
    SECRETS: frozenset({"type"}),
    NAMESPACES: frozenset({"status.phase"}),
}


@dataclass(frozen=True)
class FieldSelector:
    """A parsed field selector (``metadata.name=x,status.phase!=Running``)."""

    terms: tuple[tuple[str, bool, str], ...] = ()  # (field, equal?, value)

    @classmethod
    def parse(cls, text: str | None, res: Resource | None = None) -> FieldSelector:
        """Parse; with ``res``, fields its registry does not support are 400."""
        if not text or not text.strip():
            return cls()
        terms: list[tuple[str, bool, str]] = []
        for term in _split_terms(text):
            if "!=" in term:
                f, _, v = term.partition("!=")
                eq = False
            elif "=" in term:
                f, _, v = term.replace("==", "=", 1).partition("=")
                eq = True
            else:
                raise StatusError.bad_request(
                    f"invalid selector: '{text}'; can't understand '{term}'"
                )
            f = f.strip()
            if res is not None:
                _check_field(f, res)
            terms.append((f, eq, v.strip()))
        return cls(tuple(terms))

    def matches(self, obj: Mapping[str, Any]) -> bool:
        """Whether ``obj`` is selected."""
        return all((field_value(obj, f) == v) == eq for f, eq, v in self.terms)

    @property
    def empty(self) -> bool:
        """True when it selects everything."""
        return not self.terms


def _check_field(name: str, res: Resource) -> None:
    if name in ("metadata.name", "metadata.namespace"):
        return
    if name in FIELD_SELECTORS.get(res, frozenset()):
        return
    if res.group:  # custom resources: the apiextensions wording
        raise StatusError.bad_request(
            f'"{name}" is not a known field selector: only "metadata.name", "metadata.namespace"'
        )
    raise StatusError.bad_request(f"field label not supported: {name}")
