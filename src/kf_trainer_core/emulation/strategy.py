"""The registry's rules for a write, as the generic apiserver applies them whatever
stores the object (its "strategies": PrepareForCreate, PrepareForUpdate, the patch
decoders, a delete's options). Each rule takes objects and returns objects or raises
the :class:`~kf_trainer_core.k8s.status.StatusError` the apiserver answers with; the
store that calls it holds its own lock or transaction around the read and the write."""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from typing import Any

from kf_trainer_core.base.quoting import shown
from kf_trainer_core.emulation.registry import (
    DNS1123_SUBDOMAIN,
    GENERATE_CHARS,
    JSON,
    NO_GENERATION,
    StoreError,
    ensure_meta,
    format_timestamp,
    has_status_subresource,
)
from kf_trainer_core.k8s.patch import (
    apply_json_patch,
    apply_merge_patch,
    apply_strategic_merge_patch,
    go_json_type,
    json_copy,
)
from kf_trainer_core.k8s.resources import Resource

#: The 409 of a write against a version of the object that is no longer current.
STALE = (
    "the object has been modified; please apply your changes to the latest version and try again"
)
#: Metadata only the server sets: a create drops what a client sent of it.
_SET_ON_CREATE = ("deletionTimestamp", "deletionGracePeriodSeconds", "managedFields")
#: Metadata an update keeps as stored, whatever the client sent.
_KEPT_ON_UPDATE = (
    "uid",
    "creationTimestamp",
    "namespace",
    "name",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
)
PROPAGATION_POLICIES = ("Background", "Foreground", "Orphan")


def prepare_create(
    res: Resource, obj: JSON, namespace: str | None, taken: Callable[[str, str], bool]
) -> JSON:
    """A new object as the registry stores it: a copy of ``obj`` with apiVersion and
    kind first, its namespace (the request's), a name (``generateName`` filled in),
    uid, creationTimestamp and ``generation`` 1; 400 for a namespace that disagrees
    with the request's or is missing, 422 for a missing or malformed name, 409 when
    ``taken(namespace, name)``. No resourceVersion yet: the store gives it."""
    new: JSON = {"apiVersion": res.api_version, "kind": res.kind, **json_copy(obj)}
    meta = ensure_meta(new)
    if res.namespaced:
        if namespace and meta.get("namespace") not in (None, "", namespace):
            raise StoreError.bad_request(
                "the namespace of the provided object does not match the namespace sent "
                "on the request"
            )
        ns = namespace or meta.get("namespace") or ""
        if not ns:
            raise StoreError.bad_request("the namespace of the object is required")
        meta["namespace"] = ns
    else:
        meta.pop("namespace", None)
        ns = ""
    if not meta.get("name") and meta.get("generateName"):
        meta["name"] = generate_name(str(meta["generateName"]), lambda n: taken(ns, n))
    name = str(meta.get("name") or "")
    if not name:
        raise StoreError.invalid(
            res,
            "",
            [
                (
                    "metadata.name",
                    "FieldValueRequired",
                    "Required value: name or generateName is required",
                )
            ],
        )
    check_name(res, name)
    if taken(ns, name):
        raise StoreError.already_exists(res, name)
    for system in _SET_ON_CREATE:
        meta.pop(system, None)
    meta.pop("resourceVersion", None)
    meta["uid"] = str(uuid.uuid4())
    meta["creationTimestamp"] = format_timestamp()
    if res not in NO_GENERATION:
        meta["generation"] = 1
    else:
        meta.pop("generation", None)
    return new


def generate_name(prefix: str, taken: Callable[[str], bool]) -> str:
    """``prefix`` and five random characters of the apiserver's alphabet, not taken."""
    for _ in range(100):
        name = prefix + "".join(random.choices(GENERATE_CHARS, k=5))
        if not taken(name):
            return name
    raise StoreError(500, "InternalError", "could not generate a unique name")


def check_name(res: Resource, name: str) -> None:
    """422 unless ``name`` is a DNS-1123 subdomain, as object names must be."""
    if len(name) <= 253 and DNS1123_SUBDOMAIN.match(name):
        return
    raise StoreError.invalid(
        res,
        name,
        [
            (
                "metadata.name",
                "FieldValueInvalid",
                f'Invalid value: "{name}": a lowercase RFC 1123 subdomain must consist of '
                "lower case alphanumeric characters, '-' or '.', and must start and end "
                "with an alphanumeric character (e.g. 'example.com', regex used for "
                "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*"
                "[a-z0-9])?)*')",
            )
        ],
    )


def check_version(res: Resource, name: str, current: JSON, wanted: Any) -> None:
    """409 Conflict when a write names a resourceVersion (``wanted``) other than the
    current object's: optimistic concurrency. ``None`` or empty: unconditional."""
    have = str((current.get("metadata") or {}).get("resourceVersion") or "")
    if wanted not in (None, "") and str(wanted) != have:
        raise StoreError.conflict(res, name, STALE)


