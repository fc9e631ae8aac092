""":class:`CRDSchema`: one CRD version, its defaulting, pruning and validation entry points."""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from kf_trainer_core.testing.crd.cel import CELCompileError, compile_rule
from kf_trainer_core.testing.crd.defaulting import fill_defaults, prune_fields
from kf_trainer_core.testing.crd.errors import FieldError, format_invalid
from kf_trainer_core.testing.crd.meta import validate_object_meta
from kf_trainer_core.testing.crd.rules import run_rules
from kf_trainer_core.testing.crd.schema import MISSING, Node
from kf_trainer_core.testing.crd.validation import NOT_CHECKED, Validation


class CRDSchema:
    """One version of a CustomResourceDefinition, ready to default, prune and validate.

    Build it with :meth:`from_file` or :meth:`from_dict`. The instance is safe to share
    between threads; it caches compiled schema nodes and CEL programs.
    """

    group: str
    kind: str
    plural: str
    singular: str
    list_kind: str
    short_names: tuple[str, ...]
    namespaced: bool
    version: str
    served_versions: tuple[str, ...]
    storage_version: str
    has_status_subresource: bool
    schema: dict[str, Any]

    def __init__(self, crd: dict[str, Any], version: str | None = None) -> None:
        spec = crd.get("spec") or {}
        names = spec.get("names") or {}
        versions: list[dict[str, Any]] = spec.get("versions") or []
        if not versions:
            raise ValueError("CRD has no spec.versions")
        storage = [v for v in versions if v.get("storage")]
        self.storage_version = str((storage or versions)[0]["name"])
        if version is None:
            chosen = (storage or versions)[0]
        else:
            matches = [v for v in versions if v.get("name") == version]
            if not matches:
                raise ValueError(
                    f"CRD {crd.get('metadata', {}).get('name')} has no version {version!r}"
                )
            chosen = matches[0]
        schema = (chosen.get("schema") or {}).get("openAPIV3Schema")
        if not isinstance(schema, dict):
            raise ValueError(f"version {chosen.get('name')} has no openAPIV3Schema")
        self.group = str(spec.get("group", ""))
        self.kind = str(names.get("kind", ""))
        self.plural = str(names.get("plural", ""))
        self.singular = str(names.get("singular") or self.kind.lower())
        self.list_kind = str(names.get("listKind") or f"{self.kind}List")
        self.short_names = tuple(names.get("shortNames") or ())
        self.namespaced = spec.get("scope", "Namespaced") == "Namespaced"
        self.version = str(chosen["name"])
        self.served_versions = tuple(str(v["name"]) for v in versions if v.get("served", True))
        subresources = chosen.get("subresources") or {}
        self.has_status_subresource = "status" in subresources
        self.schema = schema
        self._root = Node(schema)

    @classmethod
    def from_file(cls, path: str | Path, version: str | None = None) -> CRDSchema:
        """Load the CRD in ``path`` (the first YAML document that is a CRD)."""
        return cls.from_dict(read_crd(Path(path)), version)

    @classmethod
    def from_dict(cls, crd: dict[str, Any], version: str | None = None) -> CRDSchema:
        """Build from a decoded CRD; ``version`` defaults to the storage version."""
        return cls(crd, version)

    @property
    def name(self) -> str:
        """The CRD's name, ``<plural>.<group>``."""
        return f"{self.plural}.{self.group}"

    @property
    def api_version(self) -> str:
        """``<group>/<version>`` of the chosen version."""
        return f"{self.group}/{self.version}" if self.group else self.version

    def __repr__(self) -> str:
        return f"CRDSchema({self.name!r}, version={self.version!r})"

    # -- schema lookup -------------------------------------------------------------

    def schema_at(self, path: str) -> dict[str, Any] | None:
        """Raw schema of a field path (``spec.trainer.env[0].name``; ``[]`` = any item)."""
        node: Node | None = self._root
        for token in re.findall(r"[^.\[\]]+|\[[^\]]*\]", path):
            if node is None:
                return None
            if token.startswith("["):
                if node.type == "array" or node.items is not None:
                    node = node.items
                else:
                    node = node.child(token[1:-1].strip("'\""))[0]
            else:
                node = node.child(token)[0]
        return node.raw if node is not None else None

    def iter_rules(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """Every ``x-kubernetes-validations`` entry as ``(schema path, rule)``."""

        def walk(raw: dict[str, Any], path: str) -> Iterator[tuple[str, dict[str, Any]]]:
            for rule in raw.get("x-kubernetes-validations") or []:
                yield path, rule
            for name, child in (raw.get("properties") or {}).items():
                yield from walk(child, f"{path}.{name}" if path else name)
            if isinstance(raw.get("items"), dict):
                yield from walk(raw["items"], f"{path}[]")
            if isinstance(raw.get("additionalProperties"), dict):
                yield from walk(raw["additionalProperties"], f"{path}[*]")

        return walk(self.schema, "")

    def compile_rules(self) -> int:
        """Compile every CEL rule (and message expression); return how many rules.

        Raises :class:`CELCompileError` naming the first rule that cannot run here.
        """
        count = 0
        for path, raw in self.iter_rules():
            try:
                compile_rule(raw)
            except CELCompileError as exc:
                raise CELCompileError(f"{self.name} {path or '<root>'}: {exc}") from exc
            count += 1
        return count

    # -- defaulting and pruning ------------------------------------------------------

    def apply_defaults(self, obj: dict[str, Any]) -> dict[str, Any]:
        """A deep copy of ``obj`` with the schema's ``default`` values filled in.

        Structural defaulting as in the apiserver: a default applies where the parent
        object exists and the field is absent (or null and not nullable); defaulted
        values are themselves defaulted; list items and map values are defaulted;
        nothing is invented inside schemaless (preserve-unknown-fields) parts. ObjectMeta
        is left alone.
        """
        out = copy.deepcopy(obj)
        fill_defaults(out, self._root, is_root=True)
        return out

    def unknown_fields(self, obj: dict[str, Any]) -> list[str]:
        """Paths of fields the schema does not declare.

        These are what ``fieldValidation=Strict`` rejects (``unknown field "spec.foo"``)
        and what the apiserver silently drops otherwise. Honours
        ``x-kubernetes-preserve-unknown-fields``, ``additionalProperties`` and embedded
        resources; top-level ``metadata`` is checked against ObjectMeta's fields.
        """
        found: list[str] = []
        prune_fields(obj, self._root, (), found, remove=False, is_root=True)
        return found

    def prune(self, obj: dict[str, Any], *, drop_nulls: bool = True) -> dict[str, Any]:
        """A deep copy of ``obj`` without unknown fields, as the apiserver stores it.

        With ``drop_nulls`` (the apiserver's behaviour) null values of non-nullable
        fields that have no default are removed too.
        """
        out = copy.deepcopy(obj)
        prune_fields(out, self._root, (), [], remove=True, is_root=True, drop_nulls=drop_nulls)
        return out

    # -- validation ------------------------------------------------------------------

    def validate(
        self,
        obj: dict[str, Any],
        old: dict[str, Any] | None = None,
        *,
        subresource: str | None = None,
        ratcheting: bool = True,
    ) -> list[FieldError]:
        """Validate a (defaulted, pruned) object; return the errors, apiserver order.

        ``old`` makes this an update: transition rules (those using ``oldSelf``) run
        against the correlated old values, and with ``ratcheting`` errors in unchanged
        parts are ignored as Kubernetes >= 1.30 does. ``subresource=None`` validates a
        main-resource write, which ignores ``status``; ``subresource="status"``
        validates only ``status``.
        """
        if subresource not in (None, "status"):
            raise ValueError(f"unsupported subresource {subresource!r}")
        if not isinstance(obj, dict):
            raise TypeError("obj must be a decoded JSON object")
        run = Validation(old, ratcheting)
        meta_errors: list[FieldError] = []
        if subresource == "status":
            status_node = self._root.prop("status")
            if status_node is not None and "status" in obj:
                old_status = old.get("status", MISSING) if old is not None else MISSING
                run.walk(obj["status"], status_node, ("status",), old_status, False)
        else:
            meta_errors = validate_object_meta(obj.get("metadata"))
            main = {k: v for k, v in obj.items() if k != "status"}
            old_main = (
                {k: v for k, v in old.items() if k != "status"} if old is not None else MISSING
            )
            run.walk(main, self._root, (), old_main, False)
        errors = meta_errors + run.schema_errors + run.list_errors
        if run.jobs:
            if any(e.blocking for e in errors):
                errors.append(FieldError("", "Invalid value", NOT_CHECKED, None))
            else:
                errors.extend(run_rules(run.jobs, run.ratcheting))
        return errors

    def check(
        self,
        obj: dict[str, Any],
        old: dict[str, Any] | None = None,
        *,
        subresource: str | None = None,
    ) -> None:
        """Raise ``ValueError`` with the apiserver's 422 message if ``obj`` is invalid."""
        errors = self.validate(obj, old, subresource=subresource)
        if errors:
            name = str((obj.get("metadata") or {}).get("name", ""))
            raise ValueError(format_invalid(self.kind, self.group, name, errors))


_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml is ~20x faster


def read_crd(path: Path) -> dict[str, Any]:
    with path.open("rb") as handle:
        for document in yaml.load_all(handle, Loader=_Loader):
            if isinstance(document, dict) and document.get("kind") == "CustomResourceDefinition":
                return document
    raise ValueError(f"{path} holds no CustomResourceDefinition")
