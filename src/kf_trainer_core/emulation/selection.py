"""What a list or a watch selects: a namespace, a label selector and a field selector,
parsed from the query as the apiserver parses them (a 400 in its words when malformed,
or when the resource's registry does not support a field) and matched the same way by
both stores' lists and both servers' watches — including how a watch reports an object
entering or leaving its selector (ADDED, DELETED)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from kf_trainer_core.emulation.registry import JSON
from kf_trainer_core.k8s.resources import Resource
from kf_trainer_core.k8s.selectors import FieldSelector, LabelSelector


@dataclass(frozen=True)
class Selector:
    """Namespace (``None``: every namespace), labels and fields."""

    namespace: str | None = None
    labels: LabelSelector = field(default_factory=LabelSelector)
    fields: FieldSelector = field(default_factory=FieldSelector)

    @classmethod
    def parse(
        cls,
        namespace: str | None,
        label_selector: str | None,
        field_selector: str | None,
        kind: Resource | None = None,
    ) -> Selector:
        """Parse the query's selectors: 400 in the apiserver's words when malformed, or
        when ``kind``'s registry does not support a field (as a cluster refuses it). A
        cluster-scoped ``kind`` selects across namespaces whatever was asked."""
        if kind is not None and not kind.namespaced:
            namespace = None
        return cls(
            namespace or None,
            LabelSelector.parse(label_selector),
            FieldSelector.parse(field_selector, kind),
        )

    @property
    def everything(self) -> bool:
        """Whether labels and fields select every object (the namespace aside)."""
        return self.labels.empty and self.fields.empty

    def matches(self, obj: JSON) -> bool:
        """Whether ``obj`` is selected by its labels and fields."""
        meta = obj.get("metadata") or {}
        return self.labels.matches(meta.get("labels")) and self.fields.matches(obj)

    def in_namespace(self, namespace: str | None) -> bool:
        """Whether an object of ``namespace`` lies in the selected namespace."""
        return self.namespace is None or namespace == self.namespace

    def select(self, objects: Iterable[JSON]) -> list[JSON]:
        """The selected ones of ``objects``, in their order."""
        if self.everything:
            return [o for o in objects if self.in_namespace(o["metadata"].get("namespace"))]
        return [
            o
            for o in objects
            if self.in_namespace(o["metadata"].get("namespace")) and self.matches(o)
        ]

    def reported(
        self, event_type: str, obj: JSON, previous: JSON | None
    ) -> tuple[str, JSON] | None:
        """How a watch with this selector reports a change (``previous``: the object
        before it, ``None`` when unknown or created), as the apiserver's watch cache
        does: an object that starts matching is ADDED, one that matched before and
        after is MODIFIED, one that stops is DELETED — carrying its previous state (the
        last one the watch selected) at the change's resourceVersion; ``None``: not
        reported. Returns the event's type and the object it carries."""
        if not self.in_namespace(obj["metadata"].get("namespace")):
            return None
        if self.everything:
            return event_type, obj
        if event_type == "DELETED":
            selected = self.matches(previous if previous is not None else obj)
            return (event_type, obj) if selected else None
        now = self.matches(obj)
        before = previous is not None and event_type != "ADDED" and self.matches(previous)
        if now:
            return ("MODIFIED" if before else "ADDED"), obj
        if before:
            assert previous is not None
            version = obj["metadata"].get("resourceVersion")
            left = {**previous, "metadata": {**previous["metadata"], "resourceVersion": version}}
            return "DELETED", left
        return None