def prepare_update(res: Resource, old: JSON, new: JSON, subresource: str | None) -> JSON:
    """What an update of ``old`` to ``new`` stores (before admission): through the
    ``status`` subresource only status moves; otherwise status stays as stored when the
    type has a status subresource (``"*"``, for in-process callers, writes both), and the
    system-owned metadata stays as stored. ``new`` may be changed in place."""
    old_meta = old["metadata"]
    if subresource == "status":
        merged = {k: v for k, v in old.items() if k != "status"}
        if "status" in new:
            merged["status"] = new["status"]
        return dict(json_copy(merged))
    if subresource is None and has_status_subresource(res):
        new.pop("status", None)
        if "status" in old:
            new["status"] = json_copy(old["status"])
    new.setdefault("apiVersion", res.api_version)
    new.setdefault("kind", res.kind)
    meta = ensure_meta(new)
    for system in _KEPT_ON_UPDATE:
        if system in old_meta:
            meta[system] = old_meta[system]
        else:
            meta.pop(system, None)
    return new


def finish_update(res: Resource, old: JSON, new: JSON, subresource: str | None) -> JSON:
    """After admission: ``metadata.generation`` grows when anything but metadata and
    status changed (never through the status subresource), and the object carries the
    stored resourceVersion until the store gives it a new one. Returns ``new``."""
    old_meta = old["metadata"]
    if subresource != "status" and res not in NO_GENERATION:
        ignore = ("metadata", "status")
        before = {k: v for k, v in old.items() if k not in ignore}
        after = {k: v for k, v in new.items() if k not in ignore}
        if before != after:
            new["metadata"]["generation"] = int(old_meta.get("generation", 1)) + 1
    ensure_meta(new)["resourceVersion"] = old_meta.get("resourceVersion")
    return new


def patched(res: Resource, name: str, old: JSON, patch: Any, patch_type: str = "merge") -> JSON:
    """``old`` with ``patch`` applied: ``merge`` (RFC 7386), ``json`` (RFC 6902) or
    ``strategic``; 400 for a body of the wrong JSON type, 415 for another patch type,
    422 when it does not apply, 409 when the patched metadata names a stale
    resourceVersion (a precondition, as on the apiserver)."""
    # A body of the wrong JSON type does not decode: 400, in the apiserver's words.
    if patch_type in ("merge", "strategic") and not isinstance(patch, dict):
        raise StoreError.bad_request(
            f"json: cannot unmarshal {go_json_type(patch)} into Go value of type "
            "map[string]interface {}"
        )
    if patch_type == "json" and not isinstance(patch, list):
        raise StoreError.bad_request(
            f"json: cannot unmarshal {go_json_type(patch)} into Go value of type jsonpatch.Patch"
        )
    try:
        if patch_type == "merge":
            new = apply_merge_patch(old, patch)
        elif patch_type == "strategic":
            new = apply_strategic_merge_patch(old, patch)
        elif patch_type == "json":
            new = apply_json_patch(old, patch)
        else:
            raise StoreError(
                415, "UnsupportedMediaType", f"unsupported patch type {shown(patch_type)}"
            )
    except ValueError as exc:
        raise StoreError(422, "Invalid", str(exc)) from None
    if not isinstance(new, dict):
        raise StoreError(422, "Invalid", "the patch did not produce an object")
    check_version(res, name, old, ensure_meta(new).get("resourceVersion"))
    return new


def check_propagation(policy: str) -> None:
    """400 for a propagation policy the apiserver does not know."""
    if policy not in PROPAGATION_POLICIES:
        raise StoreError.bad_request(
            f'propagationPolicy: Unsupported value: "{policy}": supported values: '
            '"Foreground", "Background", "Orphan"'
        )


def check_preconditions(
    res: Resource, name: str, obj: JSON | None, preconditions: dict[str, Any] | None
) -> JSON:
    """The object a delete may remove: 404 when there is none, 409 Conflict when its
    uid or resourceVersion is not the one the delete's preconditions give, worded as
    the registry's early check (``BeforeDelete``) words it: about the kind, not the
    resource."""
    if obj is None:
        raise StoreError.not_found(res, name)
    meta = obj.get("metadata") or {}
    for field_name, label, why in (
        ("uid", "UID", "deleted and then recreated"),
        ("resourceVersion", "ResourceVersion", "modified"),
    ):
        want = (preconditions or {}).get(field_name)
        have = str(meta.get(field_name) or "")
        if want and str(want) != have:
            kind = f"{res.kind}.{res.group}" if res.group else res.kind
            details: JSON = {"name": name, **({"group": res.group} if res.group else {})}
            raise StoreError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {kind} "{name}": the {label} in the '
                f"precondition ({want}) does not match the {label} in record ({have}). "
                f"The object might have been {why}",
                {**details, "kind": res.kind},
            )
    return obj


def mark_deleting(meta: JSON, *, foreground: bool = False) -> None:
    """What a delete that cannot remove the object at once sets on its ``metadata``:
    the ``deletionTimestamp`` (kept once set: it never moves), a zero grace period (no
    kubelet to wait for) and, for a ``Foreground`` delete, the ``foregroundDeletion``
    finalizer (once) that holds it until the garbage collector has removed its
    dependents."""
    meta.setdefault("deletionTimestamp", format_timestamp())
    meta["deletionGracePeriodSeconds"] = 0
    finalizers = list(meta.get("finalizers") or [])
    if foreground and "foregroundDeletion" not in finalizers:
        meta["finalizers"] = [*finalizers, "foregroundDeletion"]


def deleted_status(res: Resource, name: str, uid: str | None) -> JSON:
    """The ``Status`` Success a delete of a custom resource (or any registry that does
    not return the object) answers with."""
    details: JSON = {"name": name}
    if res.group:
        details["group"] = res.group
    details["kind"] = res.plural
    if uid:
        details["uid"] = uid
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": details,
    }
