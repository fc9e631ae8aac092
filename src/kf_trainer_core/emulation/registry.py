"""What the emulated registry knows about each resource type, and the small vocabulary
both stores share: the served resources, which have a status subresource or a
``metadata.generation``, watch events, admission hooks, timestamps, names and
resourceVersions."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, NamedTuple

from kf_trainer_core.k8s import resources as k8s
from kf_trainer_core.k8s.objects import GENERATE_NAME_CHARS, now_iso
from kf_trainer_core.k8s.patch import json_copy
from kf_trainer_core.k8s.resources import Resource
from kf_trainer_core.k8s.status import StatusError

JSON = dict[str, Any]
Key = tuple[str, str]  # (namespace or "", name)

#: The store's failures: the one Status vocabulary of the serving side.
StoreError = StatusError


#: ``batch/v1`` Jobs: the simulated JobSet controller makes them, and the server serves
#: them as a real apiserver does (a reader can follow TrainJob -> JobSet -> Job -> Pod).
JOBS = Resource("batch", "v1", "jobs", "Job")

#: Every resource type the test server serves (the local backend serves a subset).
RESOURCES: tuple[Resource, ...] = (
    k8s.TRAINJOBS,
    k8s.TRAINING_RUNTIMES,
    k8s.CLUSTER_TRAINING_RUNTIMES,
    k8s.JOBSETS,
    JOBS,
    k8s.PODS,
    k8s.EVENTS,
    k8s.SECRETS,
    k8s.CONFIGMAPS,
    k8s.NAMESPACES,
    k8s.SERVICEACCOUNTS,
)
_BY_PATH: dict[tuple[str, str, str], Resource] = {
    (r.group, r.version, r.plural): r for r in RESOURCES
}

# Types whose CRD / registry enables the status subresource (the runtimes' CRDs do not),
# by qualified name: Kueue's Workload is named here without importing its model.
STATUS_SUBRESOURCE = frozenset(
    {"trainjobs.trainer.kubeflow.org", "jobsets.jobset.x-k8s.io", "pods", "namespaces"}
    | {"workloads.kueue.x-k8s.io"}
)
# Types without a desired state: the apiserver keeps no metadata.generation for them.
NO_GENERATION = frozenset(
    {k8s.EVENTS, k8s.SECRETS, k8s.CONFIGMAPS, k8s.SERVICEACCOUNTS, k8s.NAMESPACES}
)


def resource_for(group: str, version: str, plural: str) -> Resource | None:
    """The known :class:`Resource` served at ``group/version/plural``, or None."""
    return _BY_PATH.get((group, version, plural))


def has_status_subresource(res: Resource) -> bool:
    """Whether writes to the main resource ignore ``status`` (status subresource enabled)."""
    return res.qualified in STATUS_SUBRESOURCE


class WatchEvent(NamedTuple):
    """One change: ``type`` is ADDED, MODIFIED, DELETED or BOOKMARK."""

    type: str
    resource: Resource
    object: dict[str, Any]


#: ``(event, previous object or None)`` listener of :meth:`Store.subscribe_changes`.
ChangeCallback = Callable[[WatchEvent, "dict[str, Any] | None"], None]
#: Admission hook: ``(resource, new object, old object or None, subresource) -> object to
#: store``; raises :class:`StoreError` to reject. Runs under the store lock.
Admission = Callable[
    [Resource, "dict[str, Any]", "dict[str, Any] | None", "str | None"], "dict[str, Any]"
]


def copy_obj(obj: JSON) -> JSON:
    """A deep copy of one stored object."""
    copied: JSON = json_copy(obj)
    return copied


#: RFC 3339 UTC with seconds precision, as ``metav1.Time`` serialises (now, or ``when``).
format_timestamp = now_iso


DNS1123_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z"
)
GENERATE_CHARS = GENERATE_NAME_CHARS  # the apiserver's alphabet (no vowels)


def ensure_meta(obj: JSON) -> JSON:
    """``obj``'s metadata, made an empty object when missing or malformed."""
    m = obj.get("metadata")
    if not isinstance(m, dict):
        m = {}
        obj["metadata"] = m
    return m


def sort_key(obj: JSON) -> tuple[str, str]:
    """The (namespace, name) order lists are sorted in."""
    meta = obj["metadata"]
    return (str(meta.get("namespace") or ""), str(meta["name"]))


def parse_rv(rv: str) -> int:
    """A resourceVersion as a number; 400 when it is not one."""
    try:
        value = int(rv)
        if value < 0:
            raise ValueError(rv)
        return value
    except (TypeError, ValueError):
        raise StoreError.bad_request(
            f'resourceVersion: Invalid value: "{rv}": must be a non-negative integer'
        ) from None
